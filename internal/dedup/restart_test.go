package dedup

import (
	"context"
	"encoding/json"
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
	var rec Recipe
	if err := json.Unmarshal(raw, &rec); err != nil {
		t.Fatal(err)
	}
	if n := len(rec.Compression.Members[0].Restarts); n < 3 {
		t.Fatalf("%d restart points stored for a %d-byte tar, want at least 3", n, rec.Tar.TarSize)
	}
	v.wantBlob(blob)
}
