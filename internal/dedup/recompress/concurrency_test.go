package recompress

import (
	"archive/tar"
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"maps"
	"math/rand/v2"
	"runtime"
	"slices"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/klauspost/compress/zstd"
)

// concurrencyIDs are the encoders whose concurrency Rebuild raises: pgzip at
// the block sizes containers/image and explicit callers use and levels that
// run different klauspost flate encoders (the fastest, the default, the lazy
// matcher), and every zstd level. reduced keeps one of each kind.
func concurrencyIDs(reduced bool) []string {
	if reduced {
		return []string{pgzipID(5, 256<<10), pgzipID(5, 1<<20), zstdID(1), zstdID(2)}
	}
	var ids []string
	for _, b := range []int{256 << 10, 1 << 20, 4 << 20} {
		for _, l := range []int{1, 5, 9} {
			ids = append(ids, pgzipID(l, b))
		}
	}
	return append(ids, zstdCandidates()...)
}

// TestConcurrencyKeepsOutput compresses varied inputs with every pgzip and
// zstd encoder at concurrency 1, 2, 4 and 8, and through newEncoder (which
// picks the concurrency from GOMAXPROCS) under GOMAXPROCS 1 and 4, and
// requires one output per encoder and input, equal to its golden hash: the
// proof that Rebuild may use every core and stay byte-exact. The full set
// takes 15 s on two cores and 3 minutes under -race, so under -short and the
// race detector it tries four encoders on two inputs.
func TestConcurrencyKeepsOutput(t *testing.T) {
	reduced := testing.Short() || raceEnabled
	got := map[string]string{}
	for _, in := range concurrencyInputs() {
		if reduced && in.name != "mixed" && in.name != "tar" {
			continue
		}
		for _, id := range concurrencyIDs(reduced) {
			key := id + " " + in.name
			t.Run(key, func(t *testing.T) {
				ref := encodeAt(t, id, 1, in.data)
				got[key] = ref
				for _, n := range []int{2, 4, 8} {
					if h := encodeAt(t, id, n, in.data); h != ref {
						t.Errorf("concurrency %d: sha256 %s, concurrency 1: %s", n, h, ref)
					}
				}
				for _, procs := range []int{1, 4} {
					prev := runtime.GOMAXPROCS(procs)
					sum := sha256.Sum256(encodeWith(t, id, in.data))
					runtime.GOMAXPROCS(prev)
					if h := hex.EncodeToString(sum[:]); h != ref {
						t.Errorf("newEncoder under GOMAXPROCS %d: sha256 %s, concurrency 1: %s", procs, h, ref)
					}
				}
				if want, ok := concurrencyGoldenSHA256[key]; !ok {
					t.Errorf("no golden hash; add %q: %q", key, ref)
				} else if ref != want {
					t.Errorf("output changed: sha256 %s, golden %s", ref, want)
				}
			})
		}
	}
	if !reduced {
		for key := range concurrencyGoldenSHA256 {
			if _, ok := got[key]; !ok {
				t.Errorf("golden %q is no longer tried", key)
			}
		}
	}
	if t.Failed() {
		for _, key := range slices.Sorted(maps.Keys(got)) {
			fmt.Printf("\t%q: %q,\n", key, got[key])
		}
	}
}

// encodeAt returns the sha256 of encoder id's output for plain, the encoder
// run at concurrency n (pgzip: blocks in flight), fed as Rebuild feeds it.
func encodeAt(t *testing.T, id string, n int, plain []byte) string {
	t.Helper()
	fam, level, block, err := parseID(id)
	if err != nil {
		t.Fatal(err)
	}
	h := sha256.New()
	var enc bodyEncoder
	switch fam {
	case famPgzip:
		enc, err = newPgzip(h, level, block, n)
	case famZstd:
		enc, err = zstd.NewWriter(h, zstdOptions(level, n)...)
	default:
		t.Fatalf("encoder %s has no concurrency", id)
	}
	if err != nil {
		t.Fatal(err)
	}
	// Rebuild copies from a LimitReader: through ReadFrom where the
	// encoder has one (zstd), else in 32 KiB writes.
	if _, err := io.Copy(enc, io.LimitReader(bytes.NewReader(plain), int64(len(plain)))); err != nil {
		t.Fatal(err)
	}
	if err := enc.Close(); err != nil {
		t.Fatal(err)
	}
	return hex.EncodeToString(h.Sum(nil))
}

