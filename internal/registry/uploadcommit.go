package registry

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"hash"
	"io"
	"path"
	"slices"

	"github.com/opencontainers/go-digest"

	"github.com/cairn-registry/cairn/internal/fence"
	"github.com/cairn-registry/cairn/internal/layout"
	"github.com/cairn-registry/cairn/internal/storage/driver"
)

// The commit side of an upload session (see the lifecycle in uploads.go).

// FinishUpload appends body (nil when the client sent no last chunk),
// verifies the whole upload against d, moves it into the blob store and
// links it into repo. A digest mismatch cancels the upload.
func (r *Registry) FinishUpload(ctx context.Context, repo, id string, d digest.Digest, body io.Reader, start int64) (int64, error) {
	head, release, err := r.claimUpload(ctx, repo, id)
	if err != nil {
		return 0, err
	}
	defer release()
	size, err := r.finishUpload(ctx, repo, id, head, d, body, start)
	if err != nil {
		// The session stays for the client to try again, but not for
		// uploadpurging.age if it does not (see the lifecycle).
		r.chunkFailed(context.WithoutCancel(ctx), repo, id, head, err)
	}
	return size, err
}

func (r *Registry) finishUpload(ctx context.Context, repo, id string, head uploadHead, d digest.Digest, body io.Reader, start int64) (int64, error) {
	if st, ok := driver.As[driver.Stager](r.d); ok && body != nil && head.Size == 0 && start <= 0 &&
		d.Algorithm() == uploadHashAlg && !r.appendInPlace {
		return r.putWhole(ctx, st, repo, id, d, body)
	}
	chain, err := r.sessionChain(ctx, repo, id, head)
	if err != nil {
		return 0, err
	}
	size, unsynced := head.Size, head.Unsynced
	h, err := head.hasher()
	if err != nil {
		return 0, err
	}
	if body != nil {
		c, err := r.writeChunk(ctx, repo, id, head, body, start)
		if err != nil {
			return 0, err
		}
		if c.rec.name != "" {
			if n := len(chain); n > 0 && chain[n-1].dataName() == c.rec.dataName() {
				chain[n-1] = c.rec // appended to the tip's object
			} else {
				chain = append(chain, c.rec)
			}
			size, h = c.rec.end, c.h
			unsynced = joinEpochs(unsynced, c.unsynced)
		}
	}
	if d.Algorithm() == uploadHashAlg {
		if got := digest.NewDigest(uploadHashAlg, h); got != d {
			r.cancelUpload(ctx, repo, id)
			return 0, fmt.Errorf("%w: upload has %s, client said %s", ErrDigestInvalid, got, d)
		}
	}
	// Bytes that joined unsynced under another epoch may have been lost.
	suspect := unsynced != "" && unsynced != r.epoch
	toSeal, err := r.commitUpload(ctx, repo, id, d, size, chain, suspect)
	if err != nil {
		return 0, err
	}
	if toSeal != nil {
		// Last: a seal's writes hold up every metadata change made while
		// the journal commits them (ext4), the request's own included.
		r.sealLater(toSeal)
	}
	return size, nil
}

