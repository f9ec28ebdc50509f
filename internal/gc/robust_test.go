package gc

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/opencontainers/go-digest"

	"github.com/cairn-registry/cairn/internal/fence"
	"github.com/cairn-registry/cairn/internal/layout"
	"github.com/cairn-registry/cairn/internal/manifest"
	"github.com/cairn-registry/cairn/internal/storage/driver"
	"github.com/cairn-registry/cairn/internal/storage/driver/filesystem"
)

func newFSFixture(t *testing.T) *fixture {
	d, err := filesystem.New(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	return newFixtureOn(t, d)
}

func (f *fixture) write(p, content string) {
	f.t.Helper()
	if err := f.d.PutContent(context.Background(), p, []byte(content)); err != nil {
		f.t.Fatal(err)
	}
}

// TestBadEntries fills a registry with what GC must survive: every bad
// entry is counted, nothing crashes, the run completes, and images pull.
func TestBadEntries(t *testing.T) {
	f := newFSFixture(t)
	w := buildWorld(f)
	root := layout.RepositoriesDir
	sha256Hex := w.moved.Digest.Encoded()

	// A link under sha512 naming a sha256 digest.
	f.write(root+"/a/_manifests/revisions/sha512/"+sha256Hex+"/link", string(w.moved.Digest))
	f.write(root+"/a/_layers/sha256/NOT-HEX/link", "sha256:nothex")
	f.write(layout.BlobsDir+"/sha256/zz/"+strings.Repeat("a", 64)+"/data", "misplaced")
	// A tag index entry naming no revision: deleted as stale.
	stale := digest.FromString("never pushed")
	f.write(string(layout.AppendTagIndexLink(nil, "a", "v1", "sha256", stale.Encoded())), string(stale))
	// A repository whose tag link is garbage: nothing in it is deleted.
	cImg := f.put("c", "x", f.image("c", f.layer("c")))
	cUntagged := f.put("c", "", f.image("c", f.layer("c")))
	f.write(layout.TagCurrentLink("c", "x"), "garbage")
	// A tagged revision whose manifest blob is missing, and an untagged one.
	dTagged := f.put("d", "t", f.image("d"))
	dUntagged := f.put("d", "", f.image("d"))
	for _, d := range []digest.Digest{dTagged.Digest, dUntagged.Digest} {
		if _, err := f.d.DeleteFiles(context.Background(), []string{layout.BlobData(d)}); err != nil {
			t.Fatal(err)
		}
	}
	// A manifest that does not parse.
	garbage := digest.FromString("not json")
	f.write(layout.BlobData(garbage), "not json")
	f.write(string(layout.AppendRevisionLink(nil, "e", "sha256", garbage.Encoded())), string(garbage))
	f.write(layout.TagCurrentLink("e", "bad"), string(garbage))
	// A journal record whose path means nothing.
	f.write(layout.GCJournalDir+"/nothing-here", "")

	rep := f.gc(Options{DeleteUntagged: true})
	want := map[string]int64{
		ProblemBadPath:         3, // the sha512 link, the layer link, the misplaced blob
		ProblemBadLink:         1,
		ProblemMissingManifest: 2,
		ProblemBadManifest:     1,
		ProblemBadJournal:      1,
	}
	for k, n := range want {
		if rep.Problems[k] != n {
			t.Errorf("problem %s counted %d times, want %d (examples %v)", k, rep.Problems[k], n, rep.Examples[k])
		}
	}
	for _, ref := range []string{"v1", "v2", "multi"} {
		f.pull("a", ref)
	}
	if !f.hasRevision("c", cUntagged.Digest) || !f.hasBlob(cImg.Digest) {
		t.Error("a repository with an unreadable tag lost manifests")
	}
	if f.hasRevision("d", dUntagged.Digest) || !f.hasRevision("d", dTagged.Digest) {
		t.Error("revisions without data: want the untagged one deleted, the tagged one kept")
	}
	if f.hasTagIndex("a", "v1", stale) {
		t.Error("stale tag index entry survived")
	}
	if f.hasRevision("a", w.moved.Digest) {
		t.Error("the untagged manifest survived")
	}
	if !f.exists(root + "/a/_manifests/revisions/sha512/" + sha256Hex + "/link") {
		t.Error("a bad entry was deleted; bad entries are skipped")
	}
	if rep.BlobSweep != "done" {
		t.Errorf("blob sweep %q", rep.BlobSweep)
	}
}

// failingDriver fails reads of one path as a broken store would.
type failingDriver struct {
	driver.Driver
	fail string
}

func (d *failingDriver) GetContent(ctx context.Context, p string) ([]byte, error) {
	if p == d.fail {
		return nil, errors.New("injected I/O error")
	}
	return d.Driver.GetContent(ctx, p)
}

// TestUnreadableManifestStopsBlobSweep: a manifest storage cannot return
// may reference anything, so no blob is deleted in that run.
func TestUnreadableManifestStopsBlobSweep(t *testing.T) {
	f := newFixture(t)
	w := buildWorld(f)
	rep, err := Run(context.Background(), &failingDriver{Driver: f.d, fail: layout.BlobData(w.keep.Digest)}, Options{DeleteUntagged: true})
	if err != nil {
		t.Fatal(err)
	}
	if rep.Problems[ProblemUnreadable] != 1 || !strings.HasPrefix(rep.BlobSweep, "skipped") {
		t.Errorf("problems %v, blob sweep %q", rep.Problems, rep.BlobSweep)
	}
	if rep.Deleted.Blobs != 0 || !f.hasBlob(w.orphan.Digest) {
		t.Error("blobs deleted although a manifest could not be read")
	}
	if rep.Deleted.Manifests != 2 {
		t.Errorf("deleted %+v: manifests still go", rep.Deleted)
	}
}

// TestDistributionTree collects a tree as distribution/distribution writes
// it: a schema 1 manifest whose layers are fsLayers, upload sessions, and
// links written by hand.
func TestDistributionTree(t *testing.T) {
	f := newFSFixture(t)
	put := func(content string) digest.Digest {
		d := digest.FromString(content)
		f.write(layout.BlobData(d), content)
		return d
	}
	link := func(p string, d digest.Digest) { f.write(p, string(d)) }
	l1, l2, orphan := put("layer one"), put("layer two"), put("orphan")
	s1 := put(`{"schemaVersion":1,"name":"lib/old","tag":"1","architecture":"amd64",` +
		`"fsLayers":[{"blobSum":"` + string(l1) + `"},{"blobSum":"` + string(l2) + `"}],` +
		`"history":[{"v1Compatibility":"{}"},{"v1Compatibility":"{}"}],"signatures":[]}`)
	repo := "lib/old"
	for _, d := range []digest.Digest{l1, l2, orphan} {
		link(string(layout.AppendLayerLink(nil, repo, "sha256", d.Encoded())), d)
	}
	link(string(layout.AppendRevisionLink(nil, repo, "sha256", s1.Encoded())), s1)
	link(layout.TagCurrentLink(repo, "1"), s1)
	link(string(layout.AppendTagIndexLink(nil, repo, "1", "sha256", s1.Encoded())), s1)
	upload := layout.RepositoriesDir + "/" + repo + "/_uploads/0f5e4b3c-1111-2222-3333-444455556666"
	f.write(upload+"/startedat", "2024-01-01T00:00:00Z")
	f.write(upload+"/data", "partial")
	f.write(upload+"/hashstates/sha256/7", "state")

	rep := f.gc(Options{DeleteUntagged: true})
	for _, d := range []digest.Digest{l1, l2, s1} {
		if !f.hasBlob(d) {
			t.Errorf("blob %s of the schema 1 image deleted", d)
		}
	}
	if f.hasBlob(orphan) || f.hasLayerLink(repo, orphan) {
		t.Error("orphan survived")
	}
	if !f.exists(upload + "/data") {
		t.Error("an upload session was touched")
	}
	if rep.Deleted.Blobs != 1 || len(rep.Problems) != 0 {
		t.Errorf("report %+v", rep)
	}
	if _, err := f.reg.GetManifest(context.Background(), repo, "1"); err != nil {
		t.Error(err)
	}
}

// TestJournalRecordProtects: an operation in flight (its record written,
// its effects not yet seen by the mark) keeps what it names.
func TestJournalRecordProtects(t *testing.T) {
	f := newFixture(t)
	w := buildWorld(f)
	refs, _, _ := manifest.ParseRefs(mustGet(f, "a", w.moved.Digest))
	rec := &fence.Record{Repo: "a", Manifest: true, Digest: w.moved.Digest, Tags: []string{"v9"}, Blobs: refs.Blobs}
	recPath := layout.JournalRecord(rec.Repo, rec.Manifest, rec.Digest, "inflight")
	f.write(recPath, `{"tags":["v9"],"blobs":["`+string(refs.Blobs[0])+`","`+string(refs.Blobs[1])+`","`+string(refs.Blobs[2])+`"]}`)
	blobRec := layout.JournalRecord("a", false, w.orphan.Digest, "inflight")
	f.write(blobRec, "")

	rep := f.gc(Options{DeleteUntagged: true})
	f.pull("a", w.moved.Digest.String())
	f.pull("a", w.sigGone.Digest.String()) // its referrer lives with it
	if !f.hasBlob(w.orphan.Digest) || !f.hasLayerLink("a", w.orphan.Digest) {
		t.Error("blob named by an upload in flight was deleted")
	}
	if rep.KeptJournal == 0 || rep.Deleted.Manifests != 0 {
		t.Errorf("report %+v", rep)
	}
	if !f.exists(recPath) {
		t.Error("an unsettled record was removed")
	}
	// Once the operation is over and its record gone, the next run collects.
	if _, err := f.d.DeleteFiles(context.Background(), []string{recPath, blobRec}); err != nil {
		t.Fatal(err)
	}
	if rep := f.gc(Options{DeleteUntagged: true}); rep.Deleted.Manifests != 2 || f.hasBlob(w.orphan.Digest) {
		t.Errorf("after the record: deleted %+v", rep.Deleted)
	}
}

// TestSettledRecordRemoved: a record whose effects the mark saw no longer
// protects anything, and the run removes it.
func TestSettledRecordRemoved(t *testing.T) {
	f := newFixture(t)
	keep := f.layer("a")
	orphan := f.layer("a")
	img := f.image("a", keep)
	// The record first, then the push it belongs to.
	recPath := layout.JournalRecord("a", true, digest.FromBytes(img), "done")
	f.write(recPath, `{"tags":["t"]}`)
	blobRec := layout.JournalRecord("a", false, orphan.Digest, "done")
	f.write(blobRec, "")
	f.put("a", "t", img)
	if _, err := f.reg.MountBlob(context.Background(), "a", orphan.Digest, ""); err != nil {
		t.Fatal(err)
	}
	rep := f.gc(Options{DeleteUntagged: true})
	if f.hasBlob(orphan.Digest) || rep.KeptJournal != 0 {
		t.Errorf("a settled record kept its blob: %+v", rep)
	}
	if f.exists(recPath) || f.exists(blobRec) {
		t.Error("settled records were not removed")
	}
	f.pull("a", "t")
}
