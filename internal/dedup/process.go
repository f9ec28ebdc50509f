package dedup

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"sort"
	"time"

	"github.com/opencontainers/go-digest"

	"github.com/cairn-registry/cairn/internal/dedup/layer"
	"github.com/cairn-registry/cairn/internal/dedup/pack"
	"github.com/cairn-registry/cairn/internal/dedup/recompress"
	"github.com/cairn-registry/cairn/internal/fence"
	"github.com/cairn-registry/cairn/internal/layout"
	"github.com/cairn-registry/cairn/internal/meta"
	"github.com/cairn-registry/cairn/internal/storage/driver"
)

// ErrBlobCorrupt marks a stored blob whose bytes do not hash to its digest.
var ErrBlobCorrupt = errors.New("dedup: stored blob does not match its digest")

// outcome is what processing one layer did, for logs and `cairn dedup run`.
type outcome string

const (
	outDeduplicated   outcome = "deduplicated"
	outIndexed        outcome = "indexed" // verified recipe, intact copy kept
	outIrreproducible outcome = "irreproducible"
	outUnchanged      outcome = "unchanged" // already in its final state
	outDeferred       outcome = "deferred"  // waits for a running GC
	outGone           outcome = "gone"      // the blob is no longer stored
	outBusy           outcome = "busy"      // another node is processing it
)

// Process brings layer l to the state mode asks for: it disassembles and
// verifies a layer not processed yet, and drops or restores the intact copy
// of a processed one. It is idempotent and safe to re-run after a crash.
func (w *Worker) Process(ctx context.Context, l digest.Digest, mode Mode) (outcome, error) {
	return w.process(ctx, l, mode, false)
}

// process is Process; recheck also looks in storage for a processed
// layer's recipe file (a Stat, so not on every pass of the scan).
func (w *Worker) process(ctx context.Context, l digest.Digest, mode Mode, recheck bool) (outcome, error) {
	if mode == ModeOff {
		return outUnchanged, nil
	}
	sum, state, err := w.layerState(ctx, l)
	if err != nil {
		return "", err
	}
	switch state {
	case meta.StateIrreproducible:
		return outUnchanged, nil
	case meta.StateDeduplicated, meta.StateIntact:
		if sum.Mode.rank() < mode.rank() {
			sum.Mode = mode
		}
		if recheck {
			gone, err := w.recipeGone(ctx, l, sum)
			if err != nil {
				return "", err
			}
			if gone {
				// GC deleted the blob but stopped before releasing its files.
				return w.noData(ctx, l, sum)
			}
		}
		if !sum.Revived {
			return w.settle(ctx, l, sum, state)
		}
		// A file of this layer was taken back from GC: redo the checks.
	}
	if sum.Mode.rank() < mode.rank() {
		sum.Mode = mode
	}
	return w.disassemble(ctx, l, sum)
}

// recipeGone reports whether a layer recorded with a recipe has lost both
// its recipe file and its data: its blob was deleted.
func (w *Worker) recipeGone(ctx context.Context, l digest.Digest, sum summary) (bool, error) {
	if sum.RecipeBytes == 0 {
		return false, nil
	}
	// Stat, not the recipe cache: the file may be gone since it was cached.
	if _, err := w.d.Stat(ctx, layout.BlobRecipe(l)); !errors.Is(err, driver.ErrNotFound) {
		return false, err
	}
	_, err := w.d.Stat(ctx, layout.BlobData(l))
	if errors.Is(err, driver.ErrNotFound) {
		w.recipes.remove(l)
		return true, nil
	}
	return false, err
}

// layerState reads l's summary and state; state 0 means unknown.
func (ss summaries) layerState(ctx context.Context, l digest.Digest) (summary, meta.LayerState, error) {
	b, state, err := ss.meta.GetLayer(ctx, l)
	if errors.Is(err, meta.ErrNotFound) {
		return summary{}, 0, nil
	}
	if err != nil {
		return summary{}, 0, err
	}
	var s summary
	if len(b) > 0 {
		if err := json.Unmarshal(b, &s); err != nil {
			return summary{}, 0, fmt.Errorf("dedup: summary of %s: %w", l, err)
		}
	}
	return s, state, nil
}

