package e2e

import (
	"bytes"
	"io/fs"
	"os"
	"path/filepath"
	"testing"

	"github.com/opencontainers/go-digest"

	"github.com/cairn-registry/cairn/internal/layout"
)

// TestDurableAtManifest pushes images to a filesystem root: once a push's
// manifest is accepted, nothing it names is left unsynced (no marker under
// cairn/unsynced). Then it plays a machine restart: markers of another boot
// name an intact blob and one whose bytes the crash lost; the next serve
// keeps the first, deletes the second with its link (a push sends it
// again) and logs both.
func TestDurableAtManifest(t *testing.T) {
	t.Parallel()
	root := t.TempDir()
	e := startRoot(t, root)
	const repo = "e2e/durable"
	img := e.pushRandom(repo+":v1", 3, 1<<20)
	if left := unsyncedMarkers(t, root); len(left) != 0 {
		t.Fatalf("after the image's push, markers %q: its blobs are not all synced", left)
	}
	intact, torn := randBytes(t, 200<<10), randBytes(t, 200<<10)
	e.uploadBlob(repo, intact)
	e.uploadBlob(repo, torn)
	e.stop()

	// The restart: both blobs were marked in a boot that is over, and
	// one's bytes never reached the disk.
	for _, b := range [][]byte{intact, torn} {
		d := digest.FromBytes(b)
		p := filepath.Join(root, filepath.FromSlash(layout.UnsyncedMarker("0f0e0d0c-boot-before-crash", d, "n1")))
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(layout.LayerLink(repo, d)), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	tornPath := filepath.Join(root, filepath.FromSlash(layout.BlobData(digest.FromBytes(torn))))
	if err := os.WriteFile(tornPath, bytes.Repeat([]byte{0}, len(torn)), 0o644); err != nil {
		t.Fatal(err)
	}
	e = startRoot(t, root)
	if logs, ok := e.srv.LogsWith("recovered blobs stored without a sync", "verified=1 lost=1"); !ok {
		t.Errorf("start-up log does not report 1 verified and 1 lost blob:\n%s", logs)
	}
	e.getBlob(repo, sha(intact), int64(len(intact)))
	wantError(t, e.do("GET", "/v2/"+repo+"/blobs/"+sha(torn), nil), 404, "BLOB_UNKNOWN")
	e.verifyImage(repo, "v1", img)
	if left := unsyncedMarkers(t, root); len(left) != 0 {
		t.Errorf("markers %q left after the restart", left)
	}
	e.uploadBlob(repo, torn)
	e.getBlob(repo, sha(torn), int64(len(torn)))
}

// unsyncedMarkers lists the markers of blobs not yet synced under root.
func unsyncedMarkers(t *testing.T, root string) []string {
	t.Helper()
	var got []string
	dir := filepath.Join(root, filepath.FromSlash(layout.UnsyncedDir))
	err := filepath.WalkDir(dir, func(p string, de fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if !de.IsDir() {
			got = append(got, p)
		}
		return nil
	})
	if err != nil && !os.IsNotExist(err) {
		t.Fatal(err)
	}
	return got
}
