package gc

import (
	"context"
	"errors"
	"slices"
	"strings"
	"sync"
	"time"
	"unsafe"

	"github.com/opencontainers/go-digest"

	"github.com/cairn-registry/cairn/internal/digestkey"
	"github.com/cairn-registry/cairn/internal/fence"
	"github.com/cairn-registry/cairn/internal/layout"
	"github.com/cairn-registry/cairn/internal/meta"
	"github.com/cairn-registry/cairn/internal/storage/driver"
)

type entryKind uint8

const (
	kRev      entryKind = iota // a deleted manifest's revision link
	kReferrer                  // its link in its subject's referrers index
	kLayer                     // a _layers link no live manifest names
	kTagIndex                  // a tag index entry naming a deleted manifest
	kStale                     // a tag index entry naming no revision
	kBlob                      // an unmarked blob's data
)

// fenced kinds are what registry writers check before they rely on them;
// a round deleting any of them runs under a fence (see the package doc).
func (k entryKind) fenced() bool { return k == kRev || k == kLayer || k == kBlob }

// entry is one path to delete, 20 bytes: its place in the round's arena
// and what it is, so that a journal read can still spare it.
type entry struct {
	start, end int32
	repo       int32
	idx        int32 // revision, layer link or round blob index
	kind       entryKind
}

type blobInfo struct {
	key    dkey
	size   int64 // of all its files
	left   int8  // files not yet deleted
	recipe bool  // deduplicated: it has a recipe file
}

// sweeper gathers entries into rounds of BatchSize*Concurrency paths. The
// paths of a round are appended to one arena and handed out as strings
// pointing into it: no allocation per path.
type sweeper struct {
	c      *collector
	ents   []entry
	blobs  []blobInfo
	arena  []byte
	fenced bool
	max    int
	// batches are reused DeleteFiles arguments; one whose call failed is
	// replaced, as its error may keep referring to it.
	batches   [][]string
	links     []string // DigestLink of each deleted revision of the repository
	undeleted []entry  // revision links a DeleteFiles call did not delete
	erred     bool     // a DeleteFiles call of this round failed
	last      bool     // this is the sweep's last round
	gone      []dkey   // blobs this round deleted whole, to release
	forgotten []dkey   // digests of the blobs and links this round deleted, for Options.Forget
}

func newSweeper(c *collector) *sweeper {
	max := c.opts.BatchSize * c.opts.Concurrency
	return &sweeper{c: c, max: max, ents: make([]entry, 0, max), arena: make([]byte, 0, max*160)}
}

func (s *sweeper) push(ctx context.Context, e entry, start int) error {
	e.start, e.end = int32(start), int32(len(s.arena))
	s.ents = append(s.ents, e)
	if e.kind.fenced() {
		s.fenced = true
	}
	if len(s.ents) >= s.max || len(s.arena) > 1<<30 {
		return s.flush(ctx)
	}
	return nil
}

// sweep deletes, repository by repository, then the blobs.
func (c *collector) sweep(ctx context.Context) error {
	s := newSweeper(c)
	for ri, rs := range c.repos {
		if err := s.repoEntries(ctx, int32(ri), rs); err != nil {
			return err
		}
	}
	if c.blobSweepOff == "" {
		if err := s.blobEntries(ctx); err != nil {
			return err
		}
	}
	s.last = true
	if err := s.flush(ctx); err != nil {
		return err
	}
	if c.blobSweepOff != "" {
		c.rep.BlobSweep = "skipped: " + c.blobSweepOff
	} else {
		c.rep.BlobSweep = "done"
	}
	return nil
}