func (ss summaries) putState(ctx context.Context, l digest.Digest, s summary, state meta.LayerState) error {
	b, err := json.Marshal(s)
	if err != nil {
		return err
	}
	return ss.meta.PutLayer(ctx, l, b, state)
}

// disassemble runs the whole pipeline for a layer without a trusted recipe.
func (w *Worker) disassemble(ctx context.Context, l digest.Digest, sum summary) (outcome, error) {
	if err := w.putState(ctx, l, sum, meta.StatePending); err != nil {
		return "", err
	}
	f, size, err := w.spool(ctx, l)
	if errors.Is(err, driver.ErrNotFound) {
		return w.noData(ctx, l, sum)
	}
	if errors.Is(err, ErrBlobCorrupt) {
		return w.irreproducible(ctx, l, sum, size, err)
	}
	if err != nil {
		return "", err
	}
	defer func() {
		f.Close()
		os.Remove(f.Name())
	}()
	open := uncompressed(f, size)

	// A probe guesses the recipe from the start of each member; the
	// verifying rebuild below is the only full compression (see
	// recompress.ProbeRecipe).
	comp, err := recompress.ProbeRecipe(ctx, f, size, open)
	if err != nil {
		if ctx.Err() != nil {
			return "", ctx.Err()
		}
		return w.irreproducible(ctx, l, sum, size, err)
	}
	// Pass 1 only hashes: references are taken before anything is written,
	// so GC can never delete a file between our write and our reference.
	tr, err := disassembleWith(ctx, open, hashOnly{})
	if err != nil {
		if ctx.Err() != nil || isStorageErr(err) {
			return "", err
		}
		return w.irreproducible(ctx, l, sum, size, err)
	}
	rec := &Recipe{Version: recipeVersion, Digest: l, Size: size, Compression: comp, Tar: *tr}
	files := distinctFiles(tr)
	// Claimed before the references are taken, so that a layer sharing a
	// file this one is handed to write waits for it (unlocated) from the
	// moment the write is handed out; narrowed once it is known.
	claim := w.writers.claim(files)
	defer claim.release()
	// A layer that holds references already is resuming an attempt that
	// stopped (a crash): files it did not write, nobody is writing.
	_, held := w.meta.LayerFiles(ctx, l)
	resume := held == nil
	refs, err := w.meta.AddLayerRefs(ctx, l, files)
	if errors.Is(err, meta.ErrLayerFilesDiffer) {
		// A recipe from an earlier attempt named other files (a different
		// build of the disassembler): replace the set.
		if _, err = w.meta.ReleaseLayerRefs(ctx, l); err == nil {
			refs, err = w.meta.AddLayerRefs(ctx, l, files)
		}
	}
	if err != nil {
		return "", err
	}
	// A retried add only reports a Missing file; the add of a new holder
	// hands its write out and clears the flag (meta package doc, point 3).
	// Take the references anew, or settle would find it Missing forever.
	if missing, err := w.anyMissing(ctx, files); err != nil {
		return "", err
	} else if missing {
		if _, err = w.meta.ReleaseLayerRefs(ctx, l); err == nil {
			refs, err = w.meta.AddLayerRefs(ctx, l, files)
		}
		if err != nil {
			return "", err
		}
	}
	need := make(map[digest.Digest]bool)
	sum.Revived = false
	for _, r := range refs {
		if r.Write {
			need[r.Digest] = true
		}
		if r.Revived {
			sum.Revived = true
		}
	}
	claim.keep(need)
	err = w.writeFiles(ctx, open, need, w.parseLevel())
	claim.release()
	if err != nil {
		return "", err
	}
	sum.Size, sum.TarSize, sum.Files = size, tr.TarSize, len(files)
	sum.Encoders = encoders(comp)
	if sum.Revived {
		// GC tombstoned some of these files and may still delete them: trust
		// the recipe only once no GC run is active (checked by settle).
		if active, err := fence.Running(ctx, w.d); err != nil || active {
			if err := w.putState(ctx, l, sum, meta.StateIntact); err != nil {
				return "", err
			}
			return outDeferred, err
		}
		sum.Revived = false
	}
	err = w.verify(ctx, rec, open, f, resume)
	if isMismatch(err) {
		// The probe guessed wrong (or the restart points failed and so did
		// the guess without them): search in full, and check again.
		w.log.Info("dedup: probed recipe does not reproduce the layer; searching in full", "layer", l, "err", err)
		full, ferr := recompress.FindRecipe(ctx, f, size, open)
		if err = ferr; err == nil {
			rec.Compression = full
			sum.Encoders = encoders(full)
			err = w.rebuildChecked(ctx, rec, f)
		}
	}
	if err != nil {
		if ctx.Err() != nil || isStorageErr(err) {
			return "", err
		}
		return w.irreproducible(ctx, l, sum, size, err)
	}
	b, err := encodeRecipe(rec)
	if err != nil {
		return "", err
	}
	if err := w.d.PutContent(ctx, layout.BlobRecipe(l), b); err != nil {
		return "", err
	}
	sum.RecipeBytes = int64(len(b))
	if err := w.putState(ctx, l, sum, meta.StateIntact); err != nil {
		return "", err
	}
	return w.settle(ctx, l, sum, meta.StateIntact)
}

