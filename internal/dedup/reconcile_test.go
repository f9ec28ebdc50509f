package dedup

import (
	"context"
	"errors"
	"testing"

	"github.com/cairn-registry/cairn/internal/layout"
	"github.com/cairn-registry/cairn/internal/meta"
)

// TestReleaseAfterStoppedGC: a GC that deleted a deduplicated blob and
// stopped before releasing its files leaves the layer's references held.
// The worker's hourly pass finds the recipe file gone and releases them;
// the pass over a live layer changes nothing.
func TestReleaseAfterStoppedGC(t *testing.T) {
	ctx := context.Background()
	v := newEnv(t, nil, Options{})
	ls := sharedLayers(t)
	dead, live := v.put(ls[0].blob), v.put(ls[1].blob)
	v.process(dead, ModeFull, outDeduplicated)
	v.process(live, ModeFull, outDeduplicated)
	v.wantBlob(ls[0].blob) // caches the recipe: the recheck must not trust it

	// GC's delete of the dead blob, then a crash.
	if err := v.d.Delete(ctx, layout.BlobRecipe(dead)); err != nil {
		t.Fatal(err)
	}
	if out, err := v.eng.process(ctx, dead, ModeIndex, true); err != nil || out != outGone {
		t.Fatalf("recheck of the deleted layer: %v, %v; want %s", out, err, outGone)
	}
	if _, err := v.store.LayerFiles(ctx, dead); !errors.Is(err, meta.ErrNotFound) {
		t.Fatalf("deleted layer still holds its files: %v", err)
	}
	if _, _, err := v.store.GetLayer(ctx, dead); !errors.Is(err, meta.ErrNotFound) {
		t.Fatalf("deleted layer still has a state: %v", err)
	}
	if out, err := v.eng.process(ctx, live, ModeIndex, true); err != nil || out != outUnchanged {
		t.Fatalf("recheck of a live layer: %v, %v", out, err)
	}
	if _, err := v.store.LayerFiles(ctx, live); err != nil {
		t.Fatalf("live layer lost its references: %v", err)
	}
	v.wantBlob(ls[1].blob)
}
