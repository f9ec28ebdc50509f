package testsuite

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"math/rand/v2"
	"net/http"
	"slices"
	"sync"
	"testing"

	"github.com/cairn-registry/cairn/internal/storage/driver"
)

// readRange reads the whole of ReadRange(p, off, n).
func readRange(d driver.Driver, p string, off, n int64) ([]byte, error) {
	r, err := d.ReadRange(context.Background(), p, off, n)
	if err != nil {
		return nil, err
	}
	defer r.Close()
	return io.ReadAll(r)
}

// wantRange fails t unless ReadRange(p, off, n) reads want.
func wantRange(t *testing.T, d driver.Driver, p string, off, n int64, want []byte) {
	t.Helper()
	got, err := readRange(d, p, off, n)
	if err != nil {
		t.Errorf("ReadRange(%s, %d, %d): %v", p, off, n, err)
		return
	}
	if !bytes.Equal(got, want) {
		t.Errorf("ReadRange(%s, %d, %d): got %d bytes, want %d (%s)", p, off, n, len(got), len(want), firstDiff(got, want))
	}
}

// firstDiff describes where got and want part.
func firstDiff(got, want []byte) string {
	for i := range min(len(got), len(want)) {
		if got[i] != want[i] {
			return fmt.Sprintf("first difference at byte %d", i)
		}
	}
	return "one is a prefix of the other"
}

func wantInvalidOffset(t *testing.T, err error, p string, off int64) {
	t.Helper()
	var oe driver.InvalidOffsetError
	if !errors.As(err, &oe) || oe.Offset != off || oe.Path != p {
		t.Errorf("ReadRange(%s, offset %d): error %v, want an InvalidOffsetError for it", p, off, err)
	}
}

// testReadRange: ranges within the file read exactly their bytes, ranges
// running past the end read up to it, and a range that starts at or past
// the end, a negative offset, a length <= 0 and a missing file are errors.
func testReadRange(t *testing.T, d driver.Driver, base string) {
	ctx := context.Background()
	p := base + "/dir/file"
	content := randomBytes(40, 1000)
	put(t, d, p, content)
	for _, c := range []struct{ off, n, end int64 }{
		{0, 1, 1}, {0, 100, 100}, {0, 1000, 1000}, // from the start
		{400, 200, 600}, {1, 998, 999}, // in the middle
		{999, 1, 1000}, {900, 100, 1000}, // to the end
		{900, 200, 1000}, {999, 1 << 40, 1000}, {0, 1001, 1000}, // past the end: short
		{0, math.MaxInt64, 1000}, {500, math.MaxInt64, 1000}, // "the rest"
	} {
		wantRange(t, d, p, c.off, c.n, content[c.off:c.end])
	}
	for _, off := range []int64{1000, 1001, 1 << 40, -1} {
		r, err := d.ReadRange(ctx, p, off, 10)
		if err == nil {
			r.Close()
		}
		wantInvalidOffset(t, err, p, off)
	}
	for _, n := range []int64{0, -1, math.MinInt64} {
		r, err := d.ReadRange(ctx, p, 0, n)
		if err == nil {
			r.Close()
		}
		var le driver.InvalidLengthError
		if !errors.As(err, &le) || le.Length != n || le.Path != p {
			t.Errorf("ReadRange(%s, 0, length %d): error %v, want an InvalidLengthError for it", p, n, err)
		}
	}

	// An empty file has no offset to start at, 0 included.
	empty := base + "/empty"
	put(t, d, empty, nil)
	_, err := d.ReadRange(ctx, empty, 0, 1)
	wantInvalidOffset(t, err, empty, 0)

	for _, missing := range []string{base + "/dir/missing", base + "/nodir/missing", base + "/dir", p + "/child"} {
		_, err := d.ReadRange(ctx, missing, 0, 1)
		wantNotFound(t, d, err, missing)
	}
	// The reads changed nothing.
	if got := get(t, d, p); !bytes.Equal(got, content) {
		t.Errorf("GetContent after the ranges: got %d bytes, want the %d written", len(got), len(content))
	}
}