// verify rebuilds the blob from stored pieces. Files without a location
// first: on a first attempt, another worker (or node) that took the first
// reference of a file this layer shares is writing it, so verify waits for
// its pack to be placed (awaitFiles) rather than write a second copy; what
// is still missing then, or on a resumed attempt, is written from the
// blob. A rebuild that finds a file's pack gone (damage: GC deletes only
// packs nothing points into) writes those files again and retries once.
func (w *Worker) verify(ctx context.Context, rec *Recipe, open func() io.Reader, original io.ReaderAt, resume bool) error {
	files := distinctFiles(&rec.Tar)
	need, err := w.unlocated(ctx, files, !resume)
	if err != nil {
		return err
	}
	if err := w.writeFiles(ctx, open, need, w.parseLevel()); err != nil {
		return err
	}
	err = w.rebuildChecked(ctx, rec, original)
	if err == nil || !errors.Is(err, driver.ErrNotFound) {
		return err
	}
	infos, err := w.meta.Files(ctx, files)
	if err != nil {
		return err
	}
	need = make(map[digest.Digest]bool)
	packGone := make(map[string]bool)
	for _, fi := range infos {
		p := fi.Location.Pack
		if p == "" {
			need[fi.Digest] = true
			continue
		}
		gone, seen := packGone[p]
		if !seen {
			// One Stat per pack, and only on this failure path.
			_, err := w.d.Stat(ctx, layout.Pack(p))
			if err != nil && !errors.Is(err, driver.ErrNotFound) {
				return err
			}
			gone = err != nil
			packGone[p] = gone
		}
		if gone {
			need[fi.Digest] = true
		}
	}
	if err := w.writeFiles(ctx, open, need, w.parseLevel()); err != nil {
		return err
	}
	return w.rebuildChecked(ctx, rec, original)
}

// isMismatch reports whether err says a rebuild produced other bytes than
// the blob's.
func isMismatch(err error) bool {
	return errors.Is(err, ErrRebuildMismatch) || errors.Is(err, recompress.ErrMismatch)
}

// rebuildChecked rebuilds rec from stored pieces, comparing with the
// original blob, and discards the bytes: the check that the recipe
// reproduces the blob. Restart points that do not reproduce it are dropped
// from rec (recompress.Check); if too many fail, rec keeps none and is
// checked again without them. A point is only ever stored after it
// reproduced the blob.
func (w *Worker) rebuildChecked(ctx context.Context, rec *Recipe, original io.ReaderAt) error {
	kept, err := w.rebuildChecking(ctx, rec, io.Discard, original, allCores)
	if err == nil {
		rec.Compression = kept
	}
	if !rec.Compression.HasRestarts() || !isMismatch(err) {
		return err
	}
	w.log.Warn("dedup: the restart points of a layer do not reproduce it; checking it without them", "layer", rec.Digest, "err", err)
	rec.Compression = rec.Compression.WithoutRestarts()
	return w.rebuild(ctx, rec, io.Discard, allCores)
}

// awaitWriters bounds how long a first attempt waits for the files
// another node may be storing (a shared metadata store); past it (that
// writer died, say), the layer writes them itself. Writers in this
// process are waited for as long as they write (fileWriters).
const awaitWriters = 30 * time.Second

