package dedup

import (
	"fmt"
	"testing"

	"github.com/cairn-registry/cairn/internal/testutil/cairnproc"
)

// dryCounts is what a dry run must predict of the real run after it.
type dryCounts struct {
	Repositories int64 `json:"repositories"`
	Manifests    int64 `json:"manifests"`
	Tags         int64 `json:"tags"`
	Blobs        int64 `json:"blobs"`
	Deleted      struct {
		Manifests       int64 `json:"manifests"`
		TagIndexEntries int64 `json:"tag_index_entries"`
		ReferrerLinks   int64 `json:"referrer_links"`
		LayerLinks      int64 `json:"layer_links"`
		Blobs           int64 `json:"blobs"`
		BytesFreed      int64 `json:"bytes_freed"`
		Recipes         int64 `json:"recipes"`
		DedupFiles      int64 `json:"dedup_files"`
		TmpFiles        int64 `json:"tmp_files"`
	} `json:"deleted"`
	Packs struct {
		Packs      int64 `json:"packs"`
		Deleted    int64 `json:"deleted"`
		Orphans    int64 `json:"orphans"`
		BytesFreed int64 `json:"bytes_freed"`
		Adopted    int64 `json:"adopted"`
		Compacted  int64 `json:"compacted"`
		BytesMoved int64 `json:"bytes_moved"`
	} `json:"packs"`
}

// gcCounts runs `cairn gc --json` and returns its counts and its stderr.
func gcCounts(t *testing.T, args ...string) (dryCounts, string) {
	t.Helper()
	var c dryCounts
	stderr, err := gcJSON(cairnproc.Binary(t), &c, args...)
	if err != nil {
		t.Fatal(err)
	}
	return c, stderr
}

// dryThenReal runs a dry run and then the real run on the same store and
// fails unless the dry run reported every count the real run then had.
func dryThenReal(t *testing.T, step string, args ...string) dryCounts {
	t.Helper()
	dry, dryLog := gcCounts(t, append([]string{"--dry-run"}, args...)...)
	real, _ := gcCounts(t, args...)
	if dry != real {
		t.Errorf("%s: the dry run reported\n  %+v\nthe real run did\n  %+v\ndry run's log:\n%s", step, dry, real, dryLog)
	}
	return real
}

// TestDryRunReportsTheRealRun seeds a store deduplicated in full mode
// with a retention policy that deletes one image, and checks that each
// `cairn gc --dry-run` reports what the `cairn gc` right after it then
// does: retention's manifests and the blobs, recipes, unique files and
// packs they free; then, without retention deleting anything, the packs
// those files emptied; then a manifest deleted through the API.
func TestDryRunReportsTheRealRun(t *testing.T) {
	all := allLayers(t)
	keep, drop, later := all[:3], all[3:6], all[6:8]
	srv, cfg, _ := startDedup(t, "full", `retention:
  delay: 0s
  policies:
    - repositories: ["ret/**"]
      deleteuntagged: true
      keeptags:
        - patterns: ["keep-.*"]
`)
	root := srv.Root
	push(t, srv, "gc/keep", keep)
	push(t, srv, "ret/drop", drop) // its tag v1 is not kept: retention deletes it
	push(t, srv, "gc/later", later)
	waitState(t, root, all[:8], false)
	srv.Stop()

	args := []string{"--config", cfg, "--root", root, "--delay", "0s"}
	first := dryThenReal(t, "retention and GC", args...)
	if first.Deleted.Manifests+first.Deleted.Blobs == 0 || first.Deleted.Recipes != int64(len(drop)) || first.Deleted.DedupFiles == 0 {
		t.Errorf("retention and GC freed %+v: want the dropped image's manifest, %d recipes and their unique files", first.Deleted, len(drop))
	}
	// The packs the first run emptied are deleted or compacted now.
	second := dryThenReal(t, "packs emptied by the run before", args...)
	if second.Packs.Deleted+second.Packs.Compacted == 0 {
		t.Errorf("second run's packs %+v: want some deleted or compacted", second.Packs)
	}

	srv = cairnproc.Start(t, root, "--config", cfg)
	deleteTag(t, srv, "gc/later")
	srv.Stop()
	third := dryThenReal(t, "a manifest deleted through the API", append(args, "--delete-untagged")...)
	if third.Deleted.Recipes != int64(len(later)) || third.Deleted.DedupFiles == 0 {
		t.Errorf("after the API delete: %s", fmt.Sprintf("%+v", third.Deleted))
	}
	srv = cairnproc.Start(t, root, "--config", cfg)
	pullAll(t, srv, "gc/keep", keep)
}
