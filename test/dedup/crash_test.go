package dedup

import (
	"archive/tar"
	"bytes"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"path/filepath"
	"testing"
	"time"

	"github.com/cairn-registry/cairn/internal/testutil/cairnproc"
)

// bigLayers are layers large enough that dedup and restore take a while, so
// a kill lands in the middle of them.
func bigLayers(t *testing.T) []testLayer {
	var ls []testLayer
	for i := range 3 {
		var buf bytes.Buffer
		tw := tar.NewWriter(&buf)
		for j := range 40 {
			body := content(uint64(1000+i*100+j), 300_000+j*7_000)
			if j%5 == 0 {
				body = content(uint64(j), 250_000) // shared between layers
			}
			tw.WriteHeader(&tar.Header{Typeflag: tar.TypeReg, Name: fmt.Sprintf("data/%d/%d.bin", i, j), Mode: 0o644, Size: int64(len(body)), ModTime: time.Unix(1700000000, 0)})
			tw.Write(body)
		}
		tw.Close()
		ls = append(ls, testLayer{name: fmt.Sprintf("big-%d", i), mediaType: mtGzip, blob: gzipStd(t, buf.Bytes(), 9)})
	}
	return ls
}

// TestKillDuringDedup kills the server with SIGKILL at random moments while
// the worker processes layers; after every restart each layer pulls
// byte-exact, and in the end every layer is deduplicated.
func TestKillDuringDedup(t *testing.T) {
	layers := bigLayers(t)
	srv, cfg, _ := startDedup(t, "full", "")
	root := srv.Root
	push(t, srv, "crash/dedup", layers)
	r := rand.New(rand.NewPCG(uint64(time.Now().UnixNano()), 1))
	for round := range 4 {
		time.Sleep(time.Duration(100+r.IntN(1500)) * time.Millisecond)
		srv.Kill()
		srv = cairnproc.Start(t, root, "--config", cfg)
		pullAll(t, srv, "crash/dedup", layers)
		t.Logf("round %d: pulled byte-exact after kill -9", round)
	}
	waitState(t, root, layers, false)
	pullAll(t, srv, "crash/dedup", layers)
}

// TestKillDuringRestore kills the server while it streams a rebuilt layer;
// after a restart the layer pulls byte-exact (no partial cache entry is
// served).
func TestKillDuringRestore(t *testing.T) {
	layers := bigLayers(t)[:1]
	srv, cfg, _ := startDedup(t, "full", "")
	root := srv.Root
	push(t, srv, "crash/restore", layers)
	waitState(t, root, layers, false)

	dg := digestOf(layers[0].blob)
	url := srv.URL + "/v2/crash/restore/blobs/" + dg
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := io.ReadFull(resp.Body, make([]byte, 64<<10)); err != nil {
		t.Fatalf("reading the start of the restore: %v", err)
	}
	srv.Kill()
	rest, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if 64<<10+len(rest) >= len(layers[0].blob) {
		t.Log("the restore finished before the kill; the test still checks the restart")
	}
	partials, _ := filepath.Glob(filepath.Join(root, "cairn-cache/preconstruct/*.partial"))
	t.Logf("%d partial cache files left by the kill", len(partials))

	srv = cairnproc.Start(t, root, "--config", cfg)
	if left, _ := filepath.Glob(filepath.Join(root, "cairn-cache/preconstruct/*.partial")); len(left) != 0 {
		t.Fatalf("partial cache files survived a restart: %v", left)
	}
	pullAll(t, srv, "crash/restore", layers)
	pullAll(t, srv, "crash/restore", layers) // from the cache this time
}
