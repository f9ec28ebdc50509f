package dedup

import (
	"context"
	"errors"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/opencontainers/go-digest"

	"github.com/cairn-registry/cairn/internal/layout"
	"github.com/cairn-registry/cairn/internal/meta"
	"github.com/cairn-registry/cairn/internal/storage/driver"
)

// TestProcessModes runs every mode over gzip, zstd and plain tar layers
// sharing files, on the inmemory and filesystem drivers.
func TestProcessModes(t *testing.T) {
	t.Parallel()
	layers := sharedLayers(t)
	tests := []struct {
		mode      Mode
		want      outcome
		state     meta.LayerState // 0: never recorded
		keepData  bool
		hasRecipe bool
	}{
		{ModeOff, outUnchanged, 0, true, false},
		{ModeIndex, outIndexed, meta.StateIntact, true, true},
		{ModeFull, outDeduplicated, meta.StateDeduplicated, false, true},
		{ModeSelective, outDeduplicated, meta.StateDeduplicated, false, true}, // no pulls: cold
	}
	for dname, newDriver := range drivers(t) {
		for _, tc := range tests {
			t.Run(dname+"/"+string(tc.mode), func(t *testing.T) {
				v := newEnv(t, newDriver(), Options{})
				for _, l := range layers {
					d := v.put(l.blob)
					v.process(d, tc.mode, tc.want)
					if got := v.hasData(d); got != tc.keepData {
						t.Fatalf("%s: intact data present = %v, want %v", l.name, got, tc.keepData)
					}
					if got := v.hasRecipe(d); got != tc.hasRecipe {
						t.Fatalf("%s: recipe present = %v, want %v", l.name, got, tc.hasRecipe)
					}
					v.wantState(d, tc.state)
					if tc.keepData {
						v.wantData(l.blob)
					}
					if tc.hasRecipe {
						v.wantBlob(l.blob)
						files, err := v.store.LayerFiles(context.Background(), d)
						if err != nil || !slices.Equal(files, payloadDigests(l.files)) {
							t.Fatalf("%s: LayerFiles = %v, %v; want %v", l.name, files, err, payloadDigests(l.files))
						}
					}
				}
				if !tc.hasRecipe {
					return
				}
				// Shared files are stored once and counted once per layer.
				infos, err := v.store.Files(context.Background(), payloadDigests(sharedFiles()))
				if err != nil {
					t.Fatal(err)
				}
				for _, fi := range infos {
					if fi.Refs != int64(len(layers)) || fi.Missing || fi.Tombstoned {
						t.Fatalf("shared file %s = %+v, want %d refs", fi.Digest.Encoded()[:12], fi, len(layers))
					}
					if !v.stored(fi.Digest) {
						t.Fatalf("shared file %s not stored", fi.Digest.Encoded()[:12])
					}
				}
			})
		}
	}
}

// TestProcessIdempotent processes every layer twice: the second run changes
// nothing and counts no reference twice.
func TestProcessIdempotent(t *testing.T) {
	t.Parallel()
	layers := sharedLayers(t)
	tests := []struct {
		mode        Mode
		first, then outcome
		state       meta.LayerState
	}{
		{ModeFull, outDeduplicated, outUnchanged, meta.StateDeduplicated},
		{ModeSelective, outDeduplicated, outUnchanged, meta.StateDeduplicated},
		{ModeIndex, outIndexed, outIndexed, meta.StateIntact},
	}
	for _, tc := range tests {
		t.Run(string(tc.mode), func(t *testing.T) {
			v := newEnv(t, nil, Options{})
			for _, l := range layers {
				d := v.put(l.blob)
				v.process(d, tc.mode, tc.first)
				sum1, _ := v.state(d)
				v.process(d, tc.mode, tc.then)
				sum2, _ := v.state(d)
				v.wantState(d, tc.state)
				if sum1.Size != int64(len(l.blob)) || sum2.Size != sum1.Size || sum2.RecipeBytes != sum1.RecipeBytes || sum2.Files != sum1.Files {
					t.Fatalf("%s: summary changed by a re-run: %+v then %+v", l.name, sum1, sum2)
				}
				v.wantBlob(l.blob)
			}
			infos, err := v.store.Files(context.Background(), payloadDigests(sharedFiles()))
			if err != nil {
				t.Fatal(err)
			}
			for _, fi := range infos {
				if fi.Refs != int64(len(layers)) {
					t.Fatalf("shared file %s has %d refs after re-runs, want %d", fi.Digest.Encoded()[:12], fi.Refs, len(layers))
				}
			}
		})
	}
}