// putWhole stores a blob sent whole, its digest named first (a monolithic
// PUT, or a POST with ?digest=), on a driver that stages writes: straight
// to its blob path, shown by the Commit that follows the digest's check.
// The session holds nothing of it. Elsewhere the blob's bytes would be
// written to a chunk object first and moved, which on an object store is a
// second write of every byte (a server-side copy). Commit replaces a blob
// already there with the same bytes, and it comes after the GC journal
// record, so no sweep round that could miss the new blob is deleting.
func (r *Registry) putWhole(ctx context.Context, st driver.Stager, repo, id string, d digest.Digest, body io.Reader) (int64, error) {
	// A deduplicated blob is stored as its recipe: the bytes are only
	// checked, not written again beside it (see commitUpload).
	dedupd, err := r.exists(ctx, layout.BlobRecipe(d))
	if err != nil {
		return 0, err
	}
	var w driver.FileWriter = discardWriter{}
	if !dedupd {
		if w, err = st.StageWriter(ctx, layout.BlobData(d)); err != nil {
			return 0, err
		}
	}
	h := uploadHashAlg.Hash()
	n, err := copyHashing(w, h, body)
	if err != nil {
		w.Cancel(context.WithoutCancel(ctx))
		return 0, fmt.Errorf("upload %s: %w", id, err)
	}
	if got := digest.NewDigest(uploadHashAlg, h); got != d {
		w.Cancel(context.WithoutCancel(ctx))
		r.cancelUpload(ctx, repo, id)
		return 0, fmt.Errorf("%w: upload has %s, client said %s", ErrDigestInvalid, got, d)
	}
	done, err := r.protectForGC(ctx, &fence.Record{Repo: repo, Digest: d})
	if err != nil {
		w.Cancel(context.WithoutCancel(ctx))
		return 0, err
	}
	defer done()
	if err := w.Commit(ctx); err != nil {
		w.Cancel(context.WithoutCancel(ctx))
		return 0, err
	}
	if err := r.writeLink(ctx, layout.LayerLink(repo, d), d); err != nil {
		return 0, err
	}
	r.cancelUpload(ctx, repo, id)
	return n, nil
}

// sessionChain returns the chunks head names, in order, from the session's
// records: the path of records from offset 0 to head.Size whose chain id is
// head.Chain. Records of chunks that lost a race (a fork written by another
// node) lie off that path.
func (r *Registry) sessionChain(ctx context.Context, repo, id string, head uploadHead) ([]chunkRecord, error) {
	if head.Size == 0 {
		return nil, nil
	}
	names, err := r.d.List(ctx, layout.UploadChunksDir(repo, id))
	if err != nil {
		return nil, fmt.Errorf("upload %s: list chunks: %w", id, err)
	}
	byStart := make(map[int64][]chunkRecord)
	for _, p := range names {
		if c, ok := parseChunkRecord(path.Base(p)); ok {
			byStart[c.start] = append(byStart[c.start], c)
		}
	}
	// An appended object has a record per chunk, all starting where it
	// does; the chain holds its newest, so the longest is tried first.
	for _, cs := range byStart {
		slices.SortFunc(cs, func(a, b chunkRecord) int { return cmp.Compare(b.end, a.end) })
	}
	// Depth-first from offset 0. Without forks this is one pass; visits
	// are bounded so forks cannot make it explode.
	var (
		chain  []chunkRecord
		visits int
	)
	var walk func(off int64, prev string) bool
	walk = func(off int64, prev string) bool {
		if off == head.Size {
			return prev == head.Chain
		}
		for _, c := range byStart[off] {
			if visits++; visits > 4*len(names)+16 || c.end > head.Size {
				continue
			}
			chain = append(chain, c)
			if walk(c.end, chainID(prev, c.name)) {
				return true
			}
			chain = chain[:len(chain)-1]
		}
		return false
	}
	if !walk(0, "") {
		return nil, fmt.Errorf("%w: session %s: its chunks do not form the chain its head names", ErrUploadInvalid, id)
	}
	return chain, nil
}

// commitUpload puts the verified chunks in place as blob d unless the blob
// is already there, links it into repo, and removes the session. A digest
// other than sha256, or a suspect session's bytes, are verified here, while
// the chunks are read. It returns the blob to seal when it was stored
// without a sync (see seal.go).
func (r *Registry) commitUpload(ctx context.Context, repo, id string, d digest.Digest, size int64, chain []chunkRecord, suspect bool) (*sealEntry, error) {
	// An existing blob may be one GC is about to delete (see package fence).
	done, err := r.protectForGC(ctx, &fence.Record{Repo: repo, Digest: d})
	if err != nil {
		return nil, err
	}
	defer done()
	// A blob deduplicated since (a recipe, no data) is stored: its
	// verified recipe serves it, and a second, intact copy would stay
	// beside it uncounted.
	have, err := r.blobExists(ctx, d)
	if err != nil {
		return nil, err
	}
	var unsynced *sealEntry
	if !have {
		if unsynced, err = r.placeBlob(ctx, repo, id, d, size, chain, suspect); err != nil {
			return nil, err
		}
	} else if d.Algorithm() != uploadHashAlg {
		// Not stored anew, but the client's digest must still be right.
		if err := r.verifyChunks(ctx, repo, id, d, chain); err != nil {
			return nil, err
		}
	}
	if unsynced != nil {
		if err := r.cache.PutCached(ctx, unsynced.link, []byte(d)); err != nil {
			r.sealLater(unsynced) // the blob is in place: it is sealed all the same
			return nil, err
		}
	} else if err := r.writeLink(ctx, layout.LayerLink(repo, d), d); err != nil {
		return nil, err
	}
	r.cancelUpload(ctx, repo, id)
	return unsynced, nil
}

