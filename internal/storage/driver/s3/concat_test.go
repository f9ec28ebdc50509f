package s3

import (
	"context"
	"fmt"
	"maps"
	"math/rand/v2"
	"testing"

	"github.com/cairn-registry/cairn/internal/storage/driver"
)

// TestPlanConcat checks the parts Concat plans, for chunk sizes clients use
// and random mixes: they cover the ranges exactly and in order; every part
// but the last is at least 5 MiB and none is over 5 GiB; a copied part is
// one range; and bytes pass through cairn only for ranges under 5 MiB, at
// most one part's worth (15 MiB) each.
func TestPlanConcat(t *testing.T) {
	d := &Driver{copyChunkSize: 32 << 20}
	const MiB = 1 << 20
	sizes := func(ns ...int64) []driver.FileRange {
		rs := make([]driver.FileRange, len(ns))
		for i, n := range ns {
			rs[i] = driver.FileRange{Path: fmt.Sprintf("/c/%d", i), Length: n}
		}
		return rs
	}
	type want struct{ parts, uploaded int }
	for _, tc := range []struct {
		name   string
		ranges []driver.FileRange
		want   want
	}{
		{"8 MiB chunks", sizes(8*MiB, 8*MiB, 8*MiB, 3*MiB), want{4, 1}},
		{"a short chunk in between", sizes(8*MiB, 1*MiB, 8*MiB, 8*MiB), want{3, 1}},
		{"short first", sizes(1*MiB, 20*MiB), want{2, 1}},
		{"all short", sizes(1*MiB, 2*MiB, 1*MiB), want{1, 1}},
		{"a large chunk", sizes(100 * MiB), want{3, 0}},
		{"empty chunks", sizes(0, 8*MiB, 0), want{1, 0}},
	} {
		plan := d.planConcat(tc.ranges)
		checkPlan(t, tc.name, tc.ranges, plan)
		uploaded := 0
		for _, p := range plan {
			if !p.copy {
				uploaded++
			}
		}
		if got := (want{len(plan), uploaded}); got != tc.want {
			t.Errorf("%s: %d parts, %d uploaded; want %d, %d", tc.name, got.parts, got.uploaded, tc.want.parts, tc.want.uploaded)
		}
	}
	rng := rand.New(rand.NewPCG(1, 2))
	for i := range 2000 {
		var rs []driver.FileRange
		for j := range rng.IntN(30) {
			n := rng.Int64N(12 * MiB)
			if rng.IntN(4) == 0 {
				n = rng.Int64N(64 << 10)
			}
			off := rng.Int64N(MiB)
			rs = append(rs, driver.FileRange{Path: fmt.Sprintf("/c/%d", j), Offset: off, Length: n})
		}
		checkPlan(t, fmt.Sprintf("random mix %d", i), rs, d.planConcat(rs))
	}
}

func checkPlan(t *testing.T, name string, ranges []driver.FileRange, plan []concatPart) {
	t.Helper()
	// Flatten both into single bytes' origins by walking in step.
	var flat []driver.FileRange
	for i, p := range plan {
		var n int64
		for _, r := range p.ranges {
			n += r.Length
			flat = append(flat, r)
		}
		if i < len(plan)-1 && n < minPartSize {
			t.Fatalf("%s: part %d of %d holds %d bytes, under S3's minimum", name, i+1, len(plan), n)
		}
		if n > maxPartSize || n == 0 {
			t.Fatalf("%s: part %d holds %d bytes", name, i+1, n)
		}
		if p.copy && len(p.ranges) != 1 {
			t.Fatalf("%s: copied part %d has %d ranges", name, i+1, len(p.ranges))
		}
		if !p.copy && n > 3*minPartSize {
			t.Fatalf("%s: uploaded part %d holds %d bytes", name, i+1, n)
		}
	}
	covered := map[string][]driver.FileRange{}
	for _, r := range flat {
		covered[r.Path] = append(covered[r.Path], r)
	}
	var order []string
	for _, r := range flat {
		if len(order) == 0 || order[len(order)-1] != r.Path {
			order = append(order, r.Path)
		}
	}
	var wantOrder []string
	for _, r := range ranges {
		if r.Length > 0 {
			wantOrder = append(wantOrder, r.Path)
		}
	}
	if fmt.Sprint(order) != fmt.Sprint(wantOrder) {
		t.Fatalf("%s: parts visit %v, want %v", name, order, wantOrder)
	}
	for _, r := range ranges {
		if r.Length == 0 {
			continue
		}
		off := r.Offset
		for _, c := range covered[r.Path] {
			if c.Offset != off {
				t.Fatalf("%s: %s: a piece starts at %d, want %d", name, r.Path, c.Offset, off)
			}
			off += c.Length
		}
		if off != r.Offset+r.Length {
			t.Fatalf("%s: %s covered up to %d, want %d", name, r.Path, off, r.Offset+r.Length)
		}
	}
}

// TestConcatRequests checks what joining an upload's chunks costs on S3:
// 8 MiB chunks are copied by the server (one UploadPartCopy each, no byte
// read back), with one short last chunk read and uploaded.
func TestConcatRequests(t *testing.T) {
	p := testParams(t)
	c := newCounter()
	p.Transport = c
	d := mustNew(t, p)
	ctx := context.Background()
	var ranges []driver.FileRange
	for i, n := range []int{8 << 20, 8 << 20, 8 << 20, 1 << 20} {
		path := fmt.Sprintf("/uploads/x/chunks/%d", i)
		if err := d.PutContent(ctx, path, make([]byte, n)); err != nil {
			t.Fatal(err)
		}
		ranges = append(ranges, driver.FileRange{Path: path, Length: int64(n)})
	}
	c.take()
	if err := d.Concat(ctx, "/blobs/data", ranges); err != nil {
		t.Fatal(err)
	}
	got := c.take()
	want := map[string]int{"CreateMultipartUpload": 1, "UploadPartCopy": 3, "GetObject": 1, "UploadPart": 1, "CompleteMultipartUpload": 1}
	if !maps.Equal(got, want) {
		t.Errorf("Concat of 3 × 8 MiB + 1 MiB made %v, want %v", got, want)
	}
	fi, err := d.Stat(ctx, "/blobs/data")
	if err != nil || fi.Size != 25<<20 {
		t.Errorf("Stat(/blobs/data) = %+v, %v; want 25 MiB", fi, err)
	}
}