// repoEntries queues a repository's links: revision and referrer links of
// deleted manifests first, then unreferenced _layers links, then tag index
// entries (by then their manifests' fate is settled).
func (s *sweeper) repoEntries(ctx context.Context, ri int32, rs *repoState) error {
	c := s.c
	if rs.uncertain {
		return nil
	}
	if rs.nDelete > 0 {
		if cap(s.links) < len(rs.revs) {
			s.links = make([]string, len(rs.revs))
		}
		s.links = s.links[:len(rs.revs)]
		clear(s.links)
	}
	for i := range rs.revs {
		r := &rs.revs[i]
		if r.flags&fDelete == 0 {
			continue
		}
		alg, hex := r.key.Alg(), c.hexOf(r.key)
		s.links[i] = layout.DigestLink(alg, hex)
		start := len(s.arena)
		s.arena = layout.AppendRevisionLink(s.arena, rs.name, alg, hex)
		if err := s.push(ctx, entry{kind: kRev, repo: ri, idx: int32(i)}, start); err != nil {
			return err
		}
		var subj dkey
		switch {
		case r.subject >= 0:
			subj = rs.revs[r.subject].key
		case r.subject == danglingSubject:
			subj = rs.dangling[int32(i)]
		default:
			continue
		}
		start = len(s.arena)
		s.arena = layout.AppendReferrerLink(s.arena, rs.name, subj.Alg(), c.hexOf(subj), alg, hex)
		if err := s.push(ctx, entry{kind: kReferrer, repo: ri, idx: int32(i)}, start); err != nil {
			return err
		}
	}
	for j := range rs.layers {
		l := &rs.layers[j]
		if !l.del {
			continue
		}
		start := len(s.arena)
		s.arena = layout.AppendLayerLink(s.arena, rs.name, l.key.Alg(), c.hexOf(l.key))
		if err := s.push(ctx, entry{kind: kLayer, repo: ri, idx: int32(j)}, start); err != nil {
			return err
		}
	}
	for ti := range rs.tags {
		t := &rs.tags[ti]
		var err error
		if rs.nDelete > 0 {
			// The hot loop: two appends per path.
			dir := layout.TagIndexDir(rs.name, t.name)
			t.index.each(func(i uint32) bool {
				if rs.revs[i].flags&fDelete == 0 {
					return true
				}
				start := len(s.arena)
				s.arena = append(append(s.arena, dir...), s.links[i]...)
				err = s.push(ctx, entry{kind: kTagIndex, repo: ri, idx: int32(i)}, start)
				return err == nil
			})
		}
		if err != nil {
			return err
		}
		for _, k := range t.stale {
			start := len(s.arena)
			s.arena = layout.AppendTagIndexLink(s.arena, rs.name, t.name, k.Alg(), c.hexOf(k))
			if err := s.push(ctx, entry{kind: kStale, repo: ri, idx: -1}, start); err != nil {
				return err
			}
		}
	}
	return nil
}

// blobEntries lists blobs/ once and queues every blob nobody marked: its
// data, its dedup recipe, or both. A blob's files come one after the other
// (the listing is in lexical order, data before recipe); the blob is
// judged once the next blob begins, as one: counted once, kept whole if
// any of its files is young.
func (s *sweeper) blobEntries(ctx context.Context) error {
	c := s.c
	var p pendingBlob
	err := c.d.Walk(ctx, layout.BlobsDir, func(fi driver.FileInfo) error {
		if fi.IsDir {
			return nil
		}
		alg, hexs, leaf, ok := layout.ParseBlobPath(fi.Path)
		if !ok {
			c.problem(ProblemBadPath, fi.Path)
			return nil
		}
		k, ok := c.keys.Parse(alg, hexs)
		if !ok {
			c.problem(ProblemBadPath, fi.Path)
			return nil
		}
		if p.n > 0 && (p.key != k || p.n == len(p.ends)) {
			if err := s.endBlob(ctx, &p); err != nil {
				return err
			}
		}
		if p.n == 0 {
			p = pendingBlob{key: k, paths: p.paths[:0]}
			c.nBlobs.Add(1)
			c.rep.Blobs++
		}
		p.paths = append(p.paths, fi.Path...)
		p.ends[p.n] = len(p.paths)
		p.n++
		p.size += fi.Size
		p.young = p.young || c.young(modNS(fi.ModTime))
		p.recipe = p.recipe || leaf == layout.BlobRecipeLeaf
		return nil
	})
	if errors.Is(err, driver.ErrNotFound) {
		err = nil
	}
	if err == nil && p.n > 0 {
		err = s.endBlob(ctx, &p)
	}
	return err
}

// pendingBlob is the blob whose files the listing is delivering.
type pendingBlob struct {
	key    dkey
	n      int    // files seen
	paths  []byte // their paths, one after the other
	ends   [2]int // where each path ends in paths
	size   int64
	young  bool
	recipe bool
}