// placeBlob writes blob d's data from the chain: the one chunk is moved,
// without a sync where blobs are sealed later (the returned entry, nil
// otherwise; see seal.go), else synced first; several are joined into place
// on the storage service where it can (driver.Concatenator), or else copied
// into a new object first, as is the chunk of a suspect session, whose
// bytes are verified on the way.
func (r *Registry) placeBlob(ctx context.Context, repo, id string, d digest.Digest, size int64, chain []chunkRecord, suspect bool) (*sealEntry, error) {
	dst := layout.BlobData(d)
	switch {
	case size == 0:
		if d.Algorithm() != uploadHashAlg && d.Algorithm().FromBytes(nil) != d {
			r.cancelUpload(ctx, repo, id)
			return nil, fmt.Errorf("%w: upload is empty, client said %s", ErrDigestInvalid, d)
		}
		return nil, r.d.PutContent(ctx, dst, nil)
	case len(chain) == 1 && d.Algorithm() == uploadHashAlg && !suspect && r.movable(ctx, repo, id, chain[0]):
		src := layout.UploadChunk(repo, id, chain[0].dataName())
		if r.seals != nil {
			return r.placeUnsynced(ctx, repo, id, d, src)
		}
		if r.cache != nil {
			if err := r.cache.Sync(ctx, src); err != nil {
				return nil, err
			}
		}
		return nil, r.moveIntoPlace(ctx, id, src, dst)
	}
	return nil, r.assembleBlob(ctx, repo, id, d, size, chain, suspect)
}

// assembleBlob writes blob d's data from several chunks, or from one that
// must be verified: joined on the storage service where it can, else
// copied, and verified on the way where asked, into a new object moved
// into place.
func (r *Registry) assembleBlob(ctx context.Context, repo, id string, d digest.Digest, size int64, chain []chunkRecord, suspect bool) error {
	dst := layout.BlobData(d)
	verify := d.Algorithm() != uploadHashAlg || suspect
	if c, ok := driver.As[driver.Concatenator](r.d); ok && !verify {
		err := c.Concat(ctx, dst, chunkRanges(repo, id, chain))
		if !errors.Is(err, errors.ErrUnsupported) {
			return r.placed(ctx, id, dst, err)
		}
	}
	tmp := layout.UploadChunk(repo, id, "assembled-"+newChunkName(r.owner, 0))
	w, err := r.d.Writer(ctx, tmp, false)
	if err != nil {
		return err
	}
	var h hash.Hash
	if verify {
		h = d.Algorithm().Hash()
	}
	if err := r.copyChunks(ctx, repo, id, w, h, chain); err != nil {
		w.Cancel(context.WithoutCancel(ctx))
		return err
	}
	if w.Size() != size {
		w.Cancel(context.WithoutCancel(ctx))
		return fmt.Errorf("upload %s: chunks hold %d bytes, want %d", id, w.Size(), size)
	}
	if h != nil {
		if got := digest.NewDigest(d.Algorithm(), h); got != d {
			w.Cancel(context.WithoutCancel(ctx))
			r.cancelUpload(ctx, repo, id)
			return fmt.Errorf("%w: upload has %s, client said %s", ErrDigestInvalid, got, d)
		}
	}
	if err := w.Commit(ctx); err != nil {
		w.Cancel(context.WithoutCancel(ctx))
		return err
	}
	if err := w.Close(); err != nil {
		return err
	}
	return r.moveIntoPlace(ctx, id, tmp, dst)
}

