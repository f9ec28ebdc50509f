// Package dedup runs `cairn serve` with layer deduplication on and checks
// what a client sees: every layer pulls with its original digest after its
// intact copy is gone, HEAD and Range behave, irreproducible layers stay
// intact, and kill -9 during dedup or a restore loses nothing.
package dedup

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/static"
	"github.com/google/go-containerregistry/pkg/v1/types"
	"github.com/opencontainers/go-digest"

	"github.com/cairn-registry/cairn/internal/layout"
	"github.com/cairn-registry/cairn/internal/testutil/cairnproc"
	"github.com/cairn-registry/cairn/internal/testutil/poll"
	"github.com/cairn-registry/cairn/internal/testutil/regtest"
)

func TestMain(m *testing.M) { os.Exit(cairnproc.Main(m)) }

// startDedup starts cairn on a fresh root with dedup in mode and a debug
// listener (extra is YAML appended to the storage section), and returns
// the config it wrote, for the CLI and restarts.
func startDedup(t *testing.T, mode string, extra string) (srv *cairnproc.Server, cfgPath, debugAddr string) {
	t.Helper()
	cfgPath, debugAddr = dedupConfig(t, mode, extra)
	return cairnproc.Start(t, "", "--config", cfgPath), cfgPath, debugAddr
}

// dedupedRoot pushes layers to repo of a registry in mode full, waits
// until dedup processed them all and stops it: a storage root of
// deduplicated layers, and its config, for the CLI.
func dedupedRoot(t *testing.T, repo string, layers []testLayer) (root, cfgPath string) {
	t.Helper()
	srv, cfgPath, _ := startDedup(t, "full", "")
	push(t, srv, repo, layers)
	waitState(t, srv.Root, layers, false)
	srv.Stop()
	return srv.Root, cfgPath
}

// dedupConfig writes startDedup's config and returns its path and the
// debug listener's address.
func dedupConfig(t *testing.T, mode string, extra string) (cfgPath, debugAddr string) {
	t.Helper()
	debugAddr = cairnproc.FreeAddr(t)
	cfg := fmt.Sprintf(`version: 0.1
log: {level: debug}
http:
  debug: {addr: %q}
storage:
  filesystem: {rootdirectory: /unused}
  dedup:
    mode: %s
    workers: 2
%s`, debugAddr, mode, extra)
	return cairnproc.WriteConfig(t, cfg), debugAddr
}

func digestOf(b []byte) string {
	s := sha256.Sum256(b)
	return "sha256:" + hex.EncodeToString(s[:])
}

// image is an OCI image holding layers (their exact bytes).
func image(layers []testLayer) (v1.Image, error) {
	ls := make([]v1.Layer, len(layers))
	for i, l := range layers {
		ls[i] = static.NewLayer(l.blob, types.MediaType(l.mediaType))
	}
	return regtest.OCIImage(ls...)
}

// pushErr writes the image of layers as repo:v1.
func pushErr(srv *cairnproc.Server, repo string, layers []testLayer) error {
	img, err := image(layers)
	if err != nil {
		return err
	}
	ref, err := name.ParseReference(srv.Addr+"/"+repo+":v1", name.Insecure)
	if err != nil {
		return err
	}
	return remote.Write(ref, img)
}

// push writes one image holding layers as repo:v1.
func push(t *testing.T, srv *cairnproc.Server, repo string, layers []testLayer) {
	t.Helper()
	if err := pushErr(srv, repo, layers); err != nil {
		t.Fatalf("push %s: %v", repo, err)
	}
}

// blobDir is the storage directory of blob dg under root.
func blobDir(root, dg string) string { return filepath.Join(root, layout.BlobDir(digest.Digest(dg))) }

func exists(p string) bool { _, err := os.Stat(p); return err == nil }

// pendingLayers names the layers not yet in their expected storage state:
// recipe and no data (deduplicated) or data and no recipe (intact), or, with
// keepData, recipe and data (index mode).
func pendingLayers(root string, layers []testLayer, keepData bool) []string {
	var pending []string
	for _, l := range layers {
		dir := blobDir(root, digestOf(l.blob))
		data, recipe := exists(filepath.Join(dir, "data")), exists(filepath.Join(dir, "recipe"))
		switch {
		case l.intact:
			// Irreproducible: stays as it was; checked through stats.
		case keepData && !(data && recipe), !keepData && (data || !recipe):
			pending = append(pending, l.name)
		}
	}
	return pending
}

