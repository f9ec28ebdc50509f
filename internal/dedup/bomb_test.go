package dedup

import (
	"archive/tar"
	"bytes"
	"io"
	"strings"
	"testing"

	"github.com/klauspost/compress/zstd"

	"github.com/cairn-registry/cairn/internal/meta"
)

// TestDecompressionBomb: a tiny zstd layer that expands past the bound (a
// tar of one 1.1 GiB file of zeros, a few KiB compressed) is given up as
// irreproducible and keeps its intact copy, instead of occupying a worker.
func TestDecompressionBomb(t *testing.T) {
	t.Parallel()
	var blob bytes.Buffer
	zw, err := zstd.NewWriter(&blob, zstd.WithEncoderLevel(zstd.SpeedFastest))
	if err != nil {
		t.Fatal(err)
	}
	tw := tar.NewWriter(zw)
	const size = minExpansionLimit + 100<<20
	if err := tw.WriteHeader(&tar.Header{Typeflag: tar.TypeReg, Name: "zeros", Mode: 0o644, Size: size}); err != nil {
		t.Fatal(err)
	}
	if _, err := io.CopyN(tw, zeroReader{}, size); err != nil {
		t.Fatal(err)
	}
	tw.Close()
	zw.Close()
	if int64(blob.Len())*maxExpansion > size {
		t.Fatalf("test layer is %d bytes: not a bomb by the bound", blob.Len())
	}
	v := newEnv(t, nil, Options{})
	l := v.put(blob.Bytes())
	v.process(l, ModeFull, outIrreproducible)
	sum, state := v.state(l)
	if state != meta.StateIrreproducible || !strings.Contains(sum.Reason, "decompression bound") {
		t.Fatalf("state %v, reason %q", state, sum.Reason)
	}
	v.wantData(blob.Bytes())
}

type zeroReader struct{}

func (zeroReader) Read(p []byte) (int, error) {
	clear(p)
	return len(p), nil
}