// testReadRangeLarge reads ranges of a file of several MiB, written by two
// writers in odd-sized writes, that span the boundaries of the parts an
// object store may keep it in (S3's multipart parts, Azure's blocks, GCS's
// upload chunks and composed components) and the point where the second
// writer appended.
func testReadRangeLarge(t *testing.T, d driver.Driver, base string) {
	ctx := context.Background()
	const (
		size     = 21<<20 + 4097
		appendAt = 7<<20 + 3
	)
	p := base + "/large"
	content := randomBytes(41, size)
	sizes := []int{1, 4093, 65537, 1<<20 + 7, 333, 8191}
	write := func(w driver.FileWriter, b []byte) {
		for i := 0; len(b) > 0; i++ {
			n := min(sizes[i%len(sizes)], len(b))
			writeAll(t, w, b[:n])
			b = b[n:]
		}
	}
	w, err := d.Writer(ctx, p, false)
	if err != nil {
		t.Fatalf("Writer: %v", err)
	}
	write(w, content[:appendAt])
	if err := w.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	if w, err = d.Writer(ctx, p, true); err != nil {
		t.Fatalf("Writer(append): %v", err)
	}
	write(w, content[appendAt:])
	if err := w.Commit(ctx); err != nil {
		t.Fatalf("Commit: %v", err)
	}
	if fi := stat(t, d, p); fi.Size != size {
		t.Fatalf("Stat size = %d, want %d", fi.Size, size)
	}
	for _, b := range []int64{1 << 20, 4 << 20, 5 << 20, appendAt, 8 << 20, 10 << 20, 16 << 20, 20 << 20} {
		wantRange(t, d, p, b-1, 2, content[b-1:b+1])
		wantRange(t, d, p, b-4096, 8192+5, content[b-4096:b+4096+5])
	}
	for _, c := range []struct{ off, n int64 }{
		{3<<20 + 5, 15 << 20}, // many boundaries at once
		{0, size},
		{size - 1000, 5000}, // past the end
		{size - 1, 1},
	} {
		wantRange(t, d, p, c.off, c.n, content[c.off:min(c.off+c.n, size)])
	}
	_, err = d.ReadRange(ctx, p, size, 1)
	wantInvalidOffset(t, err, p, size)
}

// testReadRangeConcurrent reads many ranges of one file at once: readers
// open together and read in turns, and from many goroutines. No range may
// see another's position.
func testReadRangeConcurrent(t *testing.T, d driver.Driver, base string) {
	ctx := context.Background()
	const size = 1<<20 + 13
	p := base + "/file"
	content := randomBytes(42, size)
	put(t, d, p, content)
	rng := rand.New(rand.NewPCG(42, 0))
	randomRange := func(rng *rand.Rand) (off, n int64) {
		off = rng.Int64N(size)
		return off, 1 + rng.Int64N(size/4)
	}

	// Open readers side by side and read them a little at a time in turn;
	// every fourth is closed after its first read.
	type turnReader struct {
		r       io.ReadCloser
		off, n  int64
		got     []byte
		done    bool
		partial bool
	}
	readers := make([]*turnReader, 16)
	for i := range readers {
		off, n := randomRange(rng)
		r, err := d.ReadRange(ctx, p, off, n)
		if err != nil {
			for _, o := range readers[:i] {
				o.r.Close()
			}
			t.Fatalf("ReadRange(%d, %d): %v", off, n, err)
		}
		readers[i] = &turnReader{r: r, off: off, n: n, partial: i%4 == 3}
	}
	buf := make([]byte, 7919)
	for left := len(readers); left > 0; {
		for _, o := range readers {
			if o.done {
				continue
			}
			k, err := o.r.Read(buf)
			o.got = append(o.got, buf[:k]...)
			if err != nil || o.partial {
				o.done = true
				left--
				o.r.Close()
				if err != nil && err != io.EOF {
					t.Errorf("reading range %d+%d at %d: %v", o.off, o.n, len(o.got), err)
					continue
				}
				want := content[o.off:min(o.off+o.n, size)]
				if o.partial {
					want = want[:min(len(want), len(o.got))]
				}
				if !bytes.Equal(o.got, want) {
					t.Errorf("range %d+%d read in turns: got %d bytes, want %d (%s)", o.off, o.n, len(o.got), len(want), firstDiff(o.got, want))
				}
			}
		}
	}

	// Many goroutines, each reading several ranges.
	var wg sync.WaitGroup
	for g := range 32 {
		rng := rand.New(rand.NewPCG(43, uint64(g)))
		wg.Go(func() {
			for range 4 {
				off, n := randomRange(rng)
				got, err := readRange(d, p, off, n)
				if err != nil {
					t.Errorf("ReadRange(%d, %d): %v", off, n, err)
					return
				}
				if want := content[off:min(off+n, size)]; !bytes.Equal(got, want) {
					t.Errorf("ReadRange(%d, %d) in goroutine %d: got %d bytes, want %d (%s)", off, n, g, len(got), len(want), firstDiff(got, want))
				}
			}
		})
	}
	wg.Wait()
}