// TestProcessStrongestMode: a layer processed for an index-mode repository
// and then for a full-mode one ends deduplicated; a weaker mode afterwards
// does not bring the intact copy back.
func TestProcessStrongestMode(t *testing.T) {
	t.Parallel()
	v := newEnv(t, nil, Options{})
	l := sharedLayers(t)[0]
	d := v.put(l.blob)
	v.process(d, ModeIndex, outIndexed)
	v.process(d, ModeFull, outDeduplicated)
	v.process(d, ModeIndex, outUnchanged)
	if v.hasData(d) {
		t.Fatal("intact data back after an index-mode run")
	}
	if sum, _ := v.state(d); sum.Mode != ModeFull {
		t.Fatalf("summary mode %q, want full", sum.Mode)
	}
	v.wantBlob(l.blob)
}

// TestSelectivePromote: a cold layer is dropped; once it has HotPulls
// recent pulls, Process writes the intact copy back, byte for byte.
func TestSelectivePromote(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	v := newEnv(t, nil, Options{HotPulls: 3, HotWindow: time.Hour})
	for _, l := range sharedLayers(t) {
		t.Run(l.name, func(t *testing.T) {
			d := v.put(l.blob)
			v.process(d, ModeSelective, outDeduplicated)
			// Old pulls and too few recent ones leave it cold.
			for i := range 5 {
				if _, err := v.store.RecordPull(ctx, "old-client", d, time.Now().Add(-3*time.Hour-time.Duration(i)*time.Minute)); err != nil {
					t.Fatal(err)
				}
			}
			for _, c := range []string{"a", "b"} {
				if _, err := v.store.RecordPull(ctx, c, d, time.Now()); err != nil {
					t.Fatal(err)
				}
			}
			v.process(d, ModeSelective, outUnchanged)
			if v.hasData(d) {
				t.Fatal("layer with 2 recent pulls promoted, HotPulls is 3")
			}
			if _, err := v.store.RecordPull(ctx, "c", d, time.Now()); err != nil {
				t.Fatal(err)
			}
			v.process(d, ModeSelective, outIndexed)
			v.wantState(d, meta.StateIntact)
			v.wantData(l.blob)
			v.wantBlob(l.blob)
			if !v.hasRecipe(d) {
				t.Fatal("recipe dropped by the promotion")
			}
			// No temp file of the promotion is left behind.
			var left []string
			v.d.Walk(ctx, layout.TmpDir, func(fi driver.FileInfo) error {
				if !fi.IsDir {
					left = append(left, fi.Path)
				}
				return nil
			})
			if len(left) > 0 {
				t.Fatalf("promotion left %v", left)
			}
			v.process(d, ModeSelective, outIndexed) // still hot: stays
			v.wantData(l.blob)
		})
	}
}

// TestSelectiveHotAfterCrash: a crash between dropping the intact copy and
// recording the deduplicated state leaves the layer "intact" without data;
// when it is hot, Process must write the intact copy back rather than
// report it kept.
func TestSelectiveHotAfterCrash(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	v := newEnv(t, nil, Options{HotPulls: 1})
	l := sharedLayers(t)[0]
	d := v.put(l.blob)
	v.process(d, ModeIndex, outIndexed) // recipe verified, state intact
	sum, _ := v.state(d)
	sum.Mode = ModeSelective
	if err := v.eng.Worker.putState(ctx, d, sum, meta.StateIntact); err != nil {
		t.Fatal(err)
	}
	if err := v.d.Delete(ctx, layout.BlobData(d)); err != nil {
		t.Fatal(err)
	}
	if _, err := v.store.RecordPull(ctx, "a", d, time.Now()); err != nil {
		t.Fatal(err)
	}
	if _, err := v.eng.Process(ctx, d, ModeSelective); err != nil {
		t.Fatal(err)
	}
	_, st := v.state(d)
	if st == meta.StateIntact && !v.hasData(d) {
		t.Fatal("hot layer recorded intact with no intact data")
	}
	v.wantBlob(l.blob)
}

