package testsuite

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"testing"

	"github.com/cairn-registry/cairn/internal/storage/driver"
)

// testConcat checks, for a driver that joins files on the storage service,
// that the result is exactly the ranges' bytes in order, for the mixes an
// upload's chunks come in: chunks of client sizes (over S3's 5 MiB part
// minimum), short ones between them, many tiny ones (over GCS's 32 objects
// per compose), an empty join; that dst is replaced whole, the sources stay,
// and that a missing source or a range past its end fails with dst as it
// was. A driver may refuse ranges that are not whole files with
// ErrUnsupported, writing nothing.
func testConcat(t *testing.T, d driver.Driver, base string) {
	c := capability[driver.Concatenator](t, d, "join files")
	ctx := context.Background()
	files := map[string][]byte{}
	file := func(name string, seed uint64, n int) string {
		p := base + "/src/" + name
		files[p] = randomBytes(seed, n)
		put(t, d, p, files[p])
		return p
	}
	big1 := file("big1", 1, 6<<20+3)
	small1 := file("small1", 2, 100<<10)
	big2 := file("big2", 3, 9<<20)
	small2 := file("small2", 4, 1<<20)
	small3 := file("small3", 5, 2<<20+1)
	var tiny []string
	for i := range 40 {
		tiny = append(tiny, file(fmt.Sprintf("tiny%02d", i), uint64(10+i), 50<<10+i))
	}
	whole := func(ps ...string) []driver.FileRange {
		rs := make([]driver.FileRange, len(ps))
		for i, p := range ps {
			rs[i] = driver.FileRange{Path: p, Length: int64(len(files[p]))}
		}
		return rs
	}
	expect := func(rs []driver.FileRange) []byte {
		var b []byte
		for _, r := range rs {
			b = append(b, files[r.Path][r.Offset:r.Offset+r.Length]...)
		}
		return b
	}
	dst := base + "/blobs/data"
	cases := []struct {
		name   string
		ranges []driver.FileRange
	}{
		{"chunks of client sizes", whole(big1, big2, big1)},
		{"short chunks between", whole(big1, small1, big2, small2, small3)},
		{"short first", whole(small1, big2, big2, small2)},
		{"all short", whole(small1, small2, small3)},
		{"one file", whole(big2)},
		{"many tiny", whole(tiny...)},
		{"empty", nil},
		{"prefixes", []driver.FileRange{{Path: big1, Length: 5 << 20}, {Path: small1, Length: 10}, {Path: big2, Offset: 0, Length: 8 << 20}}},
		{"inner ranges", []driver.FileRange{{Path: big2, Offset: 1 << 20, Length: 7 << 20}, {Path: small1, Offset: 7, Length: 1000}}},
	}
	for _, tc := range cases {
		err := c.Concat(ctx, dst, tc.ranges)
		if errors.Is(err, errors.ErrUnsupported) {
			// Refused: nothing may have been written.
			if _, serr := d.Stat(ctx, dst); !errors.Is(serr, driver.ErrNotFound) {
				t.Errorf("%s: Concat refused (%v) but %s exists (%v)", tc.name, err, dst, serr)
			}
			continue
		}
		if err != nil {
			t.Errorf("%s: Concat: %v", tc.name, err)
			continue
		}
		want := expect(tc.ranges)
		if got := get(t, d, dst); !bytes.Equal(got, want) {
			t.Errorf("%s: %s holds %d bytes, want %d (%s)", tc.name, dst, len(got), len(want), firstDiff(got, want))
		}
		if err := d.Delete(ctx, dst); err != nil {
			t.Fatalf("Delete(%s): %v", dst, err)
		}
	}
	if err := c.Concat(ctx, dst, whole(big1, small1)); err != nil {
		t.Fatalf("Concat into a new file: %v", err)
	}
	if err := c.Concat(ctx, dst, whole(small2, big2)); err != nil {
		t.Fatalf("Concat over an existing file: %v", err)
	}
	before := expect(whole(small2, big2))
	if got := get(t, d, dst); !bytes.Equal(got, before) {
		t.Fatalf("Concat over an existing file: %s holds %d bytes, want the new %d", dst, len(got), len(before))
	}
	failing := []struct {
		name   string
		ranges []driver.FileRange
	}{
		{"missing source", append(whole(big1), driver.FileRange{Path: base + "/src/missing", Length: 6 << 20})},
		{"missing short source", append(whole(small1), driver.FileRange{Path: base + "/src/missing", Length: 10})},
		{"range past the end", append(whole(big2), driver.FileRange{Path: big1, Length: int64(len(files[big1])) + 1})},
		{"short range past the end", append(whole(small1), driver.FileRange{Path: small2, Length: int64(len(files[small2])) + 1})},
	}
	for _, tc := range failing {
		if err := c.Concat(ctx, dst, tc.ranges); err == nil {
			t.Errorf("%s: Concat succeeded", tc.name)
		}
		if got := get(t, d, dst); !bytes.Equal(got, before) {
			t.Errorf("%s: the failed Concat changed %s (%d bytes, want %d)", tc.name, dst, len(got), len(before))
		}
	}
	for p, want := range files {
		if got := get(t, d, p); !bytes.Equal(got, want) {
			t.Errorf("source %s changed", p)
		}
	}
	refusesBadPaths(t, base, "Concat into", func(bad string) error { return c.Concat(ctx, bad, whole(small1)) })
	refusesBadPaths(t, base, "Concat from", func(bad string) error {
		return c.Concat(ctx, dst, []driver.FileRange{{Path: bad, Length: 1}})
	})
	// Nothing of a join may be left beside the files (intermediate
	// objects, parts).
	got := walkPaths(t, d, base)
	want := []string{base + "/blobs", dst, base + "/src"}
	for p := range files {
		want = append(want, p)
	}
	if len(got) != len(want) {
		t.Errorf("after the joins Walk(%s) finds %d entries, want %d: %q", base, len(got), len(want), got)
	}
}