// waitState waits until every layer reached its expected storage state
// (pendingLayers).
func waitState(t *testing.T, root string, layers []testLayer, keepData bool) {
	t.Helper()
	poll.Until(t, 200*time.Millisecond, func() string {
		if p := pendingLayers(root, layers, keepData); len(p) > 0 {
			return fmt.Sprintf("layers to be processed: %v", p)
		}
		return ""
	})
}

// pullAll pulls repo:v1 with ggcr and checks every layer's bytes.
func pullAll(t *testing.T, srv *cairnproc.Server, repo string, layers []testLayer) {
	t.Helper()
	if err := pullErr(srv, repo, layers); err != nil {
		t.Fatal(err)
	}
}

// pullErr is pullAll for goroutines other than the test's.
func pullErr(srv *cairnproc.Server, repo string, layers []testLayer) error {
	ref, err := name.ParseReference(srv.Addr+"/"+repo+":v1", name.Insecure)
	if err != nil {
		return err
	}
	img, err := remote.Image(ref)
	if err != nil {
		return fmt.Errorf("pull %s: %w", repo, err)
	}
	got, err := img.Layers()
	if err != nil {
		return err
	}
	if len(got) != len(layers) {
		return fmt.Errorf("pull %s: %d layers, pushed %d", repo, len(got), len(layers))
	}
	for i, l := range got {
		rc, err := l.Compressed()
		if err != nil {
			return fmt.Errorf("%s: %w", layers[i].name, err)
		}
		b, err := io.ReadAll(rc)
		rc.Close()
		if err != nil {
			return fmt.Errorf("%s: read: %w", layers[i].name, err)
		}
		if !bytes.Equal(b, layers[i].blob) {
			return fmt.Errorf("%s: pulled %d bytes (%s), pushed %d (%s)", layers[i].name, len(b), digestOf(b), len(layers[i].blob), digestOf(layers[i].blob))
		}
	}
	return nil
}

// stats runs `cairn dedup stats --json` (through the running server's
// debug listener when one holds the metadata store).
func stats(t *testing.T, cfg, root string) map[string]any {
	t.Helper()
	var stderr strings.Builder
	cmd := exec.Command(cairnproc.Binary(t), "dedup", "stats", "--config", cfg, "--root", root, "--json")
	cmd.Stderr = &stderr // log lines (a Redis without persistence is warned of)
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("cairn dedup stats: %v\n%s%s", err, out, stderr.String())
	}
	var m map[string]any
	if err := json.Unmarshal(out, &m); err != nil {
		t.Fatalf("stats output: %v\n%s", err, out)
	}
	return m
}

func layerCount(st map[string]any, state string) int {
	return int(st["layers"].(map[string]any)[state].(float64))
}

func TestFullModeByteExact(t *testing.T) {
	layers := allLayers(t)
	srv, cfg, _ := startDedup(t, "full", "")
	push(t, srv, "features/all", layers)
	waitState(t, srv.Root, layers, false)

	gnu := layers[len(layers)-1]
	if !exists(filepath.Join(blobDir(srv.Root, digestOf(gnu.blob)), "data")) {
		t.Fatal("the GNU gzip layer lost its intact copy")
	}
	pullAll(t, srv, "features/all", layers)

	st := stats(t, cfg, srv.Root)
	if got, want := layerCount(st, "deduplicated"), len(layers)-1; got != want {
		t.Errorf("stats: %d layers deduplicated, want %d (%v)", got, want, st["layers"])
	}
	if got := layerCount(st, "irreproducible"); got != 1 {
		t.Errorf("stats: %d layers irreproducible, want 1 (the GNU gzip one)", got)
	}
	files := st["files"].(map[string]any)
	if files["shared"].(float64) < 10 {
		t.Errorf("stats: %v shared files, want at least the 10 every layer holds", files["shared"])
	}
	if st["ratio"].(float64) <= 1 {
		t.Errorf("stats: ratio %v, want > 1 for layers sharing most files", st["ratio"])
	}

	// A restart (empty in-memory state) still serves every layer.
	srv.Stop()
	srv = cairnproc.Start(t, srv.Root, "--config", cfg)
	pullAll(t, srv, "features/all", layers)
}