// unlocated returns the files that have no location. With await, it first
// waits (polling the metadata store, never storage) for them to get one:
// as long as a worker of this process is writing one of them, and, with a
// shared metadata store, up to awaitWriters for the others. A file that
// no worker here writes, with a store only this process uses, nobody
// writes: it is returned at once. In a store that may hold files stored
// one object each (before packs), a file without a location may be one of
// those: it is left to the rebuild, which reads it from there.
func (w *Worker) unlocated(ctx context.Context, files []digest.Digest, await bool) (map[digest.Digest]bool, error) {
	legacy, err := w.files.MayHaveLegacy(ctx)
	if err != nil || legacy {
		return nil, err
	}
	deadline := time.Now().Add(awaitWriters)
	pause := 50 * time.Millisecond
	for {
		infos, err := w.meta.Files(ctx, files)
		if err != nil {
			return nil, err
		}
		var left []digest.Digest
		for _, fi := range infos {
			if fi.Location.IsZero() {
				left = append(left, fi.Digest)
			}
		}
		local, changed := w.writers.writing(left)
		others := w.opts.SharedStore && time.Now().Before(deadline)
		if len(left) == 0 || !await || (!local && !others) {
			need := make(map[digest.Digest]bool, len(left))
			for _, d := range left {
				need[d] = true
			}
			return need, nil
		}
		files = left
		select {
		case <-changed:
		case <-time.After(pause):
		case <-ctx.Done():
			return nil, ctx.Err()
		}
		pause = min(2*pause, time.Second)
	}
}

// settle makes a layer with a verified recipe match its mode: the intact copy
// is dropped (full, cold in selective) or restored (hot in selective).
func (w *Worker) settle(ctx context.Context, l digest.Digest, sum summary, state meta.LayerState) (outcome, error) {
	keep := sum.Mode == ModeIndex
	if sum.Mode == ModeSelective {
		hot, err := w.hot(ctx, l)
		if err != nil {
			return "", err
		}
		keep = hot
	}
	switch {
	case keep && state == meta.StateDeduplicated:
		if err := w.promote(ctx, l); err != nil {
			return "", err
		}
		return outIndexed, w.putState(ctx, l, sum, meta.StateIntact)
	case keep:
		// A crash between dropping the intact copy and recording it left
		// "intact" without data: write the copy back.
		if _, err := w.d.Stat(ctx, layout.BlobData(l)); errors.Is(err, driver.ErrNotFound) {
			if err := w.promote(ctx, l); err != nil {
				return "", err
			}
		} else if err != nil {
			return "", err
		}
		return outIndexed, w.putState(ctx, l, sum, meta.StateIntact)
	case state == meta.StateDeduplicated:
		// An intact copy written back beside the recipe (by a cairn that
		// let a re-push store it again) is dropped again.
		if _, err := w.d.Stat(ctx, layout.BlobData(l)); errors.Is(err, driver.ErrNotFound) {
			return outUnchanged, nil
		} else if err != nil {
			return "", err
		}
		if _, err := w.d.DeleteFiles(ctx, []string{layout.BlobData(l)}); err != nil {
			return "", err
		}
		return outDeduplicated, nil
	}
	// A file GC deleted under a revive is marked Missing: rewrite first.
	// No references at all: a layer without file payloads (a WORKDIR
	// step), or a crash between disassemble's release and re-add; the
	// recipe tells which.
	files, err := w.meta.LayerFiles(ctx, l)
	if errors.Is(err, meta.ErrNotFound) {
		r, rerr := w.recipe(ctx, l)
		if rerr != nil {
			return "", rerr
		}
		if len(r.Tar.Files) > 0 {
			sum.Revived = true
			return w.disassemble(ctx, l, sum)
		}
		files, err = nil, nil
	}
	if err != nil {
		return "", err
	}
	if missing, err := w.anyMissing(ctx, files); err != nil {
		return "", err
	} else if missing {
		sum.Revived = true
		return w.disassemble(ctx, l, sum)
	}
	// A known file: deleted without the listing a recursive Delete costs
	// on an object store.
	if _, err := w.d.DeleteFiles(ctx, []string{layout.BlobData(l)}); err != nil {
		return "", err
	}
	if err := w.putState(ctx, l, sum, meta.StateDeduplicated); err != nil {
		return "", err
	}
	return outDeduplicated, nil
}

