package dedup

import (
	"path/filepath"
	"testing"
)

// TestRePushStoresOnce pushes the layers of a deduplicated image again, to
// another repository (ggcr finds them missing there and uploads them: a
// plain upload, not a mount). The uploads are linked to the stored
// recipes, not written again beside them: no intact copy comes back, the
// statistics count none, and both repositories pull byte for byte.
func TestRePushStoresOnce(t *testing.T) {
	layers := allLayers(t)[:4]
	srv, cfg, _ := startDedup(t, "full", "")
	root := srv.Root
	push(t, srv, "repush/a", layers)
	waitState(t, root, layers, false)

	push(t, srv, "repush/b", layers)
	for _, l := range layers {
		if exists(filepath.Join(blobDir(root, digestOf(l.blob)), "data")) {
			t.Errorf("layer %s: the re-push stored an intact copy beside its recipe", l.name)
		}
	}
	pullAll(t, srv, "repush/a", layers)
	pullAll(t, srv, "repush/b", layers)
	st := stats(t, cfg, root)
	if intact := st["storedBytes"].(map[string]any)["intact"].(float64); intact != 0 {
		t.Errorf("stats count %v intact bytes after the re-push, want 0", intact)
	}
}
