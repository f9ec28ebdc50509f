package retention

import (
	"context"
	"errors"
	"slices"
	"testing"

	"github.com/cairn-registry/cairn/internal/storage/driver"
	"github.com/cairn-registry/cairn/internal/storage/driver/inmemory"
)

// A Preview hides what was deleted through it from every read and
// listing, refuses writes, and leaves the driver underneath as it was.
func TestPreview(t *testing.T) {
	ctx := context.Background()
	d := inmemory.New()
	for _, p := range []string{"/a/x/1", "/a/x/2", "/a/y", "/b"} {
		if err := d.PutContent(ctx, p, []byte(p)); err != nil {
			t.Fatal(err)
		}
	}
	pv := NewPreview(d)
	if err := pv.Delete(ctx, "/a/x"); err != nil {
		t.Fatal(err)
	}
	if err := pv.Delete(ctx, "/a/x"); !errors.Is(err, driver.ErrNotFound) {
		t.Errorf("second delete: %v, want not found", err)
	}
	if err := pv.Delete(ctx, "/nothing"); !errors.Is(err, driver.ErrNotFound) {
		t.Errorf("delete of nothing: %v, want not found", err)
	}
	if n, err := pv.DeleteFiles(ctx, []string{"/b"}); n != 1 || err != nil {
		t.Errorf("DeleteFiles: %d, %v", n, err)
	}
	for _, p := range []string{"/a/x/1", "/a/x", "/b"} {
		if _, err := pv.GetContent(ctx, p); !errors.Is(err, driver.ErrNotFound) && p != "/a/x" {
			t.Errorf("GetContent %s: %v, want not found", p, err)
		}
		if _, err := pv.Stat(ctx, p); !errors.Is(err, driver.ErrNotFound) {
			t.Errorf("Stat %s: %v, want not found", p, err)
		}
	}
	if got, err := pv.List(ctx, "/a"); err != nil || !slices.Equal(got, []string{"/a/y"}) {
		t.Errorf("List /a: %v, %v", got, err)
	}
	var walked []string
	if err := pv.Walk(ctx, "/", func(fi driver.FileInfo) error {
		if !fi.IsDir {
			walked = append(walked, fi.Path)
		}
		return nil
	}); err != nil || !slices.Equal(walked, []string{"/a/y"}) {
		t.Errorf("Walk: %v, %v", walked, err)
	}
	if err := pv.PutContent(ctx, "/c", nil); !errors.Is(err, ErrPreviewWrite) {
		t.Errorf("PutContent: %v", err)
	}
	if _, err := pv.Writer(ctx, "/c", false); !errors.Is(err, ErrPreviewWrite) {
		t.Errorf("Writer: %v", err)
	}
	if err := pv.Move(ctx, "/a/y", "/c"); !errors.Is(err, ErrPreviewWrite) {
		t.Errorf("Move: %v", err)
	}
	for _, p := range []string{"/a/x/1", "/a/x/2", "/a/y", "/b"} {
		if _, err := d.GetContent(ctx, p); err != nil {
			t.Errorf("underneath, %s: %v", p, err)
		}
	}
}