// anyMissing reports whether a file of files is marked Missing or has no
// entry: its object may be gone.
func (w *Worker) anyMissing(ctx context.Context, files []digest.Digest) (bool, error) {
	if len(files) == 0 {
		return false, nil
	}
	infos, err := w.meta.Files(ctx, files)
	if err != nil {
		return false, err
	}
	for _, fi := range infos {
		if fi.Missing || !fi.Exists {
			return true, nil
		}
	}
	return false, nil
}

// noData handles a layer whose intact bytes are gone: deduplicated already
// (its recipe file serves it) or deleted.
func (w *Worker) noData(ctx context.Context, l digest.Digest, sum summary) (outcome, error) {
	if r, err := w.recipe(ctx, l); err == nil {
		// Another worker finished l meanwhile, and this one's first
		// putState replaced that summary: describe l from its recipe.
		var size int64
		if fi, err := w.d.Stat(ctx, layout.BlobRecipe(l)); err == nil {
			size = fi.Size
		}
		mode := sum.Mode
		sum = summaryOf(r, size)
		sum.Mode = mode
		return outUnchanged, w.putState(ctx, l, sum, meta.StateDeduplicated)
	}
	if _, err := w.meta.ReleaseLayerRefs(ctx, l); err != nil {
		return "", err
	}
	return outGone, w.meta.DeleteLayer(ctx, l)
}

func (w *Worker) irreproducible(ctx context.Context, l digest.Digest, sum summary, size int64, cause error) (outcome, error) {
	// Files this attempt referenced are garbage now; GC drains zero counts.
	if _, err := w.meta.ReleaseLayerRefs(ctx, l); err != nil {
		return "", err
	}
	sum.Size, sum.Reason, sum.Revived = size, cause.Error(), false
	return outIrreproducible, w.putState(ctx, l, sum, meta.StateIrreproducible)
}

// spoolPattern names spooled blobs in Options.TempDir.
const spoolPattern = "cairn-dedup-*"

// spool copies blob l to a temp file, checking its digest on the way.
func (w *Worker) spool(ctx context.Context, l digest.Digest) (*os.File, int64, error) {
	rc, err := w.d.Reader(ctx, layout.BlobData(l), 0)
	if err != nil {
		return nil, 0, err
	}
	defer rc.Close()
	f, err := os.CreateTemp(w.opts.TempDir, spoolPattern)
	if err != nil {
		return nil, 0, fmt.Errorf("dedup: %w", err)
	}
	v := l.Verifier()
	n, err := io.Copy(io.MultiWriter(f, v), rc)
	if err == nil && !v.Verified() {
		err = fmt.Errorf("%w: %s", ErrBlobCorrupt, l)
	}
	if err != nil {
		f.Close()
		os.Remove(f.Name())
		return nil, n, err
	}
	return f, n, nil
}

// uncompressed returns a function opening the blob's uncompressed stream
// from its start (recompress.OpenUncompressed). Every stream it opens
// fails with ErrExpansion past expansionBudget(size) bytes.
func uncompressed(f *os.File, size int64) func() io.Reader {
	limit := expansionBudget(size)
	return func() io.Reader {
		rc, err := recompress.OpenUncompressed(io.NewSectionReader(f, 0, size))
		if err != nil {
			return errReader{err}
		}
		return &bounded{r: rc, left: limit, c: rc}
	}
}

// A layer whose uncompressed stream is longer than
// expansionAllowance + expansionFactor*compressed is treated as a
// decompression bomb: it stays intact (irreproducible) after reading at
// most that much, instead of keeping a worker busy and making every cold
// pull recompress it. The bound must be absolute, not a ratio alone:
// deflate cannot expand more than about 1032x, so a ratio bound above that
// never stops a gzip layer (a 2 MB gzip of 2 GiB of zeros cost 45 s of
// dedup CPU and 9 s per cold pull under the former 2048x).
//
// The allowance lets any layer up to 256 MiB uncompressed through,
// whatever its ratio (small layers of zeros or text are common and cheap).
// The factor covers large layers: real ones expand 2-5x (the Debian
// dataset 2-4x), text-heavy ones rarely past 10x, so 16x leaves them ample
// room while a layer of hundreds of MB is never refused for its size. The
// 2 MB bomb above now stops after 288 MiB. A refused layer only loses its
// savings: it keeps serving its intact copy.
const (
	expansionAllowance = 256 << 20
	expansionFactor    = 16
)

