package gc

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/opencontainers/go-digest"
	ocispec "github.com/opencontainers/image-spec/specs-go/v1"

	"github.com/cairn-registry/cairn/internal/layout"
)

// world is a small registry: a shared layer in two repositories, a
// re-tagged image, an index with its children, referrers of a tagged and
// of an untagged manifest, and an orphan upload.
type world struct {
	shared              ocispec.Descriptor
	keep, moved, retag  ocispec.Descriptor // a:v1, a: first v2, a:v2 now
	idx, child1, child2 ocispec.Descriptor // a:multi and its children
	sigKeep, sigGone    ocispec.Descriptor // referrers of keep and of moved
	other               ocispec.Descriptor // b:latest, sharing the layer
	orphan              ocispec.Descriptor
	movedOwn            ocispec.Descriptor // the layer only moved uses
}

func buildWorld(f *fixture) *world {
	w := &world{}
	w.shared = f.layer("a")
	w.keep = f.put("a", "v1", f.image("a", w.shared))
	w.movedOwn = f.layer("a")
	w.moved = f.put("a", "v2", f.image("a", w.shared, w.movedOwn))
	w.retag = f.put("a", "v2", f.image("a", f.layer("a")))
	w.child1 = f.put("a", "", f.image("a", f.layer("a")))
	w.child2 = f.put("a", "", f.image("a", f.layer("a")))
	w.idx = f.put("a", "multi", f.index(w.child1, w.child2))
	w.sigKeep = f.put("a", "", f.artifact("a", w.keep))
	w.sigGone = f.put("a", "", f.artifact("a", w.moved))
	if _, err := f.reg.MountBlob(context.Background(), "b", w.shared.Digest, "a"); err != nil {
		f.t.Fatal(err)
	}
	w.other = f.put("b", "latest", f.image("b", w.shared))
	w.orphan = f.blob("a", randData(f.t, 99), "application/octet-stream")
	return w
}

func TestDeleteUntagged(t *testing.T) {
	f := newFixture(t)
	w := buildWorld(f)
	rep := f.gc(Options{DeleteUntagged: true})

	for _, ref := range []string{"v1", "v2", "multi"} {
		f.pull("a", ref)
	}
	f.pull("a", w.sigKeep.Digest.String())
	f.pull("b", "latest")
	for _, d := range []digest.Digest{w.moved.Digest, w.sigGone.Digest} {
		if f.hasRevision("a", d) {
			t.Errorf("revision %s survived", d)
		}
		if f.hasBlob(d) {
			t.Errorf("manifest blob %s survived", d)
		}
	}
	if f.hasTagIndex("a", "v2", w.moved.Digest) {
		t.Error("tag index entry v2 -> moved survived")
	}
	if !f.hasTagIndex("a", "v2", w.retag.Digest) {
		t.Error("tag index entry v2 -> current manifest was deleted")
	}
	for _, d := range []digest.Digest{w.movedOwn.Digest, w.orphan.Digest} {
		if f.hasBlob(d) || f.hasLayerLink("a", d) {
			t.Errorf("unreferenced blob %s or its link survived", d)
		}
	}
	if !f.hasBlob(w.shared.Digest) || !f.hasLayerLink("b", w.shared.Digest) {
		t.Error("shared layer lost")
	}
	if f.exists(string(layout.AppendReferrerLink(nil, "a", "sha256", w.moved.Digest.Encoded(), "sha256", w.sigGone.Digest.Encoded()))) {
		t.Error("referrers-index link of the deleted artifact survived")
	}
	d := rep.Deleted
	// moved and its artifact; moved's config, own layer and manifest blob,
	// the artifact's layer and manifest blob (its "{}" config is the other
	// artifact's too), and the orphan; their links but the manifests'.
	if d.Manifests != 2 || d.TagIndexEntries != 1 || d.ReferrerLinks != 1 || d.Blobs != 6 || d.LayerLinks != 4 {
		t.Errorf("deleted %+v", d)
	}
	if d.BytesFreed <= 0 || rep.BlobSweep != "done" || len(rep.Problems) != 0 {
		t.Errorf("report %+v", rep)
	}
	// A second run finds nothing.
	if again := f.gc(Options{DeleteUntagged: true}); again.Deleted != (Deleted{}) {
		t.Errorf("second run deleted %+v", again.Deleted)
	}
	if j := f.files(layout.GCJournalDir); len(j) != 0 {
		t.Errorf("journal left behind: %v", j)
	}
	if a := f.files(layout.GCActiveDir); len(a) != 0 {
		t.Errorf("markers or fences left behind: %v", a)
	}
}

