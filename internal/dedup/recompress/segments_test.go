package recompress

import (
	"bytes"
	"compress/gzip"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"io"
	"runtime"
	"slices"
	"strconv"
	"sync"
	"testing"

	"github.com/opencontainers/go-digest"

	"github.com/cairn-registry/cairn/internal/dedup/recompress/deflate"
)

// withProcs runs f with GOMAXPROCS set to n, so the segmented rebuild runs
// however many cores the machine has.
func withProcs(n int, f func()) {
	old := runtime.GOMAXPROCS(n)
	defer runtime.GOMAXPROCS(old)
	f()
}

func stdlibGzip(t *testing.T, level int, plain []byte) []byte {
	t.Helper()
	var buf bytes.Buffer
	zw, err := gzip.NewWriterLevel(&buf, level)
	if err != nil {
		t.Fatal(err)
	}
	writeChunked(t, zw, plain)
	return buf.Bytes()
}

// goldenSegmented pins the output of rebuilds from restart points: the
// sha256 of the compress/gzip blob of testInput(6 MiB) per level, which a
// segmented rebuild must reproduce.
var goldenSegmented = map[int]string{
	1: "fdccab5087fde114b892f35fc4f49678a2f14305e67fe85508ed78841386f58a",
	6: "41ea592e45da9de6571eb83c2b3f0cf67567e601bb651f0bf833ffa489f21487",
	9: "02ad063f50a60e1b6a2588564b97378ce8c558d1ce761223430202f32de0d0ea",
}

// TestRestartPoints: a compress/gzip blob at levels 1 and 4–9 gets restart
// points, rebuilds byte-exact from them on several cores (pinned by golden
// hashes), and levels 2–3 get none.
func TestRestartPoints(t *testing.T) {
	plain := testInput(6 << 20)
	for _, level := range []int{1, 2, 3, 4, 6, 9} {
		blob := stdlibGzip(t, level, plain)
		var rec Recipe
		withProcs(4, func() { rec = roundTrip(t, blob, plain) })
		n := len(rec.Members[0].Restarts)
		switch {
		case level == 2 || level == 3:
			if n != 0 {
				t.Errorf("level %d: %d restart points, want none", level, n)
			}
			continue
		case n < 4:
			t.Fatalf("level %d: %d restart points in 6 MiB, want at least 4", level, n)
		}
		want, ok := goldenSegmented[level]
		if !ok {
			continue
		}
		// All three cores, and one (a predicted rebuild's share).
		for _, procs := range []int{0, 1} {
			var out bytes.Buffer
			withProcs(3, func() {
				if err := Rebuild(&out, rec, bytes.NewReader(plain), procs); err != nil {
					t.Fatal(err)
				}
			})
			sum := sha256.Sum256(out.Bytes())
			if got := hex.EncodeToString(sum[:]); got != want {
				t.Errorf("level %d, procs %d: segmented rebuild sha256 %s, golden %s", level, procs, got, want)
			}
		}
	}
}

// TestBadRestartPointFails: a restart point that does not match the
// stream (a damaged recipe, or a restart that does not reproduce) makes
// the rebuild fail, never return other bytes as the blob; without the
// points the recipe still verifies.
func TestBadRestartPointFails(t *testing.T) {
	plain := testInput(4 << 20)
	blob := stdlibGzip(t, 6, plain)
	rec := roundTrip(t, blob, plain)
	if !rec.HasRestarts() {
		t.Fatal("no restart points")
	}
	for name, damage := range map[string]func(*Member){
		"history": func(m *Member) { m.Restarts[1].Win = 0 },
		"bit":     func(m *Member) { m.Restarts[1].Bit += 3 },
		"input":   func(m *Member) { m.Restarts[1].In += 1 },
	} {
		bad := rec.WithoutRestarts()
		bad.Members[0].Restarts = append(bad.Members[0].Restarts, rec.Members[0].Restarts...)
		damage(&bad.Members[0])
		withProcs(2, func() {
			err := Verify(bad, bytes.NewReader(plain), digest.FromBytes(blob), int64(len(blob)))
			if err == nil {
				t.Errorf("%s: a damaged restart point verified", name)
			} else if !errors.Is(err, ErrMismatch) {
				t.Errorf("%s: error %v, want a mismatch", name, err)
			}
			if err := Verify(bad.WithoutRestarts(), bytes.NewReader(plain), digest.FromBytes(blob), int64(len(blob))); err != nil {
				t.Errorf("%s: without restart points: %v", name, err)
			}
		})
	}
}