// TestCrashRecovery starts Process from the states a crash leaves at each
// step of the pipeline; every run must end deduplicated and byte-exact,
// with each file referenced once.
func TestCrashRecovery(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	tests := []struct {
		name  string
		crash func(t *testing.T, v *env, l tlayer, d digest.Digest)
		want  outcome
	}{{
		// References taken, no file written: the retried AddLayerRefs asks
		// for no write, so the verify step must find and repair the files.
		name: "after AddLayerRefs",
		crash: func(t *testing.T, v *env, l tlayer, d digest.Digest) {
			if err := v.eng.Worker.putState(ctx, d, summary{Mode: ModeFull}, meta.StatePending); err != nil {
				t.Fatal(err)
			}
			refs, err := v.store.AddLayerRefs(ctx, d, payloadDigests(l.files))
			if err != nil {
				t.Fatal(err)
			}
			for _, r := range refs {
				if !r.Write {
					t.Fatalf("first AddLayerRefs of %s: no write", r.Digest)
				}
			}
		},
		want: outDeduplicated,
	}, {
		name: "after some files were written",
		crash: func(t *testing.T, v *env, l tlayer, d digest.Digest) {
			v.process(d, ModeIndex, outIndexed)
			files := payloadDigests(l.files)
			for _, f := range files[:len(files)/2] {
				v.loseFile(f)
			}
			if err := v.d.Delete(ctx, layout.BlobRecipe(d)); err != nil {
				t.Fatal(err)
			}
			v.eng.recipes = newRecipeCache(1 << 20) // a new process
			if err := v.eng.Worker.putState(ctx, d, summary{Mode: ModeFull}, meta.StatePending); err != nil {
				t.Fatal(err)
			}
		},
		want: outDeduplicated,
	}, {
		name: "after the recipe was written",
		crash: func(t *testing.T, v *env, l tlayer, d digest.Digest) {
			v.process(d, ModeIndex, outIndexed)
			if err := v.store.SetLayerState(ctx, d, meta.StatePending); err != nil {
				t.Fatal(err)
			}
		},
		want: outDeduplicated,
	}, {
		name: "after the intact copy was deleted",
		crash: func(t *testing.T, v *env, l tlayer, d digest.Digest) {
			v.process(d, ModeIndex, outIndexed)
			if err := v.d.Delete(ctx, layout.BlobData(d)); err != nil {
				t.Fatal(err)
			}
		},
		want: outDeduplicated,
	}, {
		// Pending with no data but a recipe: another worker finished it.
		name: "pending, data gone, recipe present",
		crash: func(t *testing.T, v *env, l tlayer, d digest.Digest) {
			v.process(d, ModeIndex, outIndexed)
			if err := v.d.Delete(ctx, layout.BlobData(d)); err != nil {
				t.Fatal(err)
			}
			if err := v.store.SetLayerState(ctx, d, meta.StatePending); err != nil {
				t.Fatal(err)
			}
		},
		want: outUnchanged,
	}}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			v := newEnv(t, nil, Options{})
			l := sharedLayers(t)[0]
			d := v.put(l.blob)
			tc.crash(t, v, l, d)
			v.process(d, ModeFull, tc.want)
			v.wantState(d, meta.StateDeduplicated)
			if v.hasData(d) {
				t.Fatal("intact data kept")
			}
			v.wantBlob(l.blob)
			files := payloadDigests(l.files)
			got, err := v.store.LayerFiles(ctx, d)
			if err != nil || !slices.Equal(got, files) {
				t.Fatalf("LayerFiles = %v, %v; want %v", got, err, files)
			}
			infos, err := v.store.Files(ctx, files)
			if err != nil {
				t.Fatal(err)
			}
			for _, fi := range infos {
				if fi.Refs != 1 {
					t.Fatalf("file %s: %d refs, want 1", fi.Digest.Encoded()[:12], fi.Refs)
				}
				if !v.stored(fi.Digest) {
					t.Fatalf("file %s not stored", fi.Digest.Encoded()[:12])
				}
			}
			v.process(d, ModeFull, outUnchanged)
		})
	}
}

