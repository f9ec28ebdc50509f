package dedup

import (
	"bytes"
	"compress/gzip"
	"context"
	"fmt"
	"runtime"
	"testing"

	"github.com/cairn-registry/cairn/internal/layout"
)

// TestRestartPointsStored: a compress/gzip layer of several MiB is stored
// with restart points that its verification used, and pulls byte-exact
// through a rebuild on two cores.
func TestRestartPointsStored(t *testing.T) {
	old := runtime.GOMAXPROCS(2)
	defer runtime.GOMAXPROCS(old)
	var files []tfile
	for i := range 24 {
		files = append(files, tfile{fmt.Sprintf("usr/share/f%02d", i), fileBody(uint64(7000+i), 250_000)})
	}
	blob := gzipStd(t, buildTar(t, files))
	v := newEnv(t, nil, Options{})
	d := v.put(blob)
	v.process(d, ModeFull, outDeduplicated)
	raw, err := v.d.GetContent(context.Background(), layout.BlobRecipe(d))
	if err != nil {
		t.Fatal(err)
	}
	rec, err := decodeRecipe(d, raw)
	if err != nil {
		t.Fatal(err)
	}
	if n := len(rec.Compression.Members[0].Restarts); n < 3 {
		t.Fatalf("%d restart points stored for a %d-byte tar, want at least 3", n, rec.Tar.TarSize)
	}
	v.wantBlob(blob)
}

// flushedGzip is compress/gzip output of a tar of about n bytes with a
// sync flush in its last MiB: no encoder reproduces it, but its start is
// compress/gzip's.
func flushedGzip(t *testing.T, n int) []byte {
	t.Helper()
	var files []tfile
	for i := range n / 250_000 {
		files = append(files, tfile{fmt.Sprintf("usr/share/big%02d", i), fileBody(uint64(9000+i), 250_000)})
	}
	raw := buildTar(t, files)
	var buf bytes.Buffer
	zw := gzip.NewWriter(&buf)
	cut := len(raw) - 1<<20
	zw.Write(raw[:cut])
	zw.Flush()
	zw.Write(raw[cut:])
	if err := zw.Close(); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}