// BenchmarkRebuildGzip6 rebuilds a compress/gzip default-level blob with
// one core (one encoder, as before restart points) and with every core
// (segments): compare their MB/s side by side.
func BenchmarkRebuildGzip6(b *testing.B) {
	plain := testInput(32 << 20)
	var blob bytes.Buffer
	zw, _ := gzip.NewWriterLevel(&blob, 6)
	zw.Write(plain)
	zw.Close()
	rec, err := FindRecipe(b.Context(), bytes.NewReader(blob.Bytes()), int64(blob.Len()), opener(plain))
	if err != nil {
		b.Fatal(err)
	}
	for _, procs := range []int{1, runtime.NumCPU()} {
		for name, r := range map[string]Recipe{"serial": rec.WithoutRestarts(), "segments": rec} {
			b.Run(name+"/procs="+strconv.Itoa(procs), func(b *testing.B) {
				withProcs(procs, func() {
					b.SetBytes(int64(blob.Len()))
					for b.Loop() {
						if err := Rebuild(io.Discard, r, bytes.NewReader(plain), 0); err != nil {
							b.Fatal(err)
						}
					}
				})
			})
		}
	}
}

// TestProbeRecipe: a probe names the encoder of blobs larger than it
// compares, and a blob that only starts like an encoder's output (a
// compress/gzip stream flushed after the probed part) gets a guess that
// verification refutes, and no recipe from the full search.
func TestProbeRecipe(t *testing.T) {
	plain := testInput(probeInput + 4<<20)
	for _, tc := range []struct {
		id   string
		blob []byte
	}{
		{"stdlib-gzip/6", stdlibGzip(t, 6, plain)},
		{"stdlib-gzip/1", stdlibGzip(t, 1, plain)},
		{"pgzip/5/1MiB", wrapGzip(t, "pgzip/5/1MiB", encodeWith(t, "pgzip/5/1MiB", plain), plain)},
		{"klauspost-gzip/5", wrapGzip(t, "klauspost-gzip/5", encodeWith(t, "klauspost-gzip/5", plain), plain)},
		{"klauspost-zstd/2", encodeWith(t, "klauspost-zstd/2", plain)},
	} {
		rec, err := ProbeRecipe(t.Context(), bytes.NewReader(tc.blob), int64(len(tc.blob)), opener(plain))
		if err != nil {
			t.Fatalf("%s: %v", tc.id, err)
		}
		if got := rec.Members[0].Encoder; got != tc.id {
			t.Fatalf("probe names %s, blob is %s", got, tc.id)
		}
		withProcs(2, func() {
			if err := Verify(rec, bytes.NewReader(plain), digest.FromBytes(tc.blob), int64(len(tc.blob))); err != nil {
				t.Fatalf("%s: %v", tc.id, err)
			}
		})
	}

	var buf bytes.Buffer
	zw, _ := gzip.NewWriterLevel(&buf, 6)
	zw.Write(plain[:probeInput+1<<20])
	zw.Flush()
	zw.Write(plain[probeInput+1<<20:])
	zw.Close()
	blob := buf.Bytes()
	rec, err := ProbeRecipe(t.Context(), bytes.NewReader(blob), int64(len(blob)), opener(plain))
	if err != nil {
		t.Fatal(err)
	}
	if err := Verify(rec, bytes.NewReader(plain), digest.FromBytes(blob), int64(len(blob))); !errors.Is(err, ErrMismatch) {
		t.Fatalf("verifying a wrong guess: %v, want a mismatch", err)
	}
	if _, err := FindRecipe(t.Context(), bytes.NewReader(blob), int64(len(blob)), opener(plain)); !errors.Is(err, ErrIrreproducible) {
		t.Fatalf("full search of a flushed stream: %v, want irreproducible", err)
	}
}