// TestNoPayloadLayer: a layer whose members carry no file bytes (only
// directories, links and empty files, as a WORKDIR step makes) takes no
// file references; it must still deduplicate.
func TestNoPayloadLayer(t *testing.T) {
	t.Parallel()
	raw := buildTar(t, nil)
	blobs := map[string][]byte{"tar": raw, "gzip": gzipStd(t, raw), "zstd": zstdKlaus(t, raw)}
	for name, blob := range blobs {
		t.Run(name, func(t *testing.T) {
			v := newEnv(t, nil, Options{})
			d := v.put(blob)
			ctx := t.Context()
			out, err := v.eng.Process(ctx, d, ModeFull)
			if err != nil {
				t.Fatalf("Process: %v", err)
			}
			if out != outDeduplicated {
				t.Fatalf("Process = %q, want deduplicated", out)
			}
			v.wantBlob(blob)
		})
	}
}

// TestProcessConcurrent: workers processing one layer at once (the scan
// re-queues a pending layer a worker is still on) end deduplicated with one
// reference per file.
func TestProcessConcurrent(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	v := newEnv(t, nil, Options{})
	l := sharedLayers(t)[1]
	d := v.put(l.blob)
	var wg sync.WaitGroup
	errs := make(chan error, 4)
	for range 4 {
		wg.Go(func() {
			if _, err := v.eng.Process(ctx, d, ModeFull); err != nil {
				errs <- err
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Errorf("concurrent Process: %v", err)
	}
	// A straggler settles whatever the race left.
	if _, err := v.eng.Process(ctx, d, ModeFull); err != nil {
		t.Fatal(err)
	}
	v.wantState(d, meta.StateDeduplicated)
	v.wantBlob(l.blob)
	infos, err := v.store.Files(ctx, payloadDigests(l.files))
	if err != nil {
		t.Fatal(err)
	}
	for _, fi := range infos {
		if fi.Refs != 1 {
			t.Fatalf("file %s: %d refs, want 1", fi.Digest.Encoded()[:12], fi.Refs)
		}
	}
}

// TestStaleWorkerKeepsSummary: a worker that read the layer's state before
// another finished it runs disassemble with an empty summary, finds the
// data gone and the recipe there; the recorded summary must still describe
// the layer (Stats reads sizes and encoders from it).
func TestStaleWorkerKeepsSummary(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	v := newEnv(t, nil, Options{})
	l := sharedLayers(t)[0]
	d := v.put(l.blob)
	v.process(d, ModeFull, outDeduplicated)
	want, _ := v.state(d)
	out, err := v.eng.disassemble(ctx, d, summary{Mode: ModeFull})
	if err != nil || out != outUnchanged {
		t.Fatalf("stale disassemble = %q, %v; want unchanged", out, err)
	}
	got, st := v.state(d)
	if st != meta.StateDeduplicated {
		t.Fatalf("state %v, want deduplicated", st)
	}
	if got.Size != want.Size || got.TarSize != want.TarSize || got.Files != want.Files || got.RecipeBytes != want.RecipeBytes || !slices.Equal(got.Encoders, want.Encoders) {
		t.Fatalf("summary after a stale worker = %+v, want %+v", got, want)
	}
}

// TestMissingFileFailsRead: a file object deleted behind dedup's back after
// deduplication makes reads fail (never return other bytes); it is not
// silently truncated.
func TestMissingFileFailsRead(t *testing.T) {
	t.Parallel()
	for _, cached := range []bool{false, true} {
		name := "no-cache"
		if cached {
			name = "preconstruct"
		}
		t.Run(name, func(t *testing.T) {
			opts := Options{}
			if cached {
				opts.PreconstructDir, opts.PreconstructSize = t.TempDir(), 64<<20
			}
			v := newEnv(t, nil, opts)
			ctx := context.Background()
			l := sharedLayers(t)[0]
			d := v.put(l.blob)
			v.process(d, ModeFull, outDeduplicated)
			victim := payloadDigests(ownFiles(1))[0]
			v.loseFile(victim)
			for _, off := range []int64{0, int64(len(l.blob)) / 2} {
				got, err := v.read(d, off)
				if err == nil {
					t.Fatalf("offset %d: read %d bytes without error from a layer missing a file", off, len(got))
				}
				if int64(len(got)) >= int64(len(l.blob))-off {
					t.Fatalf("offset %d: got all %d bytes before the error", off, len(got))
				}
				if !slices.Equal(got, l.blob[off:off+int64(len(got))]) {
					t.Fatalf("offset %d: bytes before the error differ from the blob", off)
				}
			}
			if cached && v.eng.disk.Contains(string(d)) {
				t.Fatal("failed rebuild published in the preconstruct cache")
			}
			size, err := v.eng.BlobSize(ctx, d)
			if err != nil || size != int64(len(l.blob)) {
				t.Fatalf("BlobSize = %d, %v", size, err)
			}
		})
	}
}

// TestCorruptFileNeverServed: a file object replaced by other bytes of the
// same length fails the read.
func TestCorruptFileNeverServed(t *testing.T) {
	t.Parallel()
	for _, cached := range []bool{false, true} {
		t.Run(map[bool]string{false: "no-cache", true: "preconstruct"}[cached], func(t *testing.T) {
			opts := Options{}
			if cached {
				opts.PreconstructDir, opts.PreconstructSize = t.TempDir(), 64<<20
			}
			v := newEnv(t, nil, opts)
			l := sharedLayers(t)[1]
			d := v.put(l.blob)
			v.process(d, ModeFull, outDeduplicated)
			own := ownFiles(2)[0].body
			bad := append([]byte{}, own...)
			bad[len(bad)/2] ^= 0xff
			victim := digest.FromBytes(own)
			v.replaceFile(victim, bad)
			got, err := v.read(d, 0)
			if err == nil {
				t.Fatalf("read %d bytes without error from a layer with a changed file", len(got))
			}
			if cached && v.eng.disk.Contains(string(d)) {
				t.Fatal("failed rebuild published in the preconstruct cache")
			}
		})
	}
}

// TestRevivedFile: a layer holding a file GC tombstoned is deferred while a
// GC run is active, keeps its intact copy, and deduplicates once the run
// ended.
func TestRevivedFile(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		// gcDeletes: GC deletes the object and settles the tombstone after
		// the reviver wrote it (DeleteFile then marks the entry Missing).
		gcDeletes bool
	}{
		{"gc-still-running", false},
		{"gc-delete-raced-the-revive", true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			ctx := t.Context()
			v := newEnv(t, nil, Options{})
			old, l := sharedLayers(t)[0], sharedLayers(t)[1]
			shared := payloadDigests(sharedFiles())
			// An older layer held the shared files; it was deleted, and GC
			// tombstoned the files.
			if _, err := v.store.AddLayerRefs(ctx, old.digest(), payloadDigests(old.files)); err != nil {
				t.Fatal(err)
			}
			if _, err := v.store.ReleaseLayerRefs(ctx, old.digest()); err != nil {
				t.Fatal(err)
			}
			for _, f := range shared {
				if ok, err := v.store.Tombstone(ctx, f); err != nil || !ok {
					t.Fatalf("Tombstone = %v, %v", ok, err)
				}
			}
			marker := v.gcMarker()
			d := v.put(l.blob)
			v.process(d, ModeFull, outDeferred)
			v.wantState(d, meta.StateIntact)
			v.wantData(l.blob)
			if sum, _ := v.state(d); !sum.Revived {
				t.Fatal("deferred layer not marked revived")
			}
			// Still deferred while the run is active.
			v.process(d, ModeFull, outDeferred)
			v.wantData(l.blob)
			if tc.gcDeletes {
				for _, f := range shared {
					v.loseFile(f)
					if revived, err := v.store.DropFileEntry(ctx, f); err != nil || !revived {
						t.Fatalf("DeleteFile = %v, %v; want revived", revived, err)
					}
				}
			}
			if err := v.d.Delete(ctx, marker); err != nil {
				t.Fatal(err)
			}
			out, err := v.eng.Process(ctx, d, ModeFull)
			if err != nil {
				t.Fatalf("Process after the GC run: %v", err)
			}
			if out != outDeduplicated {
				t.Fatalf("Process after the GC run = %q, want deduplicated", out)
			}
			v.wantState(d, meta.StateDeduplicated)
			if v.hasData(d) {
				t.Fatal("intact data kept")
			}
			if sum, _ := v.state(d); sum.Revived {
				t.Fatal("summary still revived")
			}
			v.wantBlob(l.blob)
			infos, err := v.store.Files(ctx, shared)
			if err != nil {
				t.Fatal(err)
			}
			for _, fi := range infos {
				if fi.Refs != 1 || fi.Tombstoned || fi.Missing {
					t.Fatalf("shared file after revive = %+v", fi)
				}
			}
		})
	}
}

// TestIrreproducible: layers no encoder reproduces, or that are not tars,
// stay intact with no file references.
func TestIrreproducible(t *testing.T) {
	t.Parallel()
	notTar := fileBody(7, 5000)
	tests := []struct {
		name string
		blob func(t *testing.T) []byte
		// refsFirst: a crashed attempt took references before.
		refsFirst bool
	}{
		{"gzip-program", func(t *testing.T) []byte { return gnuGzip(t, buildTar(t, ownFiles(4))) }, false},
		{"gzip-program-after-crash", func(t *testing.T) []byte { return gnuGzip(t, buildTar(t, ownFiles(5))) }, true},
		{"not-a-tar", func(t *testing.T) []byte { return notTar }, false},
		{"gzip-not-a-tar", func(t *testing.T) []byte { return gzipStd(t, notTar) }, false},
		// Starts as compress/gzip writes, so the probe guesses it; the
		// verifying rebuild refutes the guess after the files were written.
		{"gzip-flushed-past-the-probe", func(t *testing.T) []byte { return flushedGzip(t, 10<<20) }, false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			ctx := context.Background()
			v := newEnv(t, nil, Options{})
			blob := tc.blob(t)
			d := v.put(blob)
			if tc.refsFirst {
				if _, err := v.store.AddLayerRefs(ctx, d, payloadDigests(ownFiles(5))); err != nil {
					t.Fatal(err)
				}
			}
			v.process(d, ModeFull, outIrreproducible)
			sum, st := v.state(d)
			if st != meta.StateIrreproducible || sum.Reason == "" || sum.Size != int64(len(blob)) {
				t.Fatalf("state %v, summary %+v; want irreproducible with a reason and the size", st, sum)
			}
			v.wantData(blob)
			if v.hasRecipe(d) {
				t.Fatal("recipe written for an irreproducible layer")
			}
			if _, err := v.store.LayerFiles(ctx, d); !errors.Is(err, meta.ErrNotFound) {
				t.Fatalf("LayerFiles = %v, want ErrNotFound", err)
			}
			if tc.refsFirst {
				zero, err := v.store.ZeroFiles(ctx, "", 100)
				if err != nil || len(zero) != len(payloadDigests(ownFiles(5))) {
					t.Fatalf("ZeroFiles = %v, %v; want the released files", zero, err)
				}
			}
			if strings.HasPrefix(tc.name, "gzip-flushed") {
				// The guess got as far as storing the files, then let go.
				if zero, err := v.store.ZeroFiles(ctx, "", 100); err != nil || len(zero) == 0 {
					t.Fatalf("ZeroFiles = %v, %v; want the files the refuted guess stored", zero, err)
				}
			}
			v.process(d, ModeFull, outUnchanged)
			v.wantData(blob)
		})
	}
}

// TestCorruptBlob: stored bytes that do not hash to the digest are never
// disassembled.
func TestCorruptBlob(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	v := newEnv(t, nil, Options{})
	l := sharedLayers(t)[0]
	d := l.digest()
	bad := append([]byte{}, l.blob...)
	bad[len(bad)/3] ^= 1
	if err := v.d.PutContent(ctx, layout.BlobData(d), bad); err != nil {
		t.Fatal(err)
	}
	v.process(d, ModeFull, outIrreproducible)
	if !v.hasData(d) || v.hasRecipe(d) {
		t.Fatal("corrupt blob: data dropped or recipe written")
	}
}

// TestGone: a layer deleted before dedup got to it leaves nothing behind.
func TestGone(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	v := newEnv(t, nil, Options{})
	d := sharedLayers(t)[0].digest()
	if err := v.eng.Worker.putState(ctx, d, summary{Mode: ModeFull}, meta.StatePending); err != nil {
		t.Fatal(err)
	}
	v.process(d, ModeFull, outGone)
	v.wantState(d, 0)
}
