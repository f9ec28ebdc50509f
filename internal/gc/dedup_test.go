package gc

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/opencontainers/go-digest"
	ocispec "github.com/opencontainers/image-spec/specs-go/v1"

	"github.com/cairn-registry/cairn/internal/dedup/layer"
	"github.com/cairn-registry/cairn/internal/layout"
	"github.com/cairn-registry/cairn/internal/meta"
	"github.com/cairn-registry/cairn/internal/meta/bolt"
	"github.com/cairn-registry/cairn/internal/storage/driver"
	"github.com/cairn-registry/cairn/internal/storage/driver/filesystem"
)

// dedupFixture is a registry whose layers the test deduplicates the way
// package dedup leaves them: files under cairn/files, the layer's
// references and recipe entry in the index, and a recipe file beside the
// data (index mode) or instead of it (full mode).
type dedupFixture struct {
	*fixture
	idx *hookedIndex
}

func newDedupFixture(t *testing.T, newIndex func(*testing.T) testIndex, d driver.Driver) *dedupFixture {
	f := newFixture(t)
	if d != nil {
		f = newFixtureOn(t, d)
	}
	return &dedupFixture{fixture: f, idx: &hookedIndex{testIndex: newIndex(t)}}
}

// fileOf is the digest of the test file called name.
func fileOf(name string) digest.Digest { return digest.FromString("file " + name) }