func TestHeadAndRange(t *testing.T) {
	layers := allLayers(t)[:3]
	srv, _, debug := startDedup(t, "full", "")
	push(t, srv, "ranges/img", layers)
	waitState(t, srv.Root, layers, false)

	l := layers[1]
	dg := digestOf(l.blob)
	url := srv.URL + "/v2/ranges/img/blobs/" + dg
	before := regtest.Metric(t, debug, `cairn_cache_requests_total{cache="preconstruct",result="miss"}`)
	resp, err := http.Head(url)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 200 || resp.ContentLength != int64(len(l.blob)) || resp.Header.Get("Docker-Content-Digest") != dg {
		t.Fatalf("HEAD: %d, length %d, digest %q", resp.StatusCode, resp.ContentLength, resp.Header.Get("Docker-Content-Digest"))
	}
	if after := regtest.Metric(t, debug, `cairn_cache_requests_total{cache="preconstruct",result="miss"}`); after != before {
		t.Fatalf("HEAD started a restore (preconstruct misses %v -> %v)", before, after)
	}

	get := func(rng string) (int, []byte) {
		var hdr []string
		if rng != "" {
			hdr = []string{"Range", rng}
		}
		r := regtest.Do(t, http.DefaultClient, http.MethodGet, url, nil, hdr...)
		return r.Status, r.Body
	}
	// A Range from the middle before anything is cached, then after.
	for _, round := range []string{"cold", "cached"} {
		code, b := get("bytes=1000-4999")
		if code != http.StatusPartialContent || !bytes.Equal(b, l.blob[1000:5000]) {
			t.Fatalf("%s range: status %d, %d bytes, equal %v", round, code, len(b), bytes.Equal(b, l.blob[1000:5000]))
		}
		code, b = get("bytes=-100")
		if code != http.StatusPartialContent || !bytes.Equal(b, l.blob[len(l.blob)-100:]) {
			t.Fatalf("%s suffix range: status %d, %d bytes", round, code, len(b))
		}
		code, b = get("")
		if code != 200 || !bytes.Equal(b, l.blob) {
			t.Fatalf("%s full GET: status %d, %d bytes", round, code, len(b))
		}
	}
	// One rebuild served all six GETs: the first started it, the others
	// joined it or read the cached copy.
	misses := regtest.Metric(t, debug, `cairn_cache_requests_total{cache="preconstruct",result="miss"}`) - before
	hits := regtest.Metric(t, debug, `cairn_cache_requests_total{cache="preconstruct",result="hit"}`)
	if misses != 1 || hits != 5 {
		t.Fatalf("six GETs of one layer: %v rebuilds started (want 1), %v served by one already started (want 5)", misses, hits)
	}
}

func TestIndexModeKeepsIntact(t *testing.T) {
	layers := allLayers(t)[:4]
	srv, cfg, _ := startDedup(t, "index", "")
	push(t, srv, "index/img", layers)
	waitState(t, srv.Root, layers, true)
	pullAll(t, srv, "index/img", layers)
	st := stats(t, cfg, srv.Root)
	if got := layerCount(st, "intact"); got != len(layers) {
		t.Fatalf("index mode: %d layers intact, want %d", got, len(layers))
	}
}

func TestRepositoryOverride(t *testing.T) {
	layers := allLayers(t)[:2]
	other := allLayers(t)[2:4]
	srv, _, _ := startDedup(t, "off", "    repositories:\n      \"dedup/*\": full\n")
	push(t, srv, "dedup/on", layers)
	push(t, srv, "plain/off", other)
	waitState(t, srv.Root, layers, false)
	for _, l := range other {
		if exists(filepath.Join(blobDir(srv.Root, digestOf(l.blob)), "recipe")) {
			t.Fatalf("layer %s of a repository with dedup off was processed", l.name)
		}
	}
	pullAll(t, srv, "dedup/on", layers)
	pullAll(t, srv, "plain/off", other)
}