type namedInput struct {
	name string
	data []byte
}

// concurrencyInputs are deterministic inputs of a few MB, none a multiple of
// a block size, each driving the encoders down other paths: text (many
// short matches), random bytes (stored blocks, raw zstd blocks), long zero
// runs between random bursts (long matches, RLE blocks), the mixed
// testInput, and a ustar layer tar whose files repeat earlier ones further
// back than deflate's window.
var concurrencyInputs = sync.OnceValue(func() []namedInput {
	rng := func(seed byte) *rand.Rand { return rand.New(rand.NewChaCha8([32]byte{'c', 'o', 'n', 'c', seed})) }
	return []namedInput{
		{"text", textInput(rng(1), 5<<20+333)},
		{"random", randomInput(rng(2), 3<<20+777)},
		{"zero-runs", zeroRunInput(rng(3), 6<<20+55)},
		{"mixed", testInput(5<<20 + 4097)},
		{"tar", tarInput(rng(4))},
	}
})

// textInput is lines of words from a fixed vocabulary, like manuals and
// scripts.
func textInput(rng *rand.Rand, n int) []byte {
	vocab := make([]string, 3000)
	for i := range vocab {
		w := make([]byte, 2+rng.IntN(9))
		for j := range w {
			w[j] = 'a' + byte(rng.IntN(26))
		}
		vocab[i] = string(w)
	}
	out := make([]byte, 0, n+200)
	for len(out) < n {
		for k := 4 + rng.IntN(12); k > 0; k-- {
			// Zipf-like: low indexes are far more frequent.
			out = append(out, vocab[rng.IntN(1+rng.IntN(len(vocab)))]...)
			out = append(out, ' ')
		}
		if rng.IntN(8) == 0 {
			out = strconv.AppendInt(out, rng.Int64N(1e6), 10)
		}
		out = append(out, '\n')
	}
	return out[:n]
}

func randomInput(rng *rand.Rand, n int) []byte {
	out := make([]byte, n)
	for i := range out {
		out[i] = byte(rng.Uint32())
	}
	return out
}

func zeroRunInput(rng *rand.Rand, n int) []byte {
	out := make([]byte, 0, n+(64<<10))
	for len(out) < n {
		out = append(out, make([]byte, 1+rng.IntN(1<<20))...)
		out = append(out, randomInput(rng, 1+rng.IntN(64<<10))...)
	}
	return out[:n]
}

// tarInput is a ustar layer tar of about 5 MB: directories and files of text,
// binary-like bytes and zeros, a fifth of them copies of earlier files.
func tarInput(rng *rand.Rand) []byte {
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	mtime := time.Unix(1700000000, 0)
	var files [][]byte
	for i := 0; buf.Len() < 5<<20; i++ {
		dir := "usr/share/pkg" + strconv.Itoa(i/10) + "/"
		if i%10 == 0 {
			hdr := &tar.Header{Typeflag: tar.TypeDir, Name: dir, Mode: 0o755, ModTime: mtime, Uname: "root", Gname: "root", Format: tar.FormatUSTAR}
			if err := tw.WriteHeader(hdr); err != nil {
				panic(err)
			}
		}
		var body []byte
		switch {
		case len(files) > 4 && rng.IntN(5) == 0:
			body = files[rng.IntN(len(files))]
		case rng.IntN(3) == 0:
			body = randomInput(rng, rng.IntN(200<<10))
		case rng.IntN(4) == 0:
			body = zeroRunInput(rng, rng.IntN(300<<10))
		default:
			body = textInput(rng, rng.IntN(100<<10))
		}
		files = append(files, body)
		hdr := &tar.Header{Typeflag: tar.TypeReg, Name: dir + "file" + strconv.Itoa(i), Mode: 0o644, Size: int64(len(body)), ModTime: mtime, Uname: "root", Gname: "root", Format: tar.FormatUSTAR}
		if err := tw.WriteHeader(hdr); err != nil {
			panic(err)
		}
		if _, err := tw.Write(body); err != nil {
			panic(err)
		}
	}
	if err := tw.Close(); err != nil {
		panic(err)
	}
	return buf.Bytes()
}
