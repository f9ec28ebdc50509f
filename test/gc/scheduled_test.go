package gc

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/random"
	"github.com/google/go-containerregistry/pkg/v1/remote"
)

// TestScheduledGC: cairn serve with storage.gc enabled collects an image
// untagged by a re-tag, on its own, and keeps serving the new one. The delay
// (10s) keeps the runs every second from taking the blobs of a push still
// under way: with delay 0 a loaded machine saw a run between a push's blobs
// and its manifest, which is GC doing what delay 0 asks.
func TestScheduledGC(t *testing.T) {
	root := t.TempDir()
	cfg := filepath.Join(t.TempDir(), "config.yml")
	err := os.WriteFile(cfg, []byte("storage:\n  gc:\n    enabled: true\n    interval: 1s\n    delay: 10s\n    deleteuntagged: true\n"), 0o644)
	if err != nil {
		t.Fatal(err)
	}
	n := startNode(t, root, "--config", cfg)
	ctx := t.Context()
	old, _ := random.Image(1024, 2)
	cur, _ := random.Image(1024, 2)
	for _, img := range []v1.Image{old, cur} {
		if err := remote.Write(n.ref(t, "sched/app:latest"), img, n.opts(ctx)...); err != nil {
			t.Fatal(err)
		}
	}
	oldDigest, curDigest := digestOf(t, old), digestOf(t, cur)
	deadline := time.Now().Add(2 * time.Minute) // a hang guard
	for readDisk(t, root).blobs[oldDigest] {
		if time.Now().After(deadline) {
			t.Fatalf("the scheduled GC did not collect %s within 2 minutes\n%s", oldDigest, n.srv.Logs())
		}
		time.Sleep(200 * time.Millisecond)
	}
	if err := n.pullImage(ctx, t, "sched/app", "latest", curDigest); err != nil {
		t.Fatal(err)
	}
	// The run logs once it has ended, which may be after the deletion
	// seen above.
	for !strings.Contains(n.srv.Logs(), "msg=gc ") {
		if time.Now().After(deadline) {
			t.Fatalf("no gc run in the server's log within 2 minutes\n%s", n.srv.Logs())
		}
		time.Sleep(200 * time.Millisecond)
	}
}