// expansionBudget is how many uncompressed bytes a blob of size compressed
// bytes may yield.
func expansionBudget(size int64) int64 {
	return expansionAllowance + expansionFactor*size
}

// ErrExpansion marks a layer whose uncompressed stream exceeds the bound.
var ErrExpansion = errors.New("dedup: layer expands beyond the decompression bound")

// bounded fails the stream once it has yielded more than left bytes.
type bounded struct {
	r    io.Reader
	left int64
	c    io.Closer
}

func (b *bounded) Read(p []byte) (int, error) {
	n, err := b.r.Read(p)
	b.left -= int64(n)
	if b.left < 0 {
		return n, ErrExpansion
	}
	return n, err
}

func (b *bounded) Close() error { return b.c.Close() }

type errReader struct{ err error }

func (r errReader) Read([]byte) (int, error) { return 0, r.err }

// disassembleWith runs layer.Disassemble over a fresh uncompressed stream.
func disassembleWith(ctx context.Context, open func() io.Reader, fs layer.Sink) (*layer.Recipe, error) {
	r := open()
	if c, ok := r.(io.Closer); ok {
		defer c.Close()
	}
	return layer.Disassemble(ctx, r, fs)
}

// parseLevel is the level at which the files a layer stores first are
// kept as parses: none unless Options.Parses, and then pack.ParseLevel
// whatever compressed the layer. A file is stored once, by whichever layer
// holds it first, and serves every later layer holding it: the parse must
// be the one those layers follow, not the first producer's (on the Debian
// dataset a zstd or pgzip layer often stores a file first, and the
// compress/flate level-6 layers that share it found no parse to follow).
func (w *Worker) parseLevel() int {
	if !w.opts.Parses {
		return 0
	}
	return pack.ParseLevel
}

// writeFiles stores the files in need from a second pass over the layer,
// into packs in the layer's order; they are readable once it returns.
// With parseLevel set, the files large enough are stored as their parses
// at that deflate level (pack.Writer.KeepParses), whatever the layer's
// own compression.
func (w *Worker) writeFiles(ctx context.Context, open func() io.Reader, need map[digest.Digest]bool, parseLevel int) error {
	if len(need) == 0 {
		return nil
	}
	pw := w.files.NewWriter(0)
	pw.KeepParses(parseLevel)
	_, err := disassembleWith(ctx, open, &needSink{need: need, Sink: pw})
	if err == nil {
		err = pw.Flush(ctx)
	}
	if err != nil {
		pw.Abort(ctx)
		return fmt.Errorf("dedup: writing files: %w", err)
	}
	return nil
}

// hashOnly is a Sink that stores nothing: pass 1 only learns digests.
type hashOnly struct{}

func (hashOnly) Has(context.Context, digest.Digest) (bool, error) { return true, nil }
func (hashOnly) Put(context.Context, digest.Digest, int64, io.Reader) error {
	return errors.New("dedup: hashOnly store written")
}

// needSink writes exactly the files in need.
type needSink struct {
	need map[digest.Digest]bool
	layer.Sink
}

func (s *needSink) Has(_ context.Context, d digest.Digest) (bool, error) { return !s.need[d], nil }

// storageErr marks errors from the file store, which are worth a retry
// rather than marking the layer irreproducible.
type storageErr struct{ err error }

func (e storageErr) Error() string { return e.err.Error() }
func (e storageErr) Unwrap() error { return e.err }

func isStorageErr(err error) bool {
	var se storageErr
	return errors.As(err, &se)
}

func distinctFiles(r *layer.Recipe) []digest.Digest {
	seen := make(map[digest.Digest]bool, len(r.Files))
	out := make([]digest.Digest, 0, len(r.Files))
	for _, f := range r.Files {
		if !seen[f.Digest] {
			seen[f.Digest] = true
			out = append(out, f.Digest)
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i] < out[j] })
	return out
}

func encoders(r recompress.Recipe) []string {
	if r.Format == recompress.FormatNone {
		return []string{"none"}
	}
	out := make([]string, 0, len(r.Members))
	for _, m := range r.Members {
		out = append(out, m.Encoder)
	}
	return out
}
