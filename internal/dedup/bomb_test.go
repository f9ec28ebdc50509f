package dedup

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"errors"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/klauspost/compress/zstd"

	"github.com/cairn-registry/cairn/internal/meta"
)

// bombSize is the uncompressed size of the test bombs: past the budget of
// any blob smaller than 4 MiB, and well under the 1 GiB floor of the
// former ratio bound, which let such layers through.
const bombSize = expansionAllowance + 64<<20

// bombTar writes a tar of one bombSize file of zeros through compress.
func bombTar(t *testing.T, compress func(io.Writer) (io.WriteCloser, error)) []byte {
	t.Helper()
	var blob bytes.Buffer
	zw, err := compress(&blob)
	if err != nil {
		t.Fatal(err)
	}
	tw := tar.NewWriter(zw)
	if err := tw.WriteHeader(&tar.Header{Typeflag: tar.TypeReg, Name: "zeros", Mode: 0o644, Size: bombSize}); err != nil {
		t.Fatal(err)
	}
	if _, err := io.CopyN(tw, zeroReader{}, bombSize); err != nil {
		t.Fatal(err)
	}
	if err := tw.Close(); err != nil {
		t.Fatal(err)
	}
	if err := zw.Close(); err != nil {
		t.Fatal(err)
	}
	if budget := expansionBudget(int64(blob.Len())); budget >= bombSize {
		t.Fatalf("test layer is %d bytes, budget %d: not a bomb", blob.Len(), budget)
	}
	return blob.Bytes()
}

func gzipBestSpeed(w io.Writer) (io.WriteCloser, error) {
	return gzip.NewWriterLevel(w, gzip.BestSpeed)
}

func zstdFastest(w io.Writer) (io.WriteCloser, error) {
	return zstd.NewWriter(w, zstd.WithEncoderLevel(zstd.SpeedFastest))
}

// TestDecompressionBomb: a small layer that expands past the budget (a
// tar of zeros, a few hundred KiB compressed) is given up as irreproducible
// and keeps its intact copy, instead of occupying a worker. gzip is the
// case the former ratio-only bound missed: deflate cannot reach its ratio.
func TestDecompressionBomb(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name     string
		compress func(io.Writer) (io.WriteCloser, error)
	}{
		{"gzip", gzipBestSpeed},
		{"zstd", zstdFastest},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			blob := bombTar(t, tc.compress)
			v := newEnv(t, nil, Options{})
			l := v.put(blob)
			v.process(l, ModeFull, outIrreproducible)
			sum, state := v.state(l)
			if state != meta.StateIrreproducible || !strings.Contains(sum.Reason, "decompression bound") {
				t.Fatalf("state %v, reason %q", state, sum.Reason)
			}
			v.wantData(blob)
			if v.hasRecipe(l) {
				t.Fatal("a refused layer has a recipe file")
			}
		})
	}
}

// TestExpansionStopsEarly: a bomb's stream fails once it has yielded its
// budget, not at its end, so refusing it costs a bounded amount of work.
func TestExpansionStopsEarly(t *testing.T) {
	t.Parallel()
	blob := bombTar(t, gzipBestSpeed)
	f, err := os.Create(filepath.Join(t.TempDir(), "blob"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if _, err := f.Write(blob); err != nil {
		t.Fatal(err)
	}
	r := uncompressed(f, int64(len(blob)))()
	defer r.(io.Closer).Close()
	n, err := io.Copy(io.Discard, r)
	budget := expansionBudget(int64(len(blob)))
	// bounded lets through at most one read past the budget.
	if !errors.Is(err, ErrExpansion) || n > budget+1<<20 {
		t.Fatalf("read %d bytes (budget %d, bomb %d): %v", n, budget, int64(bombSize), err)
	}
}

// TestExpansionBudget pins the budget's promises (see expansionAllowance):
// real layers, at up to 5x and any size, are never refused; the reported
// bomb, a 2 MB gzip of 2 GiB of zeros, is stopped within a few hundred MiB.
func TestExpansionBudget(t *testing.T) {
	for _, size := range []int64{1 << 10, 1 << 20, 50 << 20, 300 << 20, 2 << 30, 20 << 30} {
		if b := expansionBudget(size); b < 5*size {
			t.Errorf("budget of a %d-byte layer is %d: less than 5x", size, b)
		}
	}
	if b := expansionBudget(2_000_000); b > 300<<20 {
		t.Errorf("budget of the 2 MB bomb is %d bytes", b)
	}
}

type zeroReader struct{}

func (zeroReader) Read(p []byte) (int, error) {
	clear(p)
	return len(p), nil
}