// movable reports whether the object of chunk c, the whole chain, can be
// moved into blobs/ as it is: no one can still write to it, and it holds
// exactly c's bytes. Where nothing appends in place no one writes to an
// object after its record; where objects are appended to, only their owner
// does, so only an object of this Registry, which holds the session, is
// moved.
func (r *Registry) movable(ctx context.Context, repo, id string, c chunkRecord) bool {
	if !r.appendInPlace {
		return true
	}
	if c.owner() != r.owner {
		return false
	}
	fi, err := driver.StatFile(ctx, r.d, layout.UploadChunk(repo, id, c.dataName()))
	return err == nil && fi.Size == c.end-c.start
}

// moveIntoPlace moves a finished object to blob path dst. When another
// commit of the same session (on another node) moved it first, the blob is
// there and that is success.
func (r *Registry) moveIntoPlace(ctx context.Context, id, src, dst string) error {
	return r.placed(ctx, id, dst, r.d.Move(ctx, src, dst))
}

// placed is the outcome of putting session id's bytes at blob path dst
// with err the storage's answer: a session's object missing means that
// another commit of it (on another node) placed the blob first, which is
// success when the blob is there.
func (r *Registry) placed(ctx context.Context, id, dst string, err error) error {
	if errors.Is(err, driver.ErrNotFound) {
		if ok, serr := r.exists(ctx, dst); serr == nil && ok {
			return nil
		}
		return fmt.Errorf("%w: session %s was committed or cancelled meanwhile", ErrUploadUnknown, id)
	}
	if err != nil {
		return fmt.Errorf("commit upload %s: %w", id, err)
	}
	return nil
}

// chunkRanges names the bytes of the chain's chunk objects, in order.
func chunkRanges(repo, id string, chain []chunkRecord) []driver.FileRange {
	rs := make([]driver.FileRange, len(chain))
	for i, c := range chain {
		rs[i] = driver.FileRange{Path: layout.UploadChunk(repo, id, c.dataName()), Length: c.end - c.start}
	}
	return rs
}

// copyChunks writes the chain's chunk objects to w in order, feeding h too
// when it is not nil.
func (r *Registry) copyChunks(ctx context.Context, repo, id string, w io.Writer, h hash.Hash, chain []chunkRecord) error {
	if h != nil {
		w = io.MultiWriter(w, h)
	}
	for _, c := range chain {
		rc, err := r.d.Reader(ctx, layout.UploadChunk(repo, id, c.dataName()), 0)
		if errors.Is(err, driver.ErrNotFound) {
			return fmt.Errorf("%w: session %s was committed or cancelled meanwhile", ErrUploadUnknown, id)
		}
		if err != nil {
			return err
		}
		n, err := io.Copy(w, io.LimitReader(rc, c.end-c.start))
		rc.Close()
		if err != nil {
			return fmt.Errorf("upload %s: read chunk: %w", id, err)
		}
		if n != c.end-c.start {
			return fmt.Errorf("upload %s: chunk %s holds %d bytes, its record says %d", id, c.dataName(), n, c.end-c.start)
		}
	}
	return nil
}

// verifyChunks checks a non-sha256 digest against the chain's bytes.
func (r *Registry) verifyChunks(ctx context.Context, repo, id string, d digest.Digest, chain []chunkRecord) error {
	h := d.Algorithm().Hash()
	if err := r.copyChunks(ctx, repo, id, io.Discard, h, chain); err != nil {
		return err
	}
	if got := digest.NewDigest(d.Algorithm(), h); got != d {
		r.cancelUpload(ctx, repo, id)
		return fmt.Errorf("%w: upload has %s, client said %s", ErrDigestInvalid, got, d)
	}
	return nil
}

// discardWriter is a FileWriter that keeps nothing: a whole blob whose
// bytes are stored already (as a recipe) is only hashed on its way.
type discardWriter struct{}

func (discardWriter) Write(p []byte) (int, error)  { return len(p), nil }
func (discardWriter) Close() error                 { return nil }
func (discardWriter) Size() int64                  { return 0 }
func (discardWriter) Cancel(context.Context) error { return nil }
func (discardWriter) Commit(context.Context) error { return nil }
