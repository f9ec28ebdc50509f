package gc

import (
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/google/go-containerregistry/pkg/v1/random"
	"github.com/google/go-containerregistry/pkg/v1/remote"
)

// TestTempFilesCollected (issue 10, item 5): the temporary files a killed
// writer leaves (PutContent's link~<suffix>, data~<suffix>) are collected by
// GC once older than the delay, and young ones stay: they may be a write in
// progress. On the old code nothing ever removed them.
func TestTempFilesCollected(t *testing.T) {
	ctx := context.Background()
	root := t.TempDir()
	n := startNode(t, root)
	img, err := random.Image(512, 1)
	if err != nil {
		t.Fatal(err)
	}
	if err := remote.Write(n.ref(t, "temp/app:v1"), img, n.opts(ctx)...); err != nil {
		t.Fatal(err)
	}
	n.srv.Stop()

	v2 := filepath.Join(root, "docker/registry/v2")
	tag := filepath.Join(v2, "repositories/temp/app/_manifests/tags/v1/current")
	blobs, err := filepath.Glob(filepath.Join(v2, "blobs/sha256/*/*"))
	if err != nil || len(blobs) == 0 {
		t.Fatalf("no blob directories: %v", err)
	}
	old := []string{filepath.Join(tag, "link~3k2j1h"), filepath.Join(blobs[0], "data~9x8y7z")}
	young := filepath.Join(tag, "link~young1")
	for _, p := range append(old, young) {
		if err := os.WriteFile(p, []byte("partial"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	long := time.Now().Add(-2 * time.Hour)
	for _, p := range old {
		if err := os.Chtimes(p, long, long); err != nil {
			t.Fatal(err)
		}
	}

	dry := runGC(t, root, "--dry-run")
	if dry.Deleted.TmpFiles != 2 {
		t.Errorf("dry run counts %d temporary files, want 2", dry.Deleted.TmpFiles)
	}
	rep := runGC(t, root) // default delay 1h
	if rep.Deleted.TmpFiles != 2 {
		t.Errorf("gc deleted %d temporary files, want 2", rep.Deleted.TmpFiles)
	}
	for _, p := range old {
		if _, err := os.Stat(p); !os.IsNotExist(err) {
			t.Errorf("%s: still there after gc (%v)", p, err)
		}
	}
	if _, err := os.Stat(young); err != nil {
		t.Errorf("young temporary file removed: %v", err)
	}

	// The registry is intact.
	n = startNode(t, root)
	want, err := img.Digest()
	if err != nil {
		t.Fatal(err)
	}
	if err := n.pullImage(ctx, t, "temp/app", "v1", want.String()); err != nil {
		t.Fatal(err)
	}
}