func TestKeepUntaggedByDefault(t *testing.T) {
	f := newFixture(t)
	w := buildWorld(f)
	danglingSubject := f.put("a", "", f.image("a", f.layer("a")))
	dangling := f.put("a", "", f.artifact("a", danglingSubject))
	if err := f.reg.DeleteManifest(context.Background(), "a", danglingSubject.Digest.String()); err != nil {
		t.Fatal(err)
	}
	rep := f.gc(Options{})
	for _, d := range []digest.Digest{w.moved.Digest, w.sigGone.Digest, w.child1.Digest} {
		f.pull("a", d.String())
	}
	if f.hasBlob(w.orphan.Digest) {
		t.Error("orphan blob survived")
	}
	if f.hasRevision("a", dangling.Digest) {
		t.Error("a referrer of a deleted manifest survived")
	}
	if rep.Deleted.Manifests != 1 {
		t.Errorf("deleted %+v", rep.Deleted)
	}
}

func TestDelayKeepsRecent(t *testing.T) {
	f := newFixture(t)
	w := buildWorld(f)
	rep := f.gc(Options{DeleteUntagged: true, Delay: time.Hour})
	if rep.Deleted != (Deleted{}) {
		t.Fatalf("deleted %+v within the delay", rep.Deleted)
	}
	if rep.KeptYoung == 0 {
		t.Error("nothing counted as kept for its age")
	}
	f.pull("a", w.moved.Digest.String())
}

func TestDryRun(t *testing.T) {
	f := newFixture(t)
	buildWorld(f)
	before := f.files("/")
	dry := f.gc(Options{DeleteUntagged: true, DryRun: true})
	if after := f.files("/"); !slices.Equal(before, after) {
		t.Fatalf("dry run changed storage:\nbefore %v\nafter  %v", before, after)
	}
	real := f.gc(Options{DeleteUntagged: true})
	if dry.Deleted != real.Deleted {
		t.Errorf("dry run would delete %+v, the run deleted %+v", dry.Deleted, real.Deleted)
	}
}

func TestSHA512Blobs(t *testing.T) {
	f := newFixture(t)
	keepL := f.blobAlg("x", randData(t, 100), ocispec.MediaTypeImageLayer, digest.SHA512)
	goneL := f.blobAlg("x", randData(t, 100), ocispec.MediaTypeImageLayer, digest.SHA512)
	f.put("x", "t", f.image("x", keepL))
	f.put("x", "u", f.image("x", goneL))
	f.put("x", "u", f.image("x"))
	f.gc(Options{DeleteUntagged: true})
	f.pull("x", "t")
	if f.hasBlob(goneL.Digest) || f.hasLayerLink("x", goneL.Digest) {
		t.Error("unreferenced sha512 blob survived")
	}
	if !f.hasBlob(keepL.Digest) {
		t.Error("referenced sha512 blob deleted")
	}
}

func TestManyTagsAndBatches(t *testing.T) {
	f := newFixture(t)
	var gone []ocispec.Descriptor
	for i := range 30 {
		m := f.put("r", "", f.image("r"))
		for j := range 40 {
			tag := "t" + string(rune('a'+i%26)) + string(rune('a'+j%26)) + string(rune('0'+j/26)) + string(rune('0'+i/26))
			if _, err := f.reg.PutManifest(context.Background(), "r", tag, ocispec.MediaTypeImageManifest, mustGet(f, "r", m.Digest), nil); err != nil {
				t.Fatal(err)
			}
		}
		gone = append(gone, m)
	}
	final := f.put("r", "", f.image("r"))
	content := mustGet(f, "r", final.Digest)
	tags, _ := f.reg.Tags(context.Background(), "r")
	for _, tag := range tags {
		if _, err := f.reg.PutManifest(context.Background(), "r", tag, ocispec.MediaTypeImageManifest, content, nil); err != nil {
			t.Fatal(err)
		}
	}
	rep := f.gc(Options{DeleteUntagged: true, BatchSize: 7, Concurrency: 3})
	if rep.Deleted.Manifests != 30 || rep.Deleted.TagIndexEntries != 30*40 {
		t.Errorf("deleted %+v", rep.Deleted)
	}
	for _, m := range gone {
		if f.hasRevision("r", m.Digest) || f.hasBlob(m.Digest) {
			t.Errorf("manifest %s survived", m.Digest)
		}
	}
	for _, tag := range tags {
		f.pull("r", tag)
	}
	if want := int64(30*40+30+30*2+30*1) / 7; rep.Requests["delete_files"] < want {
		t.Errorf("requests %v: want batches of 7", rep.Requests)
	}
}

func mustGet(f *fixture, repo string, d digest.Digest) []byte {
	f.t.Helper()
	m, err := f.reg.GetManifest(context.Background(), repo, d.String())
	if err != nil {
		f.t.Fatal(err)
	}
	return m.Content
}

func TestWritersLeaveNoJournal(t *testing.T) {
	f := newFixture(t)
	buildWorld(f)
	if j := f.files(layout.GCJournalDir); len(j) != 0 {
		t.Errorf("pushes with no GC running left journal records: %v", j)
	}
}
