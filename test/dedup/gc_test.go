package dedup

import (
	"encoding/json"
	"fmt"
	"io/fs"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/cairn-registry/cairn/internal/layout"
	"github.com/cairn-registry/cairn/internal/testutil/cairnproc"
)

// storedFileBytes is what the dedup file store under root occupies: its
// packs and any files stored one object each.
func storedFileBytes(t *testing.T, root string) int64 {
	t.Helper()
	var n int64
	for _, dir := range []string{layout.PacksDir, layout.FilesDir} {
		filepath.WalkDir(filepath.Join(root, dir), func(_ string, d fs.DirEntry, err error) error {
			if err == nil && !d.IsDir() {
				if fi, err := d.Info(); err == nil {
					n += fi.Size()
				}
			}
			return nil
		})
	}
	return n
}

// gcReport is what the tests read of `cairn gc --json`.
type gcReport struct {
	Deleted struct {
		Blobs      int64 `json:"blobs"`
		Recipes    int64 `json:"recipes"`
		DedupFiles int64 `json:"dedup_files"`
	} `json:"deleted"`
	Packs struct {
		Orphans    int64 `json:"orphans"`
		Deleted    int64 `json:"deleted"`
		Compacted  int64 `json:"compacted"`
		FilesMoved int64 `json:"files_moved"`
		BytesFreed int64 `json:"bytes_freed"`
	} `json:"packs"`
	DedupIndex string `json:"dedup_index"`
}

// runGC runs `cairn gc --json` with args and returns its report.
func runGC(t *testing.T, args ...string) gcReport {
	t.Helper()
	rep, err := gcRun(cairnproc.Binary(t), args...)
	if err != nil {
		t.Fatal(err)
	}
	return rep
}

// gcRun is runGC for goroutines other than the test's.
func gcRun(bin string, args ...string) (gcReport, error) {
	var rep gcReport
	_, err := gcJSON(bin, &rep, args...)
	return rep, err
}

// gcJSON runs `cairn gc --json --quiet` with args, decodes its report into
// v and returns what it logged on stderr (kept apart from the report).
func gcJSON(bin string, v any, args ...string) (string, error) {
	var stderr strings.Builder
	cmd := exec.Command(bin, append([]string{"gc", "--json", "--quiet"}, args...)...)
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return stderr.String(), fmt.Errorf("cairn gc %v: %w\n%s%s", args, err, out, stderr.String())
	}
	if err := json.Unmarshal(out, v); err != nil {
		return stderr.String(), fmt.Errorf("gc report: %w\n%s%s", err, out, stderr.String())
	}
	return stderr.String(), nil
}

// TestGCReleasesFiles deletes one of two images that share files and runs
// `cairn gc`: the deleted image's deduplicated layers go, files only they
// held are released, shared files stay, a second run deletes or compacts
// the packs that emptied, and the other image pulls byte-exact.
func TestGCReleasesFiles(t *testing.T) {
	all := allLayers(t)
	keep, drop := all[:3], all[3:6]
	srv, cfg, _ := startDedup(t, "full", "")
	root := srv.Root
	push(t, srv, "gc/keep", keep)
	push(t, srv, "gc/drop", drop)
	waitState(t, root, append(append([]testLayer{}, keep...), drop...), false)
	before := storedFileBytes(t, root)

	deleteTag(t, srv, "gc/drop") // the second image's manifest

	// With serve running, the CLI cannot take the metadata store: clear error.
	out, err := exec.Command(cairnproc.Binary(t), "gc", "--config", cfg, "--root", root, "--delay", "0s").CombinedOutput()
	if err == nil || !strings.Contains(string(out), "in use by a running cairn serve") {
		t.Fatalf("gc with serve holding the store: err %v, output %s", err, out)
	}
	srv.Stop()
	gcArgs := []string{"--config", cfg, "--root", root, "--delay", "0s", "--delete-untagged"}
	rep := runGC(t, gcArgs...)
	if rep.Deleted.Recipes != int64(len(drop)) {
		t.Errorf("gc deleted %d recipes, want %d (report %+v)", rep.Deleted.Recipes, len(drop), rep)
	}
	// Each featureTar variant has 6 files of its own; the shared ones stay.
	if rep.Deleted.DedupFiles < int64(6*len(drop)) {
		t.Errorf("gc released %d files, want at least %d", rep.Deleted.DedupFiles, 6*len(drop))
	}
	// The packs those files emptied became empty during that run: the
	// next one deletes (or compacts) them.
	second := runGC(t, gcArgs...)
	after := storedFileBytes(t, root)
	if second.Packs.Deleted+second.Packs.Compacted == 0 || after >= before {
		t.Errorf("second gc %+v: file store %d bytes before, %d after; want packs deleted and space back", second.Packs, before, after)
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
