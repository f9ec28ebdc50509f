package dedup

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"io"
	"path/filepath"
	"testing"
	"time"

	"github.com/cairn-registry/cairn/internal/testutil/poll"
	"github.com/cairn-registry/cairn/internal/testutil/regtest"
)

// zerosLayer is a gzip (BestSpeed, cheap to make) tar of one file of n
// zero bytes: a few hundred KiB that expand more than 800 times.
func zerosLayer(t *testing.T, n int64) []byte {
	t.Helper()
	var buf bytes.Buffer
	zw, err := gzip.NewWriterLevel(&buf, gzip.BestSpeed)
	if err != nil {
		t.Fatal(err)
	}
	tw := tar.NewWriter(zw)
	if err := tw.WriteHeader(&tar.Header{Typeflag: tar.TypeReg, Name: "var/zeros", Mode: 0o644, Size: n}); err != nil {
		t.Fatal(err)
	}
	if _, err := io.Copy(tw, io.LimitReader(zeros{}, n)); err != nil {
		t.Fatal(err)
	}
	if err := tw.Close(); err != nil {
		t.Fatal(err)
	}
	if err := zw.Close(); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

type zeros struct{}

func (zeros) Read(p []byte) (int, error) { clear(p); return len(p), nil }

// TestDecompressionBombStaysIntact: a small gzip layer of 384 MiB of zeros
// is past the dedup decompression budget (256 MiB plus 16 times the
// compressed size). The full-mode worker refuses it after reading the
// budget: it stays intact and pulls byte-exact. The former bound (2048x,
// at least 1 GiB) let it through, and gzip can never reach 2048x.
func TestDecompressionBombStaysIntact(t *testing.T) {
	blob := zerosLayer(t, 384<<20)
	t.Logf("layer: %d bytes of gzip for 384 MiB of tar", len(blob))
	layers := []testLayer{{name: "zeros", mediaType: mtGzip, blob: blob, intact: true}}
	srv, cfg, debug := startDedup(t, "full", "")
	push(t, srv, "bomb/img", layers)
	poll.Until(t, 200*time.Millisecond, func() string {
		done := regtest.Metric(t, debug, `cairn_dedup_layers_total{outcome="irreproducible"}`) +
			regtest.Metric(t, debug, `cairn_dedup_layers_total{outcome="deduplicated"}`)
		if done == 0 {
			return "the dedup worker to finish with the layer"
		}
		return ""
	})
	dir := blobDir(srv.Root, digestOf(blob))
	if !exists(filepath.Join(dir, "data")) {
		t.Fatal("the bomb layer lost its intact copy: it was deduplicated")
	}
	if exists(filepath.Join(dir, "recipe")) {
		t.Fatal("the bomb layer has a recipe")
	}
	if got := layerCount(stats(t, cfg, srv.Root), "irreproducible"); got != 1 {
		t.Fatalf("stats: %d layers irreproducible, want 1", got)
	}
	pullAll(t, srv, "bomb/img", layers)
}