// ReadRangeCases are ReadRange calls on a file holding "0123456789": what
// each reads ("!": an InvalidOffsetError) and the HTTP Range it sends.
var ReadRangeCases = []struct {
	Off, N       int64
	Want, Header string
}{
	{0, 3, "012", "bytes=0-2"},
	{4, 3, "456", "bytes=4-6"},
	{8, 5, "89", "bytes=8-12"},
	{9, 1 << 62, "9", fmt.Sprintf("bytes=9-%d", 9+1<<62-1)},
	{10, 1, "!", "bytes=10-10"},
	{11, 1, "!", "bytes=11-11"},
}

// CheckReadRange checks one ReadRange of p against want ("!": an
// InvalidOffsetError).
func CheckReadRange(t *testing.T, d driver.Driver, p string, off, n int64, want string) {
	t.Helper()
	r, err := d.ReadRange(context.Background(), p, off, n)
	var got []byte
	if err == nil {
		got, err = io.ReadAll(r)
		r.Close()
	}
	var oe driver.InvalidOffsetError
	if want == "!" {
		if !errors.As(err, &oe) {
			t.Errorf("ReadRange(%d, %d): %v, want InvalidOffsetError", off, n, err)
		}
	} else if err != nil || string(got) != want {
		t.Errorf("ReadRange(%d, %d) = %q, %v; want %q", off, n, got, err, want)
	}
}

// ReadRangeRequests checks, for a driver speaking HTTP, that each of
// ReadRangeCases is one GET carrying its range: sent returns the requests
// made since its last call, as "METHOD range".
func ReadRangeRequests(t *testing.T, d driver.Driver, sent func() []string) {
	t.Helper()
	if err := d.PutContent(context.Background(), "/f", []byte("0123456789")); err != nil {
		t.Fatal(err)
	}
	for _, tc := range ReadRangeCases {
		sent()
		CheckReadRange(t, d, "/f", tc.Off, tc.N, tc.Want)
		if got := sent(); !slices.Equal(got, []string{"GET " + tc.Header}) {
			t.Errorf("ReadRange(%d, %d) sent %q, want one GET with range %s", tc.Off, tc.N, got, tc.Header)
		}
	}
}

// RangeRecorder is an http.RoundTripper that records each request it passes
// on to Next as "METHOD range", the range as Range reads it from the
// request, for ReadRangeRequests.
type RangeRecorder struct {
	Next  http.RoundTripper
	Range func(*http.Request) string
	mu    sync.Mutex
	got   []string
}

// RoundTrip implements http.RoundTripper.
func (r *RangeRecorder) RoundTrip(req *http.Request) (*http.Response, error) {
	r.mu.Lock()
	r.got = append(r.got, req.Method+" "+r.Range(req))
	r.mu.Unlock()
	return r.Next.RoundTrip(req)
}

// Take returns the requests recorded since the last call.
func (r *RangeRecorder) Take() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	got := r.got
	r.got = nil
	return got
}