// endBlob queues the paths of a pending blob nobody marked.
func (s *sweeper) endBlob(ctx context.Context, p *pendingBlob) error {
	c := s.c
	n := p.n
	p.n = 0
	if c.isMarked(p.key) {
		return nil
	}
	if p.young {
		c.rep.KeptYoung++
		return nil
	}
	// A blob's files go in one round: the blob is deleted, and its
	// references released, once all of them are gone.
	if len(s.ents)+n > s.max {
		if err := s.flush(ctx); err != nil {
			return err
		}
	}
	c.nPlanned.Add(int64(n))
	s.blobs = append(s.blobs, blobInfo{key: p.key, size: p.size, left: int8(n), recipe: p.recipe})
	start := 0
	for _, end := range p.ends[:n] {
		at := len(s.arena)
		s.arena = append(s.arena, p.paths[start:end]...)
		start = end
		s.ents = append(s.ents, entry{start: int32(at), end: int32(len(s.arena)), kind: kBlob, idx: int32(len(s.blobs) - 1)})
	}
	s.fenced = true
	if len(s.ents) >= s.max || len(s.arena) > 1<<30 {
		return s.flush(ctx)
	}
	return nil
}

// flush runs one round with the queued entries. The round's paths are
// strings pointing into the arena; DeleteFiles is synchronous and keeps no
// path after it returns except in its error, so the arena is written again
// only after a round whose calls all succeeded.
func (s *sweeper) flush(ctx context.Context) error {
	if len(s.ents) == 0 {
		return nil
	}
	buf := s.arena
	s.erred = false
	err := s.c.runRound(ctx, s, unsafe.String(unsafe.SliceData(buf), len(buf)))
	if len(s.gone) > 0 {
		// Only blobs this round deleted: never one a journal record
		// revived, nor one whose delete failed.
		if rerr := s.c.releaseLayers(ctx, s.gone); err == nil {
			err = rerr
		}
		s.gone = s.gone[:0]
	}
	if len(s.forgotten) > 0 {
		s.c.forget(ctx, s.forgotten)
		s.forgotten = s.forgotten[:0]
	}
	if s.erred {
		s.arena = make([]byte, 0, cap(buf))
	} else {
		s.arena = buf[:0]
	}
	s.ents, s.blobs, s.fenced = s.ents[:0], s.blobs[:0], false
	return err
}

// doomed reports whether e is still to be deleted: a journal record read
// since it was queued may have revived its manifest or named its blob.
func (c *collector) doomed(s *sweeper, e entry) bool {
	switch e.kind {
	case kRev, kReferrer, kTagIndex:
		return c.repos[e.repo].revs[e.idx].flags&fDelete != 0
	case kLayer:
		return c.repos[e.repo].layers[e.idx].del
	case kBlob:
		return c.blobSweepOff == "" && !c.isMarked(s.blobs[e.idx].key)
	}
	return true
}

// runRound deletes one round's entries: under a fence, after reading the
// journal, when the round deletes what writers rely on.
func (c *collector) runRound(ctx context.Context, s *sweeper, arena string) error {
	rctx := ctx
	if s.fenced && !c.opts.DryRun {
		began := time.Now()
		f, err := c.journal.run.OpenFence(ctx)
		if err != nil {
			return err
		}
		if s.last {
			// Removed with the run marker: one request less.
			c.journal.fence = f
		} else {
			defer c.journal.run.CloseFence(ctx, f)
		}
		var cancel context.CancelFunc
		// Writers wait fence.FenceWait for a fence they saw; stop well
		// within.
		rctx, cancel = context.WithDeadline(ctx, began.Add(fence.RoundMax))
		defer cancel()
		if err := c.readJournal(rctx); err != nil {
			return err
		}
	}
	ents := s.ents[:0]
	prev := entry{idx: -1}
	for _, e := range s.ents {
		switch {
		case c.doomed(s, e):
			ents = append(ents, e)
		case e.kind == kBlob && prev.kind == kBlob && prev.idx == e.idx:
			// The blob's other file: the blob is kept once.
		default:
			c.rep.KeptJournal++
		}
		prev = e
	}
	if c.opts.DryRun {
		for _, e := range ents {
			c.count(s, e)
		}
		c.nDeleted.Add(int64(len(ents)))
		return ctx.Err()
	}

	bs := c.opts.BatchSize
	nb := (len(ents) + bs - 1) / bs
	for len(s.batches) < nb {
		s.batches = append(s.batches, make([]string, 0, bs))
	}
	var wg sync.WaitGroup
	var mu sync.Mutex
	for b := range nb {
		part := ents[b*bs : min(len(ents), (b+1)*bs)]
		paths := s.batches[b][:0]
		for _, e := range part {
			paths = append(paths, arena[e.start:e.end])
		}
		s.batches[b] = paths
		wg.Go(func() {
			n, err := c.d.DeleteFiles(rctx, paths)
			mu.Lock()
			defer mu.Unlock()
			c.account(s, part, paths, n, err)
			if err != nil {
				s.batches[b] = make([]string, 0, bs)
				s.erred = true
			}
		})
	}
	wg.Wait()
	// A manifest whose revision link is still there stays whole: its
	// blobs, links and tag index entries are kept.
	for _, e := range s.undeleted {
		c.revive(ctx, c.repos[e.repo], int(e.idx))
	}
	s.undeleted = s.undeleted[:0]
	return ctx.Err()
}

