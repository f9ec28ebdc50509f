package registry

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/opencontainers/go-digest"

	"github.com/cairn-registry/cairn/internal/layout"
	"github.com/cairn-registry/cairn/internal/storage/driver"
	"github.com/cairn-registry/cairn/internal/storage/driver/filesystem"
	"github.com/cairn-registry/cairn/internal/storage/driver/inmemory"
)

// TestWritersWaitForFences: a push that finds a GC round's fence waits
// until it is removed; one stale beyond any live round does not wait.
func TestWritersWaitForFences(t *testing.T) {
	root := t.TempDir()
	d, err := filesystem.New(root)
	if err != nil {
		t.Fatal(err)
	}
	r := New(d, Options{})
	ctx := context.Background()
	fence := layout.GCFence("test", 1)
	if err := d.PutContent(ctx, fence, nil); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() {
		id, err := r.StartUpload(ctx, "a")
		if err == nil {
			_, err = r.FinishUpload(ctx, "a", id, digest.FromString("blob"), bytes.NewReader([]byte("blob")), 0)
		}
		done <- err
	}()
	select {
	case err := <-done:
		t.Fatalf("upload finished under an open fence: %v", err)
	case <-time.After(300 * time.Millisecond):
	}
	if _, err := d.DeleteFiles(ctx, []string{fence}); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("upload still waiting after the fence was removed")
	}

	// A fence left by a GC that died long ago is ignored.
	if err := d.PutContent(ctx, fence, nil); err != nil {
		t.Fatal(err)
	}
	old := time.Now().Add(-time.Hour)
	if err := os.Chtimes(filepath.Join(root, filepath.FromSlash(fence)), old, old); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	if _, err := r.MountBlob(ctx, "b", digest.FromString("blob"), "a"); err != nil {
		t.Fatal(err)
	}
	if time.Since(start) > 2*time.Second {
		t.Error("a stale fence made the writer wait")
	}
}

// TestRecordsRemovedWithoutGC: with no GC run active, an operation removes
// its journal record when it ends; with one active, it leaves it for GC.
func TestRecordsRemovedWithoutGC(t *testing.T) {
	d := inmemory.New()
	r := New(d, Options{})
	ctx := context.Background()
	upload := func(data string) {
		id, err := r.StartUpload(ctx, "a")
		if err == nil {
			_, err = r.FinishUpload(ctx, "a", id, digest.FromString(data), bytes.NewReader([]byte(data)), 0)
		}
		if err != nil {
			t.Fatal(err)
		}
	}
	records := func() int {
		n := 0
		_ = d.Walk(ctx, layout.GCJournalDir, func(fi driver.FileInfo) error {
			if !fi.IsDir {
				n++
			}
			return nil
		})
		return n
	}
	upload("one")
	if n := records(); n != 0 {
		t.Errorf("%d records left with no GC running", n)
	}
	if err := d.PutContent(ctx, layout.GCRunMarker("test"), nil); err != nil {
		t.Fatal(err)
	}
	upload("two")
	if n := records(); n != 1 {
		t.Errorf("%d records left while a GC runs, want 1", n)
	}
}
