package recompress

import (
	"bytes"
	"compress/gzip"
	"context"
	"encoding/json"
	"errors"
	"io"
	"math/rand/v2"
	"os/exec"
	"strconv"
	"testing"
	"time"

	kgzip "github.com/klauspost/compress/gzip"
	"github.com/klauspost/compress/zstd"
	"github.com/klauspost/pgzip"
	"github.com/opencontainers/go-digest"
)

// testInput is deterministic: seeded ChaCha8 noise mixed with repetitive text,
// so encoders find both matches and literals.
func testInput(n int) []byte {
	rng := rand.New(rand.NewChaCha8([32]byte{'c', 'a', 'i', 'r', 'n'}))
	out := make([]byte, 0, n)
	line := 0
	for len(out) < n {
		switch rng.IntN(3) {
		case 0:
			k := 1 + rng.IntN(200)
			for range k {
				out = append(out, byte(rng.Uint32()))
			}
		default:
			line++
			out = append(out, "usr/lib/x86_64-linux-gnu/libexample.so."+strconv.Itoa(line%97)+" owner=root mode=0644\n"...)
		}
	}
	return out[:n]
}

// writeChunked writes p in odd-sized pieces, as a tar writer would, to show
// that encoder output does not depend on how the producer split its writes.
func writeChunked(t *testing.T, w io.WriteCloser, p []byte) {
	t.Helper()
	for len(p) > 0 {
		k := min(len(p), 7919)
		if _, err := w.Write(p[:k]); err != nil {
			t.Fatal(err)
		}
		p = p[k:]
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
}

func opener(p []byte) func() io.Reader { return func() io.Reader { return bytes.NewReader(p) } }

// roundTrip finds a recipe for blob, checks it survives JSON, verifies it and
// returns it.
func roundTrip(t *testing.T, blob, plain []byte) Recipe {
	t.Helper()
	rec, err := FindRecipe(context.Background(), bytes.NewReader(blob), int64(len(blob)), opener(plain))
	if err != nil {
		t.Fatalf("FindRecipe: %v", err)
	}
	js, err := json.Marshal(rec)
	if err != nil {
		t.Fatal(err)
	}
	var back Recipe
	if err := json.Unmarshal(js, &back); err != nil {
		t.Fatal(err)
	}
	if err := Verify(back, bytes.NewReader(plain), digest.FromBytes(blob), int64(len(blob))); err != nil {
		t.Fatalf("Verify: %v (recipe %s)", err, js)
	}
	var out bytes.Buffer
	if err := Rebuild(&out, back, bytes.NewReader(plain), 0); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(out.Bytes(), blob) {
		t.Fatalf("rebuild differs from blob")
	}
	return back
}

func TestStdlibGzipLevels(t *testing.T) {
	plain := testInput(300 << 10)
	for _, level := range []int{-2, -1, 0, 1, 2, 3, 4, 5, 6, 7, 8, 9} {
		t.Run(strconv.Itoa(level), func(t *testing.T) {
			var buf bytes.Buffer
			zw, err := gzip.NewWriterLevel(&buf, level)
			if err != nil {
				t.Fatal(err)
			}
			writeChunked(t, zw, plain)
			rec := roundTrip(t, buf.Bytes(), plain)
			// Levels with equal output on this input (7..9 here) may be
			// named by any of them; the family must be the stdlib's.
			if got := rec.Members[0].Encoder; got[:len(famStdlib)] != famStdlib {
				t.Errorf("encoder %q, want a stdlib one", got)
			}
		})
	}
}

func TestKlauspostGzipLevels(t *testing.T) {
	plain := testInput(300 << 10)
	for _, level := range []int{-2, -1, 1, 3, 5, 6, 7, 9} {
		t.Run(strconv.Itoa(level), func(t *testing.T) {
			var buf bytes.Buffer
			zw, err := kgzip.NewWriterLevel(&buf, level)
			if err != nil {
				t.Fatal(err)
			}
			writeChunked(t, zw, plain)
			rec := roundTrip(t, buf.Bytes(), plain)
			if got := rec.Members[0].Encoder; got[:len(famKlaus)] != famKlaus && got[:len(famStdlib)] != famStdlib {
				t.Errorf("encoder %q, want a klauspost one", got)
			}
		})
	}
}

func TestPgzip(t *testing.T) {
	plain := testInput(2<<20 + 12345) // several 1 MiB blocks
	for _, tc := range []struct {
		level, block int
		want         string
	}{
		{pgzip.DefaultCompression, 0, "pgzip/5/1MiB"}, // containers/image's settings
		{pgzip.BestSpeed, 0, "pgzip/1/1MiB"},
		{pgzip.BestCompression, 0, "pgzip/9/1MiB"},
		{6, 512 << 10, "pgzip/6/512KiB"},
	} {
		t.Run(tc.want, func(t *testing.T) {
			var buf bytes.Buffer
			zw, err := pgzip.NewWriterLevel(&buf, tc.level)
			if err != nil {
				t.Fatal(err)
			}
			if tc.block != 0 {
				if err := zw.SetConcurrency(tc.block, 3); err != nil {
					t.Fatal(err)
				}
			}
			writeChunked(t, zw, plain)
			if !bytes.Equal(buf.Bytes()[4:8], pgzipMTime) {
				t.Fatalf("pgzip MTIME fingerprint changed: % x", buf.Bytes()[4:8])
			}
			rec := roundTrip(t, buf.Bytes(), plain)
			if got := rec.Members[0].Encoder; got != tc.want {
				t.Errorf("encoder %q, want %q", got, tc.want)
			}
		})
	}
}

func TestMultiMemberHeaderFieldsAndTrailing(t *testing.T) {
	a, b := testInput(200<<10), []byte("second member, tiny")
	var buf bytes.Buffer
	zw, _ := gzip.NewWriterLevel(&buf, gzip.BestCompression)
	zw.Name, zw.Comment, zw.Extra = "layer.tar", "made by a test", []byte{'c', 'r', 4, 0, 1, 2, 3, 4}
	zw.ModTime = time.Unix(1700000000, 0)
	writeChunked(t, zw, a)
	kw, _ := kgzip.NewWriterLevel(&buf, 1)
	writeChunked(t, kw, b)
	ew := gzip.NewWriter(&buf) // an empty member
	writeChunked(t, ew, nil)
	buf.Write([]byte{0, 0, 0, 0, 'j', 'u', 'n', 'k', 0x1f, 0x8b})
	plain := append(append([]byte{}, a...), b...)

	rec := roundTrip(t, buf.Bytes(), plain)
	if len(rec.Members) != 3 {
		t.Fatalf("%d members, want 3", len(rec.Members))
	}
	if rec.Members[0].Encoder != "stdlib-gzip/9" || rec.Members[1].Encoder != "klauspost-gzip/1" {
		t.Errorf("encoders %q %q", rec.Members[0].Encoder, rec.Members[1].Encoder)
	}
	if string(rec.Trailing) != "\x00\x00\x00\x00junk\x1f\x8b" {
		t.Errorf("trailing %q", rec.Trailing)
	}
	counts := map[string]int{}
	rec.Tally(counts)
	if counts["stdlib-gzip/6"] != 1 || counts["stdlib-gzip/9"] != 1 || counts["klauspost-gzip/1"] != 1 {
		t.Errorf("tally %v", counts)
	}
}

func TestHeaderCRC(t *testing.T) {
	plain := testInput(10 << 10)
	var body bytes.Buffer
	zw := gzip.NewWriter(&body)
	writeChunked(t, zw, plain)
	raw := body.Bytes()
	// Set FHCRC and insert a (arbitrary, kept verbatim) CRC16 after the header.
	blob := append([]byte{}, raw[:10]...)
	blob[3] |= flagHCRC
	blob = append(append(blob, 0xab, 0xcd), raw[10:]...)
	rec := roundTrip(t, blob, plain)
	if len(rec.Members[0].Header) != 12 {
		t.Errorf("header %d bytes, want 12", len(rec.Members[0].Header))
	}
}

func TestGNUGzipIrreproducible(t *testing.T) {
	gz, err := exec.LookPath("gzip")
	if err != nil {
		t.Skip("gzip not installed")
	}
	plain := testInput(200 << 10)
	cmd := exec.Command(gz, "-n", "-6", "-c")
	cmd.Stdin = bytes.NewReader(plain)
	blob, err := cmd.Output()
	if err != nil {
		t.Fatal(err)
	}
	_, err = FindRecipe(context.Background(), bytes.NewReader(blob), int64(len(blob)), opener(plain))
	if !errors.Is(err, ErrIrreproducible) {
		t.Fatalf("err %v, want ErrIrreproducible", err)
	}
}

func TestZstd(t *testing.T) {
	plain := testInput(1 << 20)
	for _, lvl := range []zstd.EncoderLevel{zstd.SpeedFastest, zstd.SpeedDefault, zstd.SpeedBetterCompression, zstd.SpeedBestCompression} {
		t.Run(lvl.String(), func(t *testing.T) {
			var buf bytes.Buffer
			zw, err := zstd.NewWriter(&buf, zstd.WithEncoderLevel(lvl))
			if err != nil {
				t.Fatal(err)
			}
			writeChunked(t, zw, plain)
			rec := roundTrip(t, buf.Bytes(), plain)
			if rec.Format != FormatZstd || rec.Members[0].Encoder != zstdID(int(lvl)) {
				t.Errorf("recipe %+v", rec)
			}
		})
	}
}

func TestUncompressed(t *testing.T) {
	plain := testInput(5000)
	rec := roundTrip(t, plain, plain)
	if rec.Format != FormatNone {
		t.Errorf("format %q", rec.Format)
	}
}

func TestVerifyRejectsWrongData(t *testing.T) {
	plain := testInput(50 << 10)
	var buf bytes.Buffer
	writeChunked(t, gzip.NewWriter(&buf), plain)
	rec := roundTrip(t, buf.Bytes(), plain)
	other := append([]byte{}, plain...)
	other[100] ^= 1
	err := Verify(rec, bytes.NewReader(other), digest.FromBytes(buf.Bytes()), int64(buf.Len()))
	if !errors.Is(err, ErrMismatch) {
		t.Fatalf("err %v, want ErrMismatch", err)
	}
}

func TestWrongUncompressedIsIrreproducible(t *testing.T) {
	plain := testInput(50 << 10)
	var buf bytes.Buffer
	writeChunked(t, gzip.NewWriter(&buf), plain)
	other := append([]byte{}, plain...)
	other[40000] ^= 1
	_, err := FindRecipe(context.Background(), bytes.NewReader(buf.Bytes()), int64(buf.Len()), opener(other))
	if !errors.Is(err, ErrIrreproducible) {
		t.Fatalf("err %v, want ErrIrreproducible", err)
	}
}

func TestCanceled(t *testing.T) {
	plain := testInput(50 << 10)
	var buf bytes.Buffer
	writeChunked(t, gzip.NewWriter(&buf), plain)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	_, err := FindRecipe(ctx, bytes.NewReader(buf.Bytes()), int64(buf.Len()), opener(plain))
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("err %v, want context.Canceled", err)
	}
}