// account counts what one DeleteFiles call deleted. Paths named in its
// errors failed; if fewer paths are gone than were not named, the rest were not attempted (the round ran out of time, or the
// run was stopped).
func (c *collector) account(s *sweeper, part []entry, paths []string, n int, err error) {
	const (
		gone = iota
		failed
		deferred
	)
	state := make([]uint8, len(part))
	if err != nil {
		var msgs []string
		for _, e := range flatten(err) {
			msgs = append(msgs, e.Error())
			if len(c.rep.DeleteErrors) < maxExamples {
				c.rep.DeleteErrors = append(c.rep.DeleteErrors, e.Error())
			}
		}
		named := 0
		for i, p := range paths {
			for _, m := range msgs {
				if strings.Contains(m, p) {
					state[i] = failed
					named++
					break
				}
			}
		}
		unknown := len(part) - named - n
		for i := len(part) - 1; i >= 0 && unknown > 0; i-- {
			if state[i] == gone {
				state[i] = deferred
				unknown--
			}
		}
	}
	for i, e := range part {
		switch state[i] {
		case gone:
			c.count(s, e)
			c.nDeleted.Add(1)
			continue
		case failed:
			c.rep.DeleteFailures++
		case deferred:
			c.rep.Deferred++
		}
		if e.kind == kRev {
			s.undeleted = append(s.undeleted, e)
		}
	}
}

// count counts one deleted path; a blob counts when its last file goes.
func (c *collector) count(s *sweeper, e entry) {
	d := &c.rep.Deleted
	forget := c.opts.Forget != nil && !c.opts.DryRun
	switch e.kind {
	case kRev:
		d.Manifests++
		if forget {
			s.forgotten = append(s.forgotten, c.repos[e.repo].revs[e.idx].key)
		}
	case kReferrer:
		d.ReferrerLinks++
	case kLayer:
		d.LayerLinks++
		if forget {
			s.forgotten = append(s.forgotten, c.repos[e.repo].layers[e.idx].key)
		}
	case kTagIndex, kStale:
		d.TagIndexEntries++
	case kBlob:
		b := &s.blobs[e.idx]
		if b.left--; b.left > 0 {
			return
		}
		d.Blobs++
		d.BytesFreed += b.size
		if b.recipe {
			d.Recipes++
		}
		// A dry run releases into its preview index (dryIndex), never
		// into the real one.
		if c.opts.Dedup != nil && (!c.opts.DryRun || c.previewing()) {
			s.gone = append(s.gone, b.key)
		}
		if forget {
			s.forgotten = append(s.forgotten, b.key)
		}
	}
}

// BlobForgetter drops cached descriptors (package blobcache implements
// it): what a registry node answers a HEAD from must not outlive the blob
// or link GC deleted.
type BlobForgetter interface {
	// ForgetBlobs drops what is cached about each digest, in every
	// repository.
	ForgetBlobs(ctx context.Context, ds []digest.Digest) error
}

// forget tells Options.Forget the digests a round deleted, once each. It
// runs after the deletes (an entry remembered before them is dropped) and
// even when the run is being stopped: the deletes happened.
func (c *collector) forget(ctx context.Context, keys []dkey) {
	slices.SortFunc(keys, digestkey.Compare)
	keys = slices.Compact(keys)
	ds := make([]digest.Digest, len(keys))
	for i, k := range keys {
		ds[i] = c.keys.Digest(k)
	}
	if err := c.opts.Forget.ForgetBlobs(context.WithoutCancel(ctx), ds); err != nil {
		c.problem(ProblemCacheForget, err.Error())
	}
}