func TestDedupRunCLI(t *testing.T) {
	layers := allLayers(t)[:5]
	srv, cfg, _ := startDedup(t, "off", "")
	push(t, srv, "cli/img", layers)
	root := srv.Root

	// While serve runs with dedup off it holds no metadata store; run.
	srv.Stop()
	out, err := exec.Command(cairnproc.Binary(t), "dedup", "run", "--config", cfg, "--root", root, "--mode", "full").CombinedOutput()
	if err != nil {
		t.Fatalf("cairn dedup run: %v\n%s", err, out)
	}
	if !strings.Contains(string(out), "deduplicated") {
		t.Fatalf("dedup run output lacks a deduplicated count:\n%s", out)
	}
	// `dedup run` returns once every layer is processed: nothing to wait for.
	if p := pendingLayers(root, layers, false); len(p) > 0 {
		t.Fatalf("layers not deduplicated after cairn dedup run: %v", p)
	}
	// The run recorded this storage's identity before it began: its
	// metadata is a complete index (GC may collect packs at once; the
	// next serve does not read every recipe and pack again to rebuild it).
	if rep := runGC(t, "--config", cfg, "--root", root, "--dry-run"); rep.DedupIndex != "complete" {
		t.Fatalf("after cairn dedup run on fresh storage, gc --dry-run says the dedup index is %q, want complete", rep.DedupIndex)
	}
	srv = cairnproc.Start(t, root, "--config", cfg)
	pullAll(t, srv, "cli/img", layers)

	// Bad input: one line, non-zero exit, nothing changed.
	out, err = exec.Command(cairnproc.Binary(t), "dedup", "run", "--root", root, "--mode", "sideways").CombinedOutput()
	var ee *exec.ExitError
	if !errors.As(err, &ee) || ee.ExitCode() != 2 || strings.Count(strings.TrimSpace(string(out)), "\n") != 0 {
		t.Fatalf("bad --mode: err %v, output %q", err, out)
	}

	// A configuration that points this metadata store at other storage
	// (a typo in a root or bucket): the run refuses in one line and
	// writes to neither, rather than take the index over and lose this
	// storage's claim to it.
	others := allLayers(t)[5:7]
	other, _, _ := startDedup(t, "off", "")
	push(t, other, "cli/other", others)
	other.Stop()
	srv.Stop()
	wrong, _ := dedupConfig(t, "off", fmt.Sprintf("    metadata: {path: %q}\n", filepath.Join(root, "cairn-meta.db")))
	out, err = exec.Command(cairnproc.Binary(t), "dedup", "run", "--config", wrong, "--root", other.Root, "--mode", "full").CombinedOutput()
	if !errors.As(err, &ee) || ee.ExitCode() == 0 || !strings.Contains(string(out), "another storage") || strings.Count(strings.TrimSpace(string(out)), "\n") != 0 {
		t.Fatalf("dedup run with another storage's metadata: err %v, output %q", err, out)
	}
	if p := pendingLayers(other.Root, others, false); len(p) != len(others) {
		t.Fatalf("dedup run with another storage's metadata processed layers: only %v pending", p)
	}
	if rep := runGC(t, "--config", cfg, "--root", root, "--dry-run"); rep.DedupIndex != "complete" {
		t.Fatalf("after a refused run, gc --dry-run says the dedup index is %q, want complete", rep.DedupIndex)
	}
	srv = cairnproc.Start(t, root, "--config", cfg)
	pullAll(t, srv, "cli/img", layers)
}

// TestSelectivePromotesHotLayer: in selective mode a cold layer loses its
// intact copy; pulled often enough, it gets it back, and pulls stay exact.
func TestSelectivePromotesHotLayer(t *testing.T) {
	layers := allLayers(t)[:2]
	srv, _, _ := startDedup(t, "selective", "    selective: {pulls: 3, window: 1h}\n")
	push(t, srv, "selective/img", layers)
	waitState(t, srv.Root, layers, false)
	for range 3 {
		pullAll(t, srv, "selective/img", layers)
	}
	waitState(t, srv.Root, layers, true)
	pullAll(t, srv, "selective/img", layers)
}
