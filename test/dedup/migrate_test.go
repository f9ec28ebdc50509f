package dedup

import (
	"archive/tar"
	"compress/gzip"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/cairn-registry/cairn/internal/testutil/cairnproc"
)

// legacyFixture is a filesystem store (and its bolt metadata) written and
// deduplicated by cairn before packs (main at 440f66e): unique files are
// objects of their own under cairn/files. TestWriteLegacyFixture rebuilds
// it with such a binary.
const legacyFixture = "testdata/legacy-store.tar.gz"

// legacyLayer is a small layer: five files every such layer shares, and
// three of its own.
func legacyLayer(t *testing.T, v int) testLayer {
	var bodies [][]byte
	for i := range 5 {
		bodies = append(bodies, content(uint64(900+i), 3000+i*500))
	}
	for i := range 3 {
		bodies = append(bodies, content(uint64(1000*v+i), 2000+i*700))
	}
	return testLayer{name: "legacy", mediaType: mtGzip, blob: gzipStd(t, tarOf(t, bodies), 6)}
}

// legacyImages are the images in the fixture: repo → layers, built the
// same way here, so the test knows every byte they must pull as.
func legacyImages(t *testing.T) map[string][]testLayer {
	return map[string][]testLayer{
		"legacy/a": {legacyLayer(t, 1), legacyLayer(t, 2)},
		"legacy/b": {legacyLayer(t, 3)},
	}
}

// TestWriteLegacyFixture writes legacyFixture with the binary named by
// CAIRN_LEGACY_BIN (built from a commit before packs); skipped otherwise.
func TestWriteLegacyFixture(t *testing.T) {
	bin := os.Getenv("CAIRN_LEGACY_BIN")
	if bin == "" {
		t.Skip("CAIRN_LEGACY_BIN is not set")
	}
	cfg, _ := dedupConfig(t, "full", "")
	root := t.TempDir()
	srv := cairnproc.StartBinary(t, bin, root, "--config", cfg)
	var all []testLayer
	for repo, layers := range legacyImages(t) {
		push(t, srv, repo, layers)
		all = append(all, layers...)
	}
	waitState(t, root, all, false)
	srv.Stop()
	os.RemoveAll(filepath.Join(root, "cairn-cache"))
	out, err := exec.Command("tar", "-czf", legacyFixture, "-C", root, ".").CombinedOutput()
	if err != nil {
		t.Fatalf("tar: %v\n%s", err, out)
	}
}

// untar extracts a .tar.gz into dir.
func untar(t *testing.T, archive, dir string) {
	t.Helper()
	f, err := os.Open(archive)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	zr, err := gzip.NewReader(f)
	if err != nil {
		t.Fatal(err)
	}
	tr := tar.NewReader(zr)
	for {
		h, err := tr.Next()
		if err == io.EOF {
			return
		}
		if err != nil {
			t.Fatal(err)
		}
		p := filepath.Join(dir, filepath.Clean("/"+h.Name))
		switch h.Typeflag {
		case tar.TypeDir:
			os.MkdirAll(p, 0o755)
		case tar.TypeReg:
			os.MkdirAll(filepath.Dir(p), 0o755)
			b, err := io.ReadAll(tr)
			if err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(p, b, 0o644); err != nil {
				t.Fatal(err)
			}
		}
	}
}

// countUnder counts the regular files below dir.
func countUnder(dir string) int {
	n := 0
	filepath.WalkDir(dir, func(_ string, d fs.DirEntry, err error) error {
		if err == nil && !d.IsDir() {
			n++
		}
		return nil
	})
	return n
}

// TestLegacyStoreMigrates (issue 11): a store deduplicated before packs is
// served as it is; new pushes sharing its files make a mixed store that
// pulls byte-exact; `cairn dedup repack` moves the old files into packs
// (a rerun finds nothing left), after which everything still pulls
// byte-exact and GC still frees what a deleted image held alone.
func TestLegacyStoreMigrates(t *testing.T) {
	root := t.TempDir()
	untar(t, legacyFixture, root)
	filesDir := filepath.Join(root, "docker/registry/v2/cairn/files")
	legacy := countUnder(filesDir)
	if legacy == 0 {
		t.Fatal("the fixture holds no per-file objects")
	}
	cfg, _ := dedupConfig(t, "full", "")
	images := legacyImages(t)
	srv := cairnproc.Start(t, root, "--config", cfg)
	for repo, layers := range images {
		pullAll(t, srv, repo, layers)
	}
	// A new image sharing the old files (legacyLayer's shared ones).
	mixed := []testLayer{legacyLayer(t, 4)}
	push(t, srv, "legacy/mixed", mixed)
	waitState(t, root, mixed, false)
	images["legacy/mixed"] = mixed
	for repo, layers := range images {
		pullAll(t, srv, repo, layers)
	}
	srv.Stop()

	out, err := exec.Command(cairnproc.Binary(t), "dedup", "repack", "--config", cfg, "--root", root).CombinedOutput()
	if err != nil {
		t.Fatalf("cairn dedup repack: %v\n%s", err, out)
	}
	t.Logf("%s", out)
	if left := countUnder(filesDir); left != 0 {
		t.Fatalf("%d of %d per-file objects left after repack", left, legacy)
	}
	out, err = exec.Command(cairnproc.Binary(t), "dedup", "repack", "--config", cfg, "--root", root).CombinedOutput()
	if err != nil || !strings.Contains(string(out), "0 with files moved") {
		t.Fatalf("second repack: %v\n%s", err, out)
	}
	srv = cairnproc.Start(t, root, "--config", cfg)
	for repo, layers := range images {
		pullAll(t, srv, repo, layers)
	}
	deleteTag(t, srv, "legacy/b")
	srv.Stop()
	gcArgs := []string{"--config", cfg, "--root", root, "--delay", "0s", "--delete-untagged"}
	if rep := runGC(t, gcArgs...); rep.Deleted.DedupFiles == 0 {
		t.Fatalf("gc released no file of the deleted image: %+v", rep)
	}
	runGC(t, gcArgs...)
	srv = cairnproc.Start(t, root, "--config", cfg)
	delete(images, "legacy/b")
	for repo, layers := range images {
		pullAll(t, srv, repo, layers)
	}
}