// flatten lists the errors joined in err.
func flatten(err error) []error {
	if j, ok := err.(interface{ Unwrap() []error }); ok {
		var out []error
		for _, e := range j.Unwrap() {
			out = append(out, flatten(e)...)
		}
		return out
	}
	return []error{err}
}

// sweepTemp deletes the temporary files of interrupted driver writes
// (filesystem: link~<suffix> after a kill -9) once older than the delay;
// only the driver can find them (driver.TempSweeper).
func (c *collector) sweepTemp(ctx context.Context) error {
	ts, ok := driver.As[driver.TempSweeper](c.d)
	if !ok {
		return nil
	}
	n, err := ts.SweepTemp(ctx, layout.Root, time.Unix(0, c.cutoff), c.opts.DryRun)
	c.mu.Lock()
	c.rep.Deleted.TmpFiles += int64(n)
	c.mu.Unlock()
	return err
}

// dryIndex is the dedup index as a dry run sees it: the real one read,
// never written, with the run's releases and entry drops applied in
// memory. A dry run uses it in place of Options.Dedup and Options.Packs
// (previewDedup), so that the code the real run takes counts what the real
// run would delete: the files its releases leave unreferenced, the packs
// those drops leave sparse, the orphans adoption would keep. Without
// LayerFiles and Files on the index (dedupReader), releases free nothing,
// as before.
type dryIndex struct {
	dedup DedupIndex  // nil without Options.Dedup
	packs PackIndex   // nil without Options.Packs
	read  dedupReader // nil: releases are not previewed

	mu       sync.Mutex
	layers   map[digest.Digest]struct{} // released
	released map[digest.Digest]int64    // references released per file
	zeroed   map[digest.Digest]struct{} // files whose count reached zero
	dropped  map[digest.Digest]struct{} // entries dropped
	live     map[string]int64           // bytes leaving each pack
}

// dedupReader is what a dry run reads of the dedup index (meta.Store has
// it).
type dedupReader interface {
	LayerFiles(ctx context.Context, layer digest.Digest) ([]digest.Digest, error)
	Files(ctx context.Context, digests []digest.Digest) ([]meta.FileInfo, error)
}

// errWouldPlace is the dry index's answer to a write of pack records: the
// real run would have recorded (adopted) the pack.
var errWouldPlace = errors.New("gc: dry run: the pack would be adopted")

// previewDedup puts a dryIndex in place of the run's dedup and pack
// indexes, once, before anything reads them.
func (c *collector) previewDedup() {
	if c.opts.Dedup == nil && c.opts.Packs == nil {
		return
	}
	if _, ok := c.opts.Dedup.(*dryIndex); ok {
		return
	}
	x := &dryIndex{dedup: c.opts.Dedup, packs: c.opts.Packs,
		layers: make(map[digest.Digest]struct{}), released: make(map[digest.Digest]int64),
		zeroed: make(map[digest.Digest]struct{}), dropped: make(map[digest.Digest]struct{}),
		live: make(map[string]int64)}
	if r, ok := c.opts.Dedup.(dedupReader); ok {
		x.read = r
	} else if r, ok := c.opts.Packs.(dedupReader); ok {
		x.read = r
	}
	if c.opts.Dedup != nil {
		c.opts.Dedup = x
	}
	if c.opts.Packs != nil {
		c.opts.Packs = x
	}
}

// previewing reports whether the dedup index is a dry run's.
func (c *collector) previewing() bool {
	_, ok := c.opts.Dedup.(*dryIndex)
	return ok
}

// ReleaseLayers returns the files whose count the layers' releases would
// bring to zero, counting the releases of earlier calls.
func (x *dryIndex) ReleaseLayers(ctx context.Context, layers []digest.Digest) ([]digest.Digest, error) {
	if x.read == nil {
		return nil, nil
	}
	held := make(map[digest.Digest][]digest.Digest, len(layers))
	var all []digest.Digest
	for _, l := range layers {
		files, err := x.read.LayerFiles(ctx, l)
		if errors.Is(err, meta.ErrNotFound) {
			continue // never deduplicated
		}
		if err != nil {
			return nil, err
		}
		held[l] = files
		all = append(all, files...)
	}
	slices.Sort(all)
	all = slices.Compact(all)
	infos, err := x.read.Files(ctx, all)
	if err != nil {
		return nil, err
	}
	refs := make(map[digest.Digest]int64, len(infos))
	for _, fi := range infos {
		if fi.Exists {
			refs[fi.Digest] = fi.Refs
		}
	}
	x.mu.Lock()
	defer x.mu.Unlock()
	var zero []digest.Digest
	for _, l := range layers {
		files, ok := held[l]
		if _, done := x.layers[l]; done || !ok {
			continue
		}
		x.layers[l] = struct{}{}
		for _, f := range files {
			n, ok := refs[f]
			if !ok {
				continue
			}
			x.released[f]++
			if _, z := x.zeroed[f]; !z && n-x.released[f] <= 0 {
				x.zeroed[f] = struct{}{}
				zero = append(zero, f)
			}
		}
	}
	return zero, nil
}