func filePath(t *testing.T, d digest.Digest) string {
	p, err := layer.FilePath(d)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

const (
	indexMode = false
	fullMode  = true
)

// dedup deduplicates blob l into the files named.
func (f *dedupFixture) dedup(l ocispec.Descriptor, full bool, names ...string) {
	f.t.Helper()
	ctx := context.Background()
	var files []digest.Digest
	for _, n := range names {
		d := fileOf(n)
		f.write(filePath(f.t, d), "zstd of "+n)
		files = append(files, d)
	}
	if _, err := f.idx.AddLayerRefs(ctx, l.Digest, files); err != nil {
		f.t.Fatal(err)
	}
	if err := f.idx.PutLayer(ctx, l.Digest, []byte("recipe"), meta.StateDeduplicated); err != nil {
		f.t.Fatal(err)
	}
	f.write(layout.BlobRecipe(l.Digest), "recipe of "+l.Digest.String())
	if full {
		if _, err := f.d.DeleteFiles(ctx, []string{layout.BlobData(l.Digest)}); err != nil {
			f.t.Fatal(err)
		}
	}
}

func (f *dedupFixture) file(name string) meta.FileInfo {
	f.t.Helper()
	fi, err := f.idx.Files(context.Background(), []digest.Digest{fileOf(name)})
	if err != nil {
		f.t.Fatal(err)
	}
	return fi[0]
}

func (f *dedupFixture) hasFile(name string) bool { return f.exists(filePath(f.t, fileOf(name))) }

func (f *dedupFixture) hasRecipe(l ocispec.Descriptor) bool {
	return f.exists(layout.BlobRecipe(l.Digest))
}

func (f *dedupFixture) hasRecipeEntry(l ocispec.Descriptor) bool {
	f.t.Helper()
	_, _, err := f.idx.GetLayer(context.Background(), l.Digest)
	if err != nil && !errors.Is(err, meta.ErrNotFound) {
		f.t.Fatal(err)
	}
	return err == nil
}

func (f *dedupFixture) gcWith(opts Options) *Report {
	f.t.Helper()
	opts.Dedup = f.idx
	return f.gc(opts)
}

// blobDirs counts the blobs stored, each once whatever its files, and the
// bytes of the files of those in dead.
func (f *dedupFixture) blobDirs(dead ...ocispec.Descriptor) (n int, deadBytes int64) {
	f.t.Helper()
	seen := map[string]bool{}
	err := f.d.Walk(context.Background(), layout.BlobsDir, func(fi driver.FileInfo) error {
		if fi.IsDir {
			return nil
		}
		alg, hex, _, ok := layout.ParseBlobPath(fi.Path)
		if !ok {
			f.t.Fatalf("stray %s", fi.Path)
		}
		seen[alg+":"+hex] = true
		for _, l := range dead {
			if l.Digest.String() == alg+":"+hex {
				deadBytes += fi.Size
			}
		}
		return nil
	})
	if err != nil {
		f.t.Fatal(err)
	}
	return len(seen), deadBytes
}

// dedupWorld: image a:v1 holds L1 (full mode: files s, k) and L4 (index
// mode: k, m); dead are L2 (full: s, o1, o2), L3 (index: o3, s) and a
// plain blob.
type dedupWorld struct {
	l1, l2, l3, l4, plain ocispec.Descriptor
}

func buildDedupWorld(f *dedupFixture) *dedupWorld {
	w := &dedupWorld{l1: f.layer("a"), l2: f.layer("a"), l3: f.layer("a"), l4: f.layer("a"), plain: f.layer("a")}
	f.put("a", "v1", f.image("a", w.l1, w.l4))
	f.dedup(w.l1, fullMode, "s", "k")
	f.dedup(w.l4, indexMode, "k", "m")
	f.dedup(w.l2, fullMode, "s", "o1", "o2")
	f.dedup(w.l3, indexMode, "o3", "s")
	return w
}

func TestDedupDeadLayers(t *testing.T) {
	for _, ix := range indexes {
		for _, opts := range []Options{{}, {BatchSize: 1, Concurrency: 1}, {BatchSize: 2, Concurrency: 3}} {
			t.Run(fmt.Sprintf("%s/batch%d", ix.name, opts.BatchSize), func(t *testing.T) {
				// Small batches run many rounds, on the filesystem driver:
				// the inmemory one keeps deleted paths' bytes as map keys,
				// which the next round's paths overwrite.
				var drv driver.Driver
				dir := t.TempDir()
				if opts.BatchSize != 0 {
					var err error
					if drv, err = filesystem.New(dir); err != nil {
						t.Fatal(err)
					}
				}
				f := newDedupFixture(t, ix.new, drv)
				w := buildDedupWorld(f)
				if drv != nil {
					// Its clock ticks coarsely: what was just written
					// would be as young as the run's marker.
					backdate(t, dir)
				}
				blobs, deadBytes := f.blobDirs(w.l2, w.l3, w.plain)

				rep := f.gcWith(opts)
				if f.hasRecipe(w.l2) || f.hasBlob(w.l3.Digest) || f.hasRecipe(w.l3) || f.hasBlob(w.plain.Digest) {
					t.Error("a dead blob's data or recipe survived")
				}
				if !f.hasRecipe(w.l1) || !f.hasRecipe(w.l4) || !f.hasBlob(w.l4.Digest) {
					t.Error("a live deduplicated blob lost its recipe or data")
				}
				for _, n := range []string{"o1", "o2", "o3"} {
					if f.hasFile(n) || f.file(n).Exists {
						t.Errorf("file %s only dead layers held survived: %+v", n, f.file(n))
					}
				}
				for n, refs := range map[string]int64{"s": 1, "k": 2, "m": 1} {
					if !f.hasFile(n) || f.file(n).Refs != refs {
						t.Errorf("file %s of a live layer: present %v, %+v; want %d refs", n, f.hasFile(n), f.file(n), refs)
					}
				}
				if f.hasRecipeEntry(w.l2) || f.hasRecipeEntry(w.l3) || !f.hasRecipeEntry(w.l1) || !f.hasRecipeEntry(w.l4) {
					t.Error("recipe entries: want those of the dead layers gone, the live ones kept")
				}
				rel := f.idx.releasedLayers()
				for _, l := range []ocispec.Descriptor{w.l2, w.l3, w.plain} {
					if !slices.Contains(rel, l.Digest) {
						t.Errorf("%s was deleted without releasing its references", l.Digest)
					}
				}
				for _, l := range []ocispec.Descriptor{w.l1, w.l4} {
					if slices.Contains(rel, l.Digest) {
						t.Errorf("live layer %s released its references", l.Digest)
					}
				}
				d := rep.Deleted
				if rep.Blobs != int64(blobs) || d.Blobs != 3 || d.Recipes != 2 || d.DedupFiles != 3 || d.BytesFreed != deadBytes {
					t.Errorf("seen %d blobs (want %d), deleted %+v; want 3 blobs, 2 recipes, 3 files, %d bytes", rep.Blobs, blobs, d, deadBytes)
				}
				if want := (DedupReport{ZeroFiles: 3}); rep.Dedup == nil || *rep.Dedup != want {
					t.Errorf("dedup report %+v, want %+v", rep.Dedup, want)
				}
				if rep.DeleteFailures != 0 || rep.Deferred != 0 || len(rep.Problems) != 0 {
					t.Errorf("report %+v", rep)
				}
				// Nothing is left for a second run.
				again := f.gcWith(opts)
				if again.Deleted != (Deleted{}) || *again.Dedup != (DedupReport{}) {
					t.Errorf("first run: %+v\nsecond run: %+v %+v", rep, again, again.Dedup)
				}
			})
		}
	}
}

// TestDedupDryRun: a dry run changes neither storage nor the index, and
// counts what the real run then deletes (files only released by the real
// run are not known to it).
func TestDedupDryRun(t *testing.T) {
	for _, ix := range indexes {
		t.Run(ix.name, func(t *testing.T) {
			f := newDedupFixture(t, ix.new, nil)
			w := buildDedupWorld(f)
			before := f.files("/")
			names := []string{"s", "k", "m", "o1", "o2", "o3"}
			var infos []meta.FileInfo
			for _, n := range names {
				infos = append(infos, f.file(n))
			}
			dry := f.gcWith(Options{DryRun: true})
			if after := f.files("/"); !slices.Equal(before, after) {
				t.Fatalf("dry run changed storage:\nbefore %v\nafter  %v", before, after)
			}
			for i, n := range names {
				if got := f.file(n); got != infos[i] {
					t.Errorf("dry run changed file %s: %+v, was %+v", n, got, infos[i])
				}
			}
			if !f.hasRecipeEntry(w.l2) || len(f.idx.releasedLayers()) != 0 {
				t.Error("dry run released references or dropped a recipe entry")
			}
			real := f.gcWith(Options{})
			want := real.Deleted
			want.DedupFiles = 0
			if dry.Deleted != want || dry.Deleted.Recipes != 2 {
				t.Errorf("dry run would delete %+v, the run deleted %+v", dry.Deleted, real.Deleted)
			}
		})
	}
}

// TestDedupResume: unreferenced files a stopped run left (released, some
// tombstoned, one already deleted) are deleted by the next run, page by
// page; a dry run counts them and changes nothing.
func TestDedupResume(t *testing.T) {
	for _, ix := range indexes {
		t.Run(ix.name, func(t *testing.T) {
			f := newDedupFixture(t, ix.new, nil)
			ctx := context.Background()
			l := f.layer("a") // its blob is gone already: only the index remembers it
			f.dedup(l, fullMode, "a", "b", "c", "d", "e", "keep")
			if _, err := f.d.DeleteFiles(ctx, []string{layout.BlobRecipe(l.Digest)}); err != nil {
				t.Fatal(err)
			}
			other := f.layer("a")
			f.put("a", "v1", f.image("a", other))
			f.dedup(other, fullMode, "keep")
			zero, err := f.idx.ReleaseLayers(ctx, []digest.Digest{l.Digest})
			if err != nil || len(zero) != 5 {
				t.Fatalf("release: %v, %v", zero, err)
			}
			abc := []digest.Digest{fileOf("a"), fileOf("b"), fileOf("c")}
			if tomb, err := f.idx.TombstoneFiles(ctx, abc); len(tomb) != 3 || err != nil {
				t.Fatal(tomb, err)
			}
			if _, err := f.d.DeleteFiles(ctx, []string{filePath(t, fileOf("c"))}); err != nil {
				t.Fatal(err)
			}

			before := f.files("/")
			dry := f.gcWith(Options{DryRun: true, BatchSize: 1, Concurrency: 2})
			if after := f.files("/"); !slices.Equal(before, after) || dry.Deleted.DedupFiles != 5 || dry.Dedup.Resumed != 5 {
				t.Errorf("dry run: %+v %+v; storage changed: %v", dry.Deleted, dry.Dedup, !slices.Equal(before, after))
			}

			rep := f.gcWith(Options{BatchSize: 1, Concurrency: 2})
			for _, n := range []string{"a", "b", "c", "d", "e"} {
				if f.hasFile(n) || f.file(n).Exists {
					t.Errorf("unreferenced file %s survived: %+v", n, f.file(n))
				}
			}
			if !f.hasFile("keep") || f.file("keep").Refs != 1 {
				t.Errorf("referenced file: %+v", f.file("keep"))
			}
			if rep.Deleted.DedupFiles != 5 || rep.Dedup.Resumed != 5 || rep.Dedup.Left != 0 {
				t.Errorf("deleted %+v, dedup %+v", rep.Deleted, rep.Dedup)
			}
			if z, err := f.idx.ZeroFiles(ctx, "", 100); err != nil || len(z) != 0 {
				t.Errorf("unreferenced files left in the index: %v %v", z, err)
			}
		})
	}
}

// deadLayer makes a dead layer (no manifest names it) deduplicated into
// the files named, and a live one holding "shared".
func deadLayer(f *dedupFixture, names ...string) ocispec.Descriptor {
	live := f.layer("a")
	f.put("a", "v1", f.image("a", live))
	f.dedup(live, fullMode, "shared")
	dead := f.layer("a")
	f.dedup(dead, fullMode, append([]string{"shared"}, names...)...)
	return dead
}

// TestDedupRereferencedBeforeTombstone: a file a dedup references again
// between its release and its tombstone is not deleted.
func TestDedupRereferencedBeforeTombstone(t *testing.T) {
	for _, ix := range indexes {
		t.Run(ix.name, func(t *testing.T) {
			f := newDedupFixture(t, ix.new, nil)
			deadLayer(f, "own", "gone")
			newLayer := digest.FromString("a layer being deduplicated")
			f.idx.beforeTombstone = func(d digest.Digest) {
				if d == fileOf("own") {
					refs, err := f.idx.AddLayerRefs(context.Background(), newLayer, []digest.Digest{d})
					if err != nil || refs[0].Write {
						t.Errorf("re-reference: %+v, %v", refs, err)
					}
				}
			}
			rep := f.gcWith(Options{})
			if !f.hasFile("own") || f.file("own").Refs != 1 || f.file("own").Tombstoned {
				t.Errorf("re-referenced file: present %v, %+v", f.hasFile("own"), f.file("own"))
			}
			if f.hasFile("gone") || !f.hasFile("shared") {
				t.Error("the other files: want gone deleted, shared kept")
			}
			if rep.Deleted.DedupFiles != 1 || rep.Dedup.Rereferenced != 1 || rep.Dedup.Left != 0 {
				t.Errorf("deleted %+v, dedup %+v", rep.Deleted, rep.Dedup)
			}
		})
	}
}

// TestDedupRevivedAfterTombstone: a file referenced again after its
// tombstone is deleted all the same, and left Missing so that dedup
// writes it anew.
func TestDedupRevivedAfterTombstone(t *testing.T) {
	for _, ix := range indexes {
		t.Run(ix.name, func(t *testing.T) {
			f := newDedupFixture(t, ix.new, nil)
			deadLayer(f, "own")
			newLayer := digest.FromString("a layer being deduplicated")
			f.idx.afterTombstone = func(d digest.Digest) {
				refs, err := f.idx.AddLayerRefs(context.Background(), newLayer, []digest.Digest{d})
				if err != nil || !refs[0].Write || !refs[0].Revived {
					t.Errorf("revive: %+v, %v", refs, err)
				}
			}
			rep := f.gcWith(Options{})
			if fi := f.file("own"); !fi.Exists || !fi.Missing || fi.Refs != 1 {
				t.Errorf("revived file: %+v, want Missing with 1 reference", fi)
			}
			if rep.Deleted.DedupFiles != 1 || rep.Dedup.Revived != 1 {
				t.Errorf("deleted %+v, dedup %+v", rep.Deleted, rep.Dedup)
			}
			// The next dedup of a layer holding it is told to write it.
			refs, err := f.idx.AddLayerRefs(context.Background(), digest.FromString("later"), []digest.Digest{fileOf("own")})
			if err != nil || !refs[0].Write {
				t.Errorf("after the revive: %+v, %v", refs, err)
			}
		})
	}
}

// TestDedupJournalKeepsLayer: a dead deduplicated blob that an operation
// in flight names is kept whole, counted once, and releases nothing.
func TestDedupJournalKeepsLayer(t *testing.T) {
	for _, ix := range indexes {
		t.Run(ix.name, func(t *testing.T) {
			f := newDedupFixture(t, ix.new, nil)
			l := f.layer("a")
			f.dedup(l, indexMode, "own")
			f.write(layout.JournalRecord("a", false, l.Digest, "inflight"), "")
			rep := f.gcWith(Options{})
			if !f.hasBlob(l.Digest) || !f.hasRecipe(l) || !f.hasFile("own") || f.file("own").Refs != 1 {
				t.Error("a blob an operation in flight names lost its data, recipe or files")
			}
			if slices.Contains(f.idx.releasedLayers(), l.Digest) {
				t.Error("a kept blob released its references")
			}
			// Its _layers link and the blob, data and recipe counted once.
			if rep.KeptJournal != 2 || rep.Deleted.Blobs != 0 {
				t.Errorf("kept %d for the journal (want 2), deleted %+v", rep.KeptJournal, rep.Deleted)
			}
		})
	}
}

// failFiles fails every DeleteFiles of files under cairn/files.
type failFiles struct{ driver.Driver }

func (d failFiles) DeleteFiles(ctx context.Context, paths []string) (int, error) {
	if len(paths) > 0 && strings.Contains(paths[0], "/cairn/files/") {
		var errs []error
		for _, p := range paths {
			errs = append(errs, errors.New("delete "+p+": access denied"))
		}
		return 0, errors.Join(errs...)
	}
	return d.Driver.DeleteFiles(ctx, paths)
}

// TestDedupFileDeleteFails: files whose delete failed keep their entries
// (tombstoned, unreferenced), the failure is reported, and the next run
// deletes them.
func TestDedupFileDeleteFails(t *testing.T) {
	for _, ix := range indexes {
		t.Run(ix.name, func(t *testing.T) {
			f := newDedupFixture(t, ix.new, nil)
			dead := deadLayer(f, "o1", "o2")
			rep, err := Run(context.Background(), failFiles{f.d}, Options{Dedup: f.idx})
			if err != nil {
				t.Fatal(err)
			}
			if f.hasRecipe(dead) || !f.hasFile("o1") || !f.file("o1").Tombstoned || !f.file("o2").Tombstoned {
				t.Errorf("recipe present %v; o1 %+v, o2 %+v", f.hasRecipe(dead), f.file("o1"), f.file("o2"))
			}
			if rep.DeleteFailures != 2 || len(rep.DeleteErrors) == 0 || rep.Dedup.Left != 2 || rep.Deleted.DedupFiles != 0 {
				t.Errorf("failures %d %v, deleted %+v, dedup %+v", rep.DeleteFailures, rep.DeleteErrors, rep.Deleted, rep.Dedup)
			}
			rep = f.gcWith(Options{})
			if f.hasFile("o1") || f.hasFile("o2") || f.file("o1").Exists || rep.Dedup.Resumed != 2 || rep.Deleted.DedupFiles != 2 {
				t.Errorf("next run: o1 %+v, deleted %+v, dedup %+v", f.file("o1"), rep.Deleted, rep.Dedup)
			}
			if !f.hasFile("shared") {
				t.Error("a live layer's file was deleted")
			}
		})
	}
}

// TestDedupYoungRecipe: a dead blob whose recipe is young is kept whole,
// although its data is old.
func TestDedupYoungRecipe(t *testing.T) {
	dir := t.TempDir()
	d, err := filesystem.New(dir)
	if err != nil {
		t.Fatal(err)
	}
	f := newDedupFixture(t, indexes[0].new, d)
	young, old := f.layer("a"), f.layer("a")
	f.dedup(young, indexMode, "y")
	f.dedup(old, indexMode, "o")
	backdate(t, dir)
	f.write(layout.BlobRecipe(young.Digest), "recipe rewritten")
	rep := f.gcWith(Options{Delay: time.Hour})
	if !f.hasBlob(young.Digest) || !f.hasRecipe(young) || !f.hasFile("y") {
		t.Error("a blob with a young recipe lost its data, recipe or files")
	}
	if f.hasBlob(old.Digest) || f.hasRecipe(old) || f.hasFile("o") {
		t.Error("an old dead blob survived")
	}
	if rep.Deleted.Blobs != 1 || rep.Deleted.Recipes != 1 || rep.Deleted.DedupFiles != 1 {
		t.Errorf("deleted %+v", rep.Deleted)
	}
}

// backdate makes everything under dir two hours old.
func backdate(t testing.TB, dir string) {
	t.Helper()
	past := time.Now().Add(-2 * time.Hour)
	err := filepath.WalkDir(dir, func(p string, _ fs.DirEntry, err error) error {
		if err == nil {
			err = os.Chtimes(p, past, past)
		}
		// The registry's background seal removes its markers meanwhile.
		if errors.Is(err, fs.ErrNotExist) {
			return nil
		}
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
}

// TestTmpLeftoversSwept: files an interrupted dedup write left under
// cairn/tmp go once older than the delay; fresh ones stay.
func TestTmpLeftoversSwept(t *testing.T) {
	ctx := context.Background()
	root := t.TempDir()
	d, err := filesystem.New(root)
	if err != nil {
		t.Fatal(err)
	}
	old := layout.TmpDir + "/files/abc-123"
	fresh := layout.TmpDir + "/promote/def-456"
	for _, p := range []string{old, fresh} {
		if err := d.PutContent(ctx, p, []byte("partial")); err != nil {
			t.Fatal(err)
		}
	}
	stale := time.Now().Add(-2 * time.Hour)
	if err := os.Chtimes(filepath.Join(root, old), stale, stale); err != nil {
		t.Fatal(err)
	}
	rep, err := Run(ctx, d, Options{Delay: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	if rep.Deleted.TmpFiles != 1 {
		t.Fatalf("deleted %d tmp files, want 1", rep.Deleted.TmpFiles)
	}
	if _, err := d.Stat(ctx, old); !errors.Is(err, driver.ErrNotFound) {
		t.Fatalf("stale leftover still there: %v", err)
	}
	if _, err := d.Stat(ctx, fresh); err != nil {
		t.Fatalf("fresh leftover deleted: %v", err)
	}
}

// countingIndex counts the index calls GC makes.
type countingIndex struct {
	testIndex
	releases, tombstones, deletes atomic.Int64
}

func (c *countingIndex) ReleaseLayers(ctx context.Context, layers []digest.Digest) ([]digest.Digest, error) {
	c.releases.Add(1)
	return c.testIndex.ReleaseLayers(ctx, layers)
}

func (c *countingIndex) TombstoneFiles(ctx context.Context, files []digest.Digest) ([]digest.Digest, error) {
	c.tombstones.Add(1)
	return c.testIndex.TombstoneFiles(ctx, files)
}

func (c *countingIndex) DropFileEntries(ctx context.Context, files []digest.Digest) ([]digest.Digest, error) {
	c.deletes.Add(1)
	return c.testIndex.DropFileEntries(ctx, files)
}

// TestDedupBulkCalls: GC releases layers and deletes file entries a batch
// per index call, not one call per layer or file.
func TestDedupBulkCalls(t *testing.T) {
	const layers, own, batch = 30, 3, 10
	for _, ix := range indexes {
		t.Run(ix.name, func(t *testing.T) {
			idx := &countingIndex{testIndex: ix.new(t)}
			f := newDedupFixture(t, func(*testing.T) testIndex { return idx }, nil)
			var names []string
			for i := range layers {
				var files []string
				for j := range own {
					files = append(files, fmt.Sprintf("own-%d-%d", i, j))
				}
				names = append(names, files...)
				if i == 0 {
					deadLayer(f, files...) // with a live layer holding "shared"
					continue
				}
				f.dedup(f.layer("a"), fullMode, append(files, "shared")...)
			}
			rep := f.gcWith(Options{BatchSize: batch, Concurrency: 2})
			for _, n := range names {
				if f.hasFile(n) || f.file(n).Exists {
					t.Fatalf("file %s of a dead layer survived", n)
				}
			}
			if !f.hasFile("shared") || f.file("shared").Refs != 1 {
				t.Errorf("shared file: %+v", f.file("shared"))
			}
			if rep.Deleted.Blobs != layers || rep.Deleted.DedupFiles != layers*own {
				t.Errorf("deleted %+v", rep.Deleted)
			}
			// A sweep round ends its own batches: allow one partial batch
			// per round beyond the minimum (the rounds here hold 20 blobs).
			rounds := int64((layers + 2*batch - 1) / (2 * batch))
			if n := idx.releases.Load(); n > layers/batch+rounds-1 {
				t.Errorf("%d ReleaseLayers calls for %d layers in batches of %d", n, layers, batch)
			}
			if n := idx.tombstones.Load(); n > layers*own/batch+rounds-1 || idx.deletes.Load() != n {
				t.Errorf("%d TombstoneFiles and %d DropFileEntries calls for %d files in batches of %d",
					n, idx.deletes.Load(), layers*own, batch)
			}
		})
	}
}

// perItem is the index as GC used it before meta.Bulk: one call, so one
// bolt commit, per layer (release, then recipe) and per file (tombstone,
// then entry), for BenchmarkGCDedupDeadLayers to compare against.
type perItem struct{ meta.Store }

func (p perItem) ReleaseLayers(ctx context.Context, layers []digest.Digest) ([]digest.Digest, error) {
	var zero []digest.Digest
	for _, l := range layers {
		z, err := p.ReleaseLayerRefs(ctx, l)
		if err != nil {
			return zero, err
		}
		zero = append(zero, z...)
		if err := p.DeleteLayer(ctx, l); err != nil {
			return zero, err
		}
	}
	return zero, nil
}

func (p perItem) TombstoneFiles(ctx context.Context, files []digest.Digest) ([]digest.Digest, error) {
	var out []digest.Digest
	for _, d := range files {
		ok, err := p.Tombstone(ctx, d)
		if err != nil {
			return out, err
		}
		if ok {
			out = append(out, d)
		}
	}
	return out, nil
}

func (p perItem) DropFileEntries(ctx context.Context, files []digest.Digest) ([]digest.Digest, error) {
	var revived []digest.Digest
	for _, d := range files {
		rev, err := p.DropFileEntry(ctx, d)
		if errors.Is(err, meta.ErrNotTombstoned) {
			rev, err = true, nil
		}
		if err != nil {
			return revived, err
		}
		if rev {
			revived = append(revived, d)
		}
	}
	return revived, nil
}

// deadDedupWorld stores, under root on disk, n dead deduplicated blobs
// (index mode: data and recipe) of perBlob files each: half their own, half
// from a pool a live layer holds too. The files' and blobs' contents are
// written directly, without the driver's fsyncs: only the index is
// measured. It returns the driver, the bolt store, and the files the run
// must delete.
func deadDedupWorld(b *testing.B, root string, n, perBlob int) (driver.Driver, *bolt.Store, int) {
	b.Helper()
	ctx := context.Background()
	store, err := bolt.OpenWith(filepath.Join(root, "meta.db"), bolt.Options{})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { store.Close() })
	dir := filepath.Join(root, "store")
	drv, err := filesystem.New(dir)
	if err != nil {
		b.Fatal(err)
	}
	write := func(p string) {
		full := filepath.Join(dir, filepath.FromSlash(p))
		if err := os.MkdirAll(filepath.Dir(full), 0o777); err != nil {
			b.Fatal(err)
		}
		if err := os.WriteFile(full, []byte(p), 0o666); err != nil {
			b.Fatal(err)
		}
	}
	fileAt := func(name string) digest.Digest {
		d := fileOf(name)
		p, err := layer.FilePath(d)
		if err != nil {
			b.Fatal(err)
		}
		write(p)
		return d
	}
	shared, own := perBlob/2, perBlob-perBlob/2
	pool := make([]digest.Digest, 1000)
	for i := range pool {
		pool[i] = fileAt(fmt.Sprintf("pool-%d", i))
	}
	if _, err := store.AddLayerRefs(ctx, digest.FromString("live layer"), pool); err != nil {
		b.Fatal(err)
	}
	for i := range n {
		l := digest.FromString(fmt.Sprintf("dead layer %d", i))
		write(layout.BlobData(l))
		write(layout.BlobRecipe(l))
		files := make([]digest.Digest, 0, perBlob)
		for j := range own {
			files = append(files, fileAt(fmt.Sprintf("own-%d-%d", i, j)))
		}
		for j := range shared {
			files = append(files, pool[(i*shared+j)%len(pool)])
		}
		if _, err := store.AddLayerRefs(ctx, l, files); err != nil {
			b.Fatal(err)
		}
		if err := store.PutLayer(ctx, l, []byte("recipe"), meta.StateDeduplicated); err != nil {
			b.Fatal(err)
		}
	}
	backdate(b, dir)
	return drv, store, n * own
}

// BenchmarkGCDedupDeadLayers GCs 2000 dead deduplicated blobs of 20 files
// each (10 their own) with the bolt store on disk, once taking the index
// steps per layer and per file as GC did before meta.Bulk, once in bulk,
// and reports both run times and their ratio.
func BenchmarkGCDedupDeadLayers(b *testing.B) {
	const blobs, perBlob = 2000, 20
	var perItemTime, bulkTime time.Duration
	for range b.N {
		for _, bulk := range []bool{false, true} {
			b.StopTimer()
			drv, store, files := deadDedupWorld(b, b.TempDir(), blobs, perBlob)
			var idx DedupIndex = store
			if !bulk {
				idx = perItem{store}
			}
			start := time.Now()
			rep, err := Run(context.Background(), drv, Options{Dedup: idx})
			took := time.Since(start)
			if err != nil {
				b.Fatal(err)
			}
			if rep.Deleted.Blobs != blobs || rep.Deleted.DedupFiles != int64(files) {
				b.Fatalf("deleted %+v, want %d blobs and %d files", rep.Deleted, blobs, files)
			}
			if bulk {
				bulkTime += took
			} else {
				perItemTime += took
			}
		}
	}
	b.ReportMetric(0, "ns/op")
	b.ReportMetric(perItemTime.Seconds()/float64(b.N), "per-item-s/op")
	b.ReportMetric(bulkTime.Seconds()/float64(b.N), "bulk-s/op")
	b.ReportMetric(float64(perItemTime)/float64(bulkTime), "speedup")
}