// TestCheckDropsBadPoints: checked against the blob, a rebuild replaces
// the segments of points that do not hold with the same bits compressed
// from the last point that did, and returns the recipe without them.
func TestCheckDropsBadPoints(t *testing.T) {
	plain := testInput(6 << 20)
	blob := stdlibGzip(t, 6, plain)
	rec := roundTrip(t, blob, plain)
	rs := rec.Members[0].Restarts
	if len(rs) < 4 {
		t.Fatalf("%d restart points", len(rs))
	}
	bad := rec.WithoutRestarts()
	bad.Members[0].Restarts = slices.Clone(rs)
	bad.Members[0].Restarts[1].Win = 0 // restarts without history
	bad.Members[0].Restarts[2].Win = 0 // and the next one too
	withProcs(2, func() {
		var out bytes.Buffer
		kept, err := Check(&out, bad, bytes.NewReader(plain), bytes.NewReader(blob))
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(out.Bytes(), blob) {
			t.Fatal("checked rebuild differs from the blob")
		}
		want := append([]deflate.Boundary{rs[0]}, rs[3:]...)
		if got := kept.Members[0].Restarts; !slices.Equal(got, want) {
			t.Fatalf("kept %d points %v, want %d", len(got), got, len(want))
		}
		// The first segment has no earlier point to fall back on.
		first := rec.WithoutRestarts()
		first.Members[0].Restarts = slices.Clone(rs)
		first.Members[0].Header = append([]byte(nil), first.Members[0].Header...)
		other := append([]byte(nil), plain...)
		other[100] ^= 1
		if _, err := Check(io.Discard, first, bytes.NewReader(other), bytes.NewReader(blob)); !errors.Is(err, ErrMismatch) {
			t.Fatalf("checking other input: %v, want a mismatch", err)
		}
	})
}

// TestReleaseParses: a rebuild hands each parse's tokens to Release once
// no segment can follow them any more, each once, all but those of the
// last segment's reach. Released tokens are overwritten at once with
// other tokens of the same sizes (so a copy's check still passes on
// them): a segment following them after their release would write other
// bits than the blob's, and, run with -race, is a race.
func TestReleaseParses(t *testing.T) {
	input, blob, kept, _ := checkedGoSources(t, 6<<20, true)
	_, files := goSources(t, 6<<20, 64<<10)
	own := ownParses(t, files, 6)
	var mu sync.Mutex
	released := map[*deflate.Token]bool{}
	ps := &Parses{Release: func(ts []deflate.Token) {
		for i, tk := range ts {
			if tk.IsMatch() {
				ts[i] = deflate.MatchToken(tk.Length(), tk.Dist()%32768+1)
			} else {
				ts[i] = deflate.LiteralToken(tk.Literal() + 1)
			}
		}
		mu.Lock()
		defer mu.Unlock()
		if released[&ts[0]] {
			t.Error("tokens released twice")
		}
		released[&ts[0]] = true
	}}
	pieces := 0
	for i, f := range files {
		if own[i] != nil {
			// Pieces of 3000 tokens: many straddle a restart point.
			addPieces(ps, i, f.off, 6, slices.Clone(own[i]), 3000)
			pieces += (len(own[i]) + 2999) / 3000
		}
	}
	var out bytes.Buffer
	if err := RebuildFollowing(&out, kept, bytes.NewReader(input), 2, ps); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(out.Bytes(), blob) {
		t.Fatal("a rebuild releasing its parses wrote other bytes than the blob")
	}
	// The last segment's parses, and those it was fed with, stay.
	if len(released) < pieces*2/3 {
		t.Fatalf("%d of %d parse pieces released", len(released), pieces)
	}
}