// Files is the index's answer as the real run would leave it: references
// released, entries dropped.
func (x *dryIndex) Files(ctx context.Context, ds []digest.Digest) ([]meta.FileInfo, error) {
	if x.read == nil {
		return nil, errors.New("gc: dry run: the dedup index cannot be read")
	}
	infos, err := x.read.Files(ctx, ds)
	if err != nil {
		return nil, err
	}
	x.mu.Lock()
	defer x.mu.Unlock()
	for i := range infos {
		fi := &infos[i]
		if _, ok := x.dropped[fi.Digest]; ok {
			infos[i] = meta.FileInfo{Digest: fi.Digest}
			continue
		}
		fi.Refs = max(0, fi.Refs-x.released[fi.Digest])
	}
	return infos, nil
}

// TombstoneFiles returns the files the real run would tombstone: those
// without references; it tombstones nothing.
func (x *dryIndex) TombstoneFiles(ctx context.Context, files []digest.Digest) ([]digest.Digest, error) {
	if x.read == nil {
		return files, nil // unreferenced when listed (ZeroFiles)
	}
	infos, err := x.Files(ctx, files)
	if err != nil {
		return nil, err
	}
	var out []digest.Digest
	for _, fi := range infos {
		if fi.Exists && fi.Refs == 0 {
			out = append(out, fi.Digest)
		}
	}
	return out, nil
}

// DropFileEntries records the entries as dropped and their bytes as
// leaving their packs; it drops nothing.
func (x *dryIndex) DropFileEntries(ctx context.Context, files []digest.Digest) ([]digest.Digest, error) {
	if x.read == nil {
		return nil, nil
	}
	infos, err := x.Files(ctx, files)
	if err != nil {
		return nil, err
	}
	x.mu.Lock()
	defer x.mu.Unlock()
	for _, fi := range infos {
		if !fi.Exists {
			continue
		}
		x.dropped[fi.Digest] = struct{}{}
		if !fi.Location.IsZero() {
			x.live[fi.Location.Pack] += fi.Location.Length
		}
	}
	return nil, nil
}

// ZeroFiles implements DedupIndex: what an earlier run left.
func (x *dryIndex) ZeroFiles(ctx context.Context, after digest.Digest, limit int) ([]digest.Digest, error) {
	return x.dedup.ZeroFiles(ctx, after, limit)
}

// ListPacks lists the records as the real run would find them after its
// drops: their live bytes lower, changed now.
func (x *dryIndex) ListPacks(ctx context.Context, after string, limit int) ([]meta.PackInfo, error) {
	page, err := x.packs.ListPacks(ctx, after, limit)
	if err != nil {
		return nil, err
	}
	now := time.Now()
	x.mu.Lock()
	defer x.mu.Unlock()
	for i := range page {
		if n := x.live[page[i].ID]; n > 0 {
			page[i].Live = max(0, page[i].Live-n)
			page[i].Changed = now
		}
	}
	return page, nil
}

// TombstonePack changes nothing: a dry run's judge counts on its own.
func (x *dryIndex) TombstonePack(context.Context, string, time.Duration) (bool, error) {
	return false, nil
}

// DeletePack changes nothing.
func (x *dryIndex) DeletePack(context.Context, string) (bool, error) { return false, nil }

// BeginPack refuses with errWouldPlace: pack.Adopt got as far as
// recording the pack.
func (x *dryIndex) BeginPack(context.Context, string) error { return errWouldPlace }

// PlaceFiles refuses with errWouldPlace.
func (x *dryIndex) PlaceFiles(context.Context, string, int64, []meta.Placement) ([]bool, error) {
	return nil, errWouldPlace
}
