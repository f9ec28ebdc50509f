package dedup

import (
	"encoding/json"
	"io/fs"
	"net/http"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/cairn-registry/cairn/internal/layout"
	"github.com/cairn-registry/cairn/internal/testutil/cairnproc"
	"github.com/cairn-registry/cairn/internal/testutil/regtest"
)

// countFiles counts the unique files in the dedup file store under root.
func countFiles(t *testing.T, root string) int {
	t.Helper()
	n := 0
	filepath.WalkDir(filepath.Join(root, layout.FilesDir), func(_ string, d fs.DirEntry, err error) error {
		if err == nil && !d.IsDir() {
			n++
		}
		return nil
	})
	return n
}

// TestGCReleasesFiles deletes one of two images that share files and runs
// `cairn gc`: the deleted image's deduplicated layers go, files only they
// held are deleted, shared files stay, and the other image pulls
// byte-exact.
func TestGCReleasesFiles(t *testing.T) {
	all := allLayers(t)
	keep, drop := all[:3], all[3:6]
	srv, cfg, _ := startDedup(t, "full", "")
	root := srv.Root
	push(t, srv, "gc/keep", keep)
	push(t, srv, "gc/drop", drop)
	waitState(t, root, append(append([]testLayer{}, keep...), drop...), false)
	before := countFiles(t, root)

	// Delete the second image's manifest.
	resp := regtest.Do(t, http.DefaultClient, http.MethodDelete, srv.URL+"/v2/gc/drop/manifests/v1", nil)
	if resp.Status != http.StatusAccepted {
		t.Fatalf("DELETE tag: %d", resp.Status)
	}

	// With serve running, the CLI cannot take the metadata store: clear error.
	out, err := exec.Command(cairnproc.Binary(t), "gc", "--config", cfg, "--root", root, "--delay", "0s").CombinedOutput()
	if err == nil || !strings.Contains(string(out), "in use by a running cairn serve") {
		t.Fatalf("gc with serve holding the store: err %v, output %s", err, out)
	}
	srv.Stop()
	out, err = exec.Command(cairnproc.Binary(t), "gc", "--config", cfg, "--root", root, "--delay", "0s", "--delete-untagged", "--json", "--quiet").CombinedOutput()
	if err != nil {
		t.Fatalf("cairn gc: %v\n%s", err, out)
	}
	var rep struct {
		Deleted struct {
			Blobs      int64 `json:"blobs"`
			Recipes    int64 `json:"recipes"`
			DedupFiles int64 `json:"dedup_files"`
		} `json:"deleted"`
	}
	if err := json.Unmarshal(out, &rep); err != nil {
		t.Fatalf("gc report: %v\n%s", err, out)
	}
	if rep.Deleted.Recipes != int64(len(drop)) {
		t.Errorf("gc deleted %d recipes, want %d (report %s)", rep.Deleted.Recipes, len(drop), out)
	}
	after := countFiles(t, root)
	// Each featureTar variant has 6 files of its own; the shared ones stay.
	if rep.Deleted.DedupFiles < int64(6*len(drop)) || before-after != int(rep.Deleted.DedupFiles) {
		t.Errorf("files: %d before, %d after, gc says %d deleted; want at least %d deleted", before, after, rep.Deleted.DedupFiles, 6*len(drop))
	}
	for _, l := range drop {
		if exists(blobDir(root, digestOf(l.blob))) {
			t.Errorf("layer %s of the deleted image is still stored", l.name)
		}
	}
	srv = cairnproc.Start(t, root, "--config", cfg)
	pullAll(t, srv, "gc/keep", keep)

	// Pushing the deleted image again writes its files anew.
	push(t, srv, "gc/drop", drop)
	waitState(t, root, drop, false)
	pullAll(t, srv, "gc/drop", drop)
}
