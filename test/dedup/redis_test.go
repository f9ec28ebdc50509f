package dedup

import (
	"testing"

	"github.com/cairn-registry/cairn/internal/testutil/cairnproc"
)

// TestTwoNodesSharedRedis runs two serve nodes on one storage root with the
// metadata in Redis (started by scripts/test.sh): a push to one node is
// deduplicated, the other node serves it byte-exact, and the CLI (stats,
// GC) works beside both.
func TestTwoNodesSharedRedis(t *testing.T) {
	cfg := redisConfig(t, "workers: 1")
	root := t.TempDir()
	a := cairnproc.Start(t, root, "--config", cfg)
	b := cairnproc.Start(t, root, "--config", cfg)

	keep, drop := allLayers(t)[:3], allLayers(t)[3:5]
	push(t, a, "nodes/keep", keep)
	push(t, a, "nodes/drop", drop)
	waitState(t, root, append(append([]testLayer{}, keep...), drop...), false)
	pullAll(t, b, "nodes/keep", keep)
	pullAll(t, a, "nodes/drop", drop)

	st := stats(t, cfg, root)
	if got := layerCount(st, "deduplicated"); got != len(keep)+len(drop) {
		t.Fatalf("stats beside two running nodes: %d deduplicated, want %d", got, len(keep)+len(drop))
	}

	// GC from the CLI while both nodes serve: the dropped image's layers and
	// their own files go, the kept image still pulls from either node.
	deleteTag(t, b, "nodes/drop")
	before := storedFileBytes(t, root)
	gcArgs := []string{"--config", cfg, "--root", root, "--delay", "0s", "--delete-untagged"}
	if rep := runGC(t, gcArgs...); rep.Deleted.DedupFiles == 0 {
		t.Fatalf("gc beside two nodes released no unique files: %+v", rep)
	}
	if rep := runGC(t, gcArgs...); rep.Packs.Deleted+rep.Packs.Compacted == 0 {
		t.Fatalf("second gc beside two nodes freed no pack: %+v", rep.Packs)
	}
	if after := storedFileBytes(t, root); after >= before {
		t.Fatalf("file store %d bytes before gc, %d after", before, after)
	}
	pullAll(t, a, "nodes/keep", keep)
	pullAll(t, b, "nodes/keep", keep)
}
