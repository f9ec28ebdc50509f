package registry

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"hash"
	"io"
	"path"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/cairn-registry/cairn/internal/layout"

	"github.com/opencontainers/go-digest"

	"github.com/cairn-registry/cairn/internal/storage/driver"
)

// Lifecycle of an upload session (_uploads/<id>/):
//
//   - StartUpload writes startedat (RFC 3339). The session holds nothing.
//   - Each chunk (PATCH, or the body of the final PUT) is written to an
//     object, chunks/<start>-<owner><nonce>, where <owner> names the
//     Registry (the process) that created it. On a driver that appends in
//     place (driver.InPlaceAppender: the filesystem) a chunk that follows
//     one this Registry wrote is appended to that chunk's object, so an
//     upload from one client through one node grows one file; otherwise
//     (an object store, a session resumed after a restart or on another
//     node) the chunk gets a new object. Only once the bytes are written
//     does the chunk join the session: a record
//     chunks/<start>-<owner><nonce>-<end> (empty) says that the object
//     holds the session's bytes start..end, then head names that record,
//     the sha256 state over every byte so far, and a chain id (a hash over
//     the records from offset 0 on, an appended object's newest record
//     standing for its older ones).
//     A chunk that fails (its body cut short by the client, or a write the
//     storage refused) never joins: its object is deleted at once, so a
//     killed push or a full disk leaves none of its bytes behind, and the
//     client resumes at the Range the session held before it. Head then
//     notes when (Failed), and a session that sees no chunk join for
//     FailedUploadAge after that is purged (PurgeFailedUploads,
//     PurgeUploads) rather than after uploadpurging.age. (A chunk appended
//     to an existing object cannot be cut back off it: those bytes lie
//     past what the records cover, unused, until the commit or the purge.)
//   - Where the driver names its cache epoch (the filesystem: the boot id)
//     a chunk's bytes are not synced before they join: they are readable
//     through the page cache, the disk writes them meanwhile, and head
//     notes the epoch in Unsynced. The session's own files (startedat,
//     records, head) are not synced either (putSessionFile). A machine that restarts may lose them
//     while head (synced) still counts them, so a commit under another
//     epoch re-reads and verifies the bytes before storing them. Elsewhere
//     each chunk is committed (synced) before it joins.
//   - FinishUpload takes the chain that head names (found among the
//     records, checked by its chain id), verifies the digest from head's
//     hash state, and moves the single object (synced first), or a
//     concatenation of the objects' ranges, into blobs/: joined by the
//     storage service where it can (S3 part copies, GCS compose), so that
//     a chunked push on an object store is not downloaded and uploaded
//     again. Then it links the blob and deletes the session.
//
// Why this shape: an object is written by exactly one Registry, only ever
// at its end, and the bytes a record covers never change once the record
// exists; the chain id binds head's hash state to exactly those records.
// So nothing a client does (a PATCH still streaming while the same session
// is committed, two requests on one session on two nodes, a write that
// fails half-way) can change the bytes that land in blobs/ after they were
// verified, on any driver: a late writer only ever writes past what the
// records cover, and a commit reads only covered ranges. It moves an object
// whole only when no one can still write to it: on an object store no one
// appends, and on the filesystem only its owner does, which is the
// committing Registry itself holding the session. Within one process, at
// most one request writes a session at a time (a second one is refused
// with a RangeError); across processes the chain id keeps the commit
// correct.
//
// Uploads hash with sha256; an upload finished with another algorithm's
// digest is re-read once to verify.

// uploadHashAlg is the algorithm whose running state is kept.
const uploadHashAlg = digest.SHA256

// FailedUploadAge is how long a session whose newest chunk failed is kept
// without a further chunk before it is purged: long enough for a client to
// resume after a cut connection or an operator to free space, short enough
// that abandoned pushes do not hold storage for days.
const FailedUploadAge = 15 * time.Minute

// DefaultMaxUploadChunks bounds the chunks of one upload session (S3's
// limit on a multipart upload's parts), so that a client sending tiny
// chunks cannot make a session's commit list and copy without end.
const DefaultMaxUploadChunks = 10000

// newUploadID returns a random RFC 4122 version 4 UUID.
func newUploadID() string {
	var b [16]byte
	rand.Read(b[:])
	b[6] = b[6]&0x0f | 0x40
	b[8] = b[8]&0x3f | 0x80
	return fmt.Sprintf("%x-%x-%x-%x-%x", b[0:4], b[4:6], b[6:8], b[8:10], b[10:16])
}

// validUploadID keeps ids that come from URLs to one safe path segment.
func validUploadID(id string) bool {
	if id == "" || len(id) > 64 {
		return false
	}
	for i := 0; i < len(id); i++ {
		c := id[i]
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '-' || c == '_') {
			return false
		}
	}
	return true
}

// uploadHead is the stored head of a session: what the session holds.
type uploadHead struct {
	Size   int64  `json:"size"`
	Chunks int    `json:"chunks"`
	Tip    string `json:"tip"`   // record name of the newest chunk
	Chain  string `json:"chain"` // chain id after Tip
	// Base is the chain id before Tip's object: an append to that object
	// replaces Tip by a longer record of it, with chain id chainID(Base, ..).
	Base   string `json:"base,omitempty"`
	SHA256 []byte `json:"sha256"`
	// Unsynced is the cache epoch of bytes that joined without a sync;
	// epochMixed when chunks joined under several.
	Unsynced string `json:"unsynced,omitempty"`
	// Failed is when the newest chunk failed (RFC 3339), "" when the
	// newest chunk joined: the next chunk that joins writes head anew
	// without it.
	Failed string `json:"failed,omitempty"`
}

// epochMixed marks a session whose unsynced bytes span cache epochs.
const epochMixed = "?"

// joinEpochs is the Unsynced of bytes unsynced under a and under b.
func joinEpochs(a, b string) string {
	switch {
	case a == "" || a == b:
		return b
	case b == "":
		return a
	}
	return epochMixed
}

// chunkRecord is a chunk that joined a session, parsed from its record name
// "<start:016x>-<nonce:016x>-<end:016x>".
type chunkRecord struct {
	name       string
	start, end int64
}

// dataName is the chunk's object name, "<start>-<owner><nonce>".
func (c chunkRecord) dataName() string { return c.name[:33] }

// owner is the id of the Registry that created the chunk's object.
func (c chunkRecord) owner() string { return c.name[17:25] }

// newOwnerID returns a random id for a Registry's chunk objects: 8 hex
// digits, the first half of a chunk name's nonce.
func newOwnerID() string {
	var b [4]byte
	rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// newChunkName names a new object written by owner at offset start.
func newChunkName(owner string, start int64) string {
	var nonce [4]byte
	rand.Read(nonce[:])
	return fmt.Sprintf("%016x-%s%s", start, owner, hex.EncodeToString(nonce[:]))
}

func recordName(dataName string, end int64) string {
	return fmt.Sprintf("%s-%016x", dataName, end)
}

// parseChunkRecord parses a record name; ok is false for chunk objects and
// anything else.
func parseChunkRecord(name string) (chunkRecord, bool) {
	if len(name) != 50 || name[16] != '-' || name[33] != '-' {
		return chunkRecord{}, false
	}
	start, err1 := strconv.ParseInt(name[:16], 16, 64)
	end, err2 := strconv.ParseInt(name[34:], 16, 64)
	if err1 != nil || err2 != nil || start < 0 || end <= start {
		return chunkRecord{}, false
	}
	return chunkRecord{name: name, start: start, end: end}, true
}

// chainID extends the chain id prev by the record name.
func chainID(prev, record string) string {
	h := sha256.New()
	h.Write([]byte(prev))
	h.Write([]byte{'/'})
	h.Write([]byte(record))
	return hex.EncodeToString(h.Sum(nil))
}

// sessionLocks lets one request at a time write a session of this
// process, and remembers the sessions whose newest chunk failed here, for
// PurgeFailedUploads to look at without a walk of the store.
type sessionLocks struct {
	mu     sync.Mutex
	busy   map[string]bool
	failed map[string]failedUpload
}

// failedUpload is a session whose newest chunk failed in this process, at
// the time its head's Failed says.
type failedUpload struct {
	repo, id, at string
	when         time.Time
}

func (l *sessionLocks) noteFailed(f failedUpload) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.failed == nil {
		l.failed = make(map[string]failedUpload)
	}
	l.failed[f.repo+"/"+f.id] = f
}

// forgetFailed drops key's entry; with at != "", only the entry of that
// failure (a later one stays).
func (l *sessionLocks) forgetFailed(key, at string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if f, ok := l.failed[key]; ok && (at == "" || f.at == at) {
		delete(l.failed, key)
	}
}

// failedBefore returns the sessions that failed before t.
func (l *sessionLocks) failedBefore(t time.Time) []failedUpload {
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []failedUpload
	for _, f := range l.failed {
		if f.when.Before(t) {
			out = append(out, f)
		}
	}
	return out
}

// held reports whether a request of this process is writing key.
func (l *sessionLocks) held(key string) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.busy[key]
}

// acquire claims the session, or reports false when another request holds
// it.
func (l *sessionLocks) acquire(key string) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.busy[key] {
		return false
	}
	if l.busy == nil {
		l.busy = make(map[string]bool)
	}
	l.busy[key] = true
	return true
}

func (l *sessionLocks) release(key string) {
	l.mu.Lock()
	delete(l.busy, key)
	l.mu.Unlock()
}

// claimUpload checks that session id exists, claims it for this request
// and returns its head; the caller must call the returned release. A
// session another request is writing is refused with a busy *RangeError
// carrying the size it holds. A stored head shows that the session exists,
// so only a session no chunk has joined yet costs a look at its startedat:
// on an object store, one round trip less for every chunk after the first.
func (r *Registry) claimUpload(ctx context.Context, repo, id string) (uploadHead, func(), error) {
	if !validUploadID(id) {
		return uploadHead{}, nil, fmt.Errorf("%w: %q", ErrUploadUnknown, id)
	}
	key := repo + "/" + id
	if !r.sessions.acquire(key) {
		if err := r.checkUpload(ctx, repo, id); err != nil {
			return uploadHead{}, nil, err
		}
		size := int64(0)
		if h, err := r.readHead(ctx, repo, id); err == nil {
			size = h.Size
		}
		return uploadHead{}, nil, &RangeError{Size: size, Busy: true}
	}
	release := func() { r.sessions.release(key) }
	head, found, err := r.loadHead(ctx, repo, id)
	if err == nil && !found {
		err = r.checkUpload(ctx, repo, id)
	}
	if err != nil {
		release()
		return uploadHead{}, nil, err
	}
	return head, release, nil
}

// StartUpload opens a new upload session in repo and returns its id.
func (r *Registry) StartUpload(ctx context.Context, repo string) (string, error) {
	id := newUploadID()
	started := time.Now().UTC().Format(time.RFC3339Nano)
	if err := r.putSessionFile(ctx, layout.UploadStartedAt(repo, id), []byte(started)); err != nil {
		return "", err
	}
	return id, nil
}

// checkUpload fails with ErrUploadUnknown unless the session exists.
func (r *Registry) checkUpload(ctx context.Context, repo, id string) error {
	if !validUploadID(id) {
		return fmt.Errorf("%w: %q", ErrUploadUnknown, id)
	}
	ok, err := r.exists(ctx, layout.UploadStartedAt(repo, id))
	if err != nil {
		return err
	}
	if !ok {
		return fmt.Errorf("%w: %s", ErrUploadUnknown, id)
	}
	return nil
}

// readHead returns the session's head; an empty head when no chunk has
// joined yet.
func (r *Registry) readHead(ctx context.Context, repo, id string) (uploadHead, error) {
	h, _, err := r.loadHead(ctx, repo, id)
	return h, err
}

// loadHead returns the session's head and whether one is stored.
func (r *Registry) loadHead(ctx context.Context, repo, id string) (uploadHead, bool, error) {
	b, err := r.d.GetContent(ctx, layout.UploadHead(repo, id))
	if errors.Is(err, driver.ErrNotFound) {
		return uploadHead{}, false, nil
	}
	if err != nil {
		return uploadHead{}, false, err
	}
	var h uploadHead
	if err := json.Unmarshal(b, &h); err != nil || h.Size < 0 || (h.Size > 0) != (h.Tip != "") {
		return uploadHead{}, false, fmt.Errorf("%w: session %s has a malformed head", ErrUploadInvalid, id)
	}
	return h, true, nil
}

// hasher returns the sha256 state after the head's bytes.
func (h uploadHead) hasher() (hash.Hash, error) {
	s := sha256.New()
	if h.Size == 0 {
		return s, nil
	}
	if err := s.(encoding.BinaryUnmarshaler).UnmarshalBinary(h.SHA256); err != nil {
		return nil, fmt.Errorf("%w: session head hash state: %v", ErrUploadInvalid, err)
	}
	return s, nil
}

// UploadSize returns how many bytes upload id holds.
func (r *Registry) UploadSize(ctx context.Context, repo, id string) (int64, error) {
	if err := r.checkUpload(ctx, repo, id); err != nil {
		return 0, err
	}
	h, err := r.readHead(ctx, repo, id)
	return h.Size, err
}

// AppendUpload appends body to upload id. start is the offset the client
// says the chunk begins at, or -1 for a streamed chunk; a chunk that does not
// continue the upload fails with a *RangeError. It returns the new size.
// When the body fails part-way, or the storage refuses it, nothing of the
// chunk is kept: the session holds what it held before, and the error is
// returned.
func (r *Registry) AppendUpload(ctx context.Context, repo, id string, body io.Reader, start int64) (int64, error) {
	head, release, err := r.claimUpload(ctx, repo, id)
	if err != nil {
		return 0, err
	}
	defer release()
	// A client that went away has cancelled ctx; what follows its chunk
	// must still be done.
	bg := context.WithoutCancel(ctx)
	c, err := r.writeChunk(ctx, repo, id, head, body, start)
	if err != nil {
		r.chunkFailed(bg, repo, id, head, err)
		return head.Size, err
	}
	if c.rec.name == "" {
		return head.Size, nil
	}
	if err := r.publishChunk(bg, repo, id, head, c); err != nil {
		r.unwriteChunk(bg, repo, id, head, c)
		r.chunkFailed(bg, repo, id, head, err)
		return head.Size, err
	}
	if head.Failed != "" {
		r.sessions.forgetFailed(repo+"/"+id, "")
	}
	return c.rec.end, nil
}

// unwriteChunk deletes what chunk c wrote when it could not join: its
// object when it is new (an appended one holds earlier chunks too), and
// its record, which lies off head's chain either way.
func (r *Registry) unwriteChunk(ctx context.Context, repo, id string, head uploadHead, c writtenChunk) {
	paths := []string{layout.UploadChunk(repo, id, c.rec.name)}
	if c.rec.start == head.Size {
		paths = append(paths, layout.UploadChunk(repo, id, c.rec.dataName()))
	}
	r.d.DeleteFiles(ctx, paths) // what stays is purged with the session
}

// chunkFailed notes in head that the session's newest chunk failed with
// err, so that the session is purged once FailedUploadAge passes without a
// further chunk. A chunk refused before anything was written (out of
// order, too many chunks) is the client's mistake, not a failure; and when
// the note cannot be written (the storage is full or read-only), the
// session waits for uploadpurging.age.
func (r *Registry) chunkFailed(ctx context.Context, repo, id string, head uploadHead, err error) {
	var re *RangeError
	if errors.As(err, &re) || errors.Is(err, ErrUploadInvalid) || errors.Is(err, ErrUploadUnknown) || errors.Is(err, ErrDigestInvalid) {
		return
	}
	now := time.Now().UTC()
	head.Failed = now.Format(time.RFC3339Nano)
	b, jerr := json.Marshal(head)
	if jerr != nil || r.putSessionFile(ctx, layout.UploadHead(repo, id), b) != nil {
		return
	}
	r.sessions.noteFailed(failedUpload{repo: repo, id: id, at: head.Failed, when: now})
}

// writtenChunk is a chunk written by writeChunk, not yet published.
type writtenChunk struct {
	rec      chunkRecord // name "" when nothing was written
	h        hash.Hash   // sha256 over the session's bytes through this chunk
	base     string      // chain id before rec's object
	unsynced string      // the cache epoch when the bytes were not synced
}

// writeChunk writes body as a new chunk object after head's bytes. It
// returns an empty writtenChunk when body was empty or nothing of it could
// be kept.
func (r *Registry) writeChunk(ctx context.Context, repo, id string, head uploadHead, body io.Reader, start int64) (writtenChunk, error) {
	if start >= 0 && start != head.Size {
		return writtenChunk{}, &RangeError{Size: head.Size}
	}
	if head.Chunks >= r.opts.MaxUploadChunks {
		return writtenChunk{}, fmt.Errorf("%w: more than %d chunks in one upload", ErrUploadInvalid, r.opts.MaxUploadChunks)
	}
	h, err := head.hasher()
	if err != nil {
		return writtenChunk{}, err
	}
	cw, err := r.chunkWriter(ctx, repo, id, head)
	if err != nil {
		return writtenChunk{}, err
	}
	w := cw.w
	n, copyErr := copyHashing(w, h, body)
	if copyErr != nil {
		// Cut short or refused: keep nothing (see the lifecycle), so that
		// a full disk gets the space back at once.
		cw.drop(context.WithoutCancel(ctx))
		return writtenChunk{}, fmt.Errorf("upload %s: %w", id, copyErr)
	}
	if n == 0 {
		cw.drop(context.WithoutCancel(ctx))
		return writtenChunk{}, nil
	}
	unsynced := ""
	if r.epoch != "" {
		// Closed, not synced: see the lifecycle above.
		unsynced = r.epoch
	} else if err := w.Commit(context.WithoutCancel(ctx)); err != nil {
		cw.drop(context.WithoutCancel(ctx))
		return writtenChunk{}, err
	}
	if err := w.Close(); err != nil {
		cw.drop(context.WithoutCancel(ctx))
		return writtenChunk{}, err
	}
	end := head.Size + n
	return writtenChunk{rec: chunkRecord{name: recordName(cw.name, end), start: cw.start, end: end}, h: h, base: cw.base, unsynced: unsynced}, nil
}

// chunkTarget is where writeChunk writes: an object, new or appended to.
type chunkTarget struct {
	w        driver.FileWriter
	name     string // the object's name
	start    int64  // the session offset of the object's first byte
	base     string // chain id before the object
	appended bool
}

// drop ends a write that is not kept. A new object is removed; an appended
// one keeps the bytes its records cover, and whatever this writer added
// past them makes its size disagree with head, so no later chunk appends
// to it and no commit moves it.
func (t chunkTarget) drop(ctx context.Context) {
	if t.appended {
		t.w.Close()
		return
	}
	t.w.Cancel(ctx)
}

// chunkWriter opens where the chunk after head goes: head's tip object,
// appended to in place, when this Registry created it on a driver that
// appends in place and the object holds exactly the bytes its record
// covers; otherwise a new object.
func (r *Registry) chunkWriter(ctx context.Context, repo, id string, head uploadHead) (chunkTarget, error) {
	if r.appendInPlace && head.Tip != "" {
		tip, ok := parseChunkRecord(head.Tip)
		if ok && tip.end == head.Size && tip.owner() == r.owner && chainID(head.Base, head.Tip) == head.Chain {
			w, err := r.d.Writer(ctx, layout.UploadChunk(repo, id, tip.dataName()), true)
			if err == nil && w.Size() == tip.end-tip.start {
				return chunkTarget{w: w, name: tip.dataName(), start: tip.start, base: head.Base, appended: true}, nil
			}
			if err == nil {
				w.Close()
			}
			// The object is gone or holds bytes of a failed write.
		}
	}
	name := newChunkName(r.owner, head.Size)
	w, err := r.d.Writer(ctx, layout.UploadChunk(repo, id, name), false)
	if err != nil {
		return chunkTarget{}, err
	}
	return chunkTarget{w: w, name: name, start: head.Size, base: head.Chain}, nil
}

// publishChunk makes chunk c part of the session: its record, then head.
func (r *Registry) publishChunk(ctx context.Context, repo, id string, head uploadHead, c writtenChunk) error {
	state, err := c.h.(encoding.BinaryMarshaler).MarshalBinary()
	if err != nil {
		return err
	}
	if err := r.putSessionFile(ctx, layout.UploadChunk(repo, id, c.rec.name), nil); err != nil {
		return err
	}
	next := uploadHead{
		Size:     c.rec.end,
		Chunks:   head.Chunks + 1,
		Tip:      c.rec.name,
		Chain:    chainID(c.base, c.rec.name),
		Base:     c.base,
		SHA256:   state,
		Unsynced: joinEpochs(head.Unsynced, c.unsynced),
	}
	b, err := json.Marshal(next)
	if err != nil {
		return err
	}
	return r.putSessionFile(ctx, layout.UploadHead(repo, id), b)
}

// putSessionFile stores one of a session's own files (startedat, a chunk's
// record, head). Where chunks join unsynced (a cache epoch is known), so
// do these: a restart that loses them loses the chunks with them, and a
// commit under another epoch verifies what is left; a sync of each would
// instead wait for the chunk's bytes (see driver.InPlaceAppender).
func (r *Registry) putSessionFile(ctx context.Context, p string, content []byte) error {
	if r.cache != nil {
		return r.cache.PutCached(ctx, p, content)
	}
	return r.d.PutContent(ctx, p, content)
}

// CancelUpload deletes upload id and everything written to it.
func (r *Registry) CancelUpload(ctx context.Context, repo, id string) error {
	_, release, err := r.claimUpload(ctx, repo, id)
	if err != nil {
		return err
	}
	defer release()
	return r.cancelUpload(ctx, repo, id)
}

func (r *Registry) cancelUpload(ctx context.Context, repo, id string) error {
	r.sessions.forgetFailed(repo+"/"+id, "")
	err := r.d.Delete(ctx, layout.UploadDir(repo, id))
	if errors.Is(err, driver.ErrNotFound) {
		return nil
	}
	return err
}

// PurgeFailedUploads deletes the sessions whose newest chunk failed in
// this process before failedBefore with no chunk since, and returns how
// many it deleted (or would, with dryRun). It looks only at the sessions
// this process saw fail, so it is cheap enough to run every minute; those
// of another process, or of one that restarted, are left to PurgeUploads.
// A session a request is writing is not abandoned and is kept.
func (r *Registry) PurgeFailedUploads(ctx context.Context, failedBefore time.Time, dryRun bool) (int, error) {
	purged := 0
	var errs []error
	for _, f := range r.sessions.failedBefore(failedBefore) {
		if err := ctx.Err(); err != nil {
			return purged, err
		}
		key := f.repo + "/" + f.id
		if !r.sessions.acquire(key) {
			continue
		}
		head, found, err := r.loadHead(ctx, f.repo, f.id)
		switch {
		case err != nil:
			errs = append(errs, err) // tried again next time
		case !found || head.Failed != f.at:
			// Gone, or a chunk joined (or failed again) since.
			r.sessions.forgetFailed(key, f.at)
		case dryRun:
			purged++
			r.sessions.forgetFailed(key, f.at) // counted once
		default:
			if err := r.cancelUpload(ctx, f.repo, f.id); err != nil {
				errs = append(errs, err)
			} else {
				purged++
			}
		}
		r.sessions.release(key)
	}
	return purged, errors.Join(errs...)
}

// PurgeUploads deletes upload sessions started before olderThan in every
// repository, and those whose newest chunk failed before failedBefore with
// no chunk since (zero: none), and returns how many it deleted (or would,
// with dryRun). A session whose startedat is unreadable is purged too:
// nothing can finish it.
func (r *Registry) PurgeUploads(ctx context.Context, olderThan, failedBefore time.Time, dryRun bool) (int, error) {
	purged := 0
	var errs []error
	err := r.d.Walk(ctx, layout.RepositoriesDir, func(fi driver.FileInfo) error {
		if err := ctx.Err(); err != nil {
			return err
		}
		if !fi.IsDir {
			return nil
		}
		repo, sub, ok := layout.SplitRepoDir(fi.Path)
		switch {
		case !ok:
			return nil // a component of a repository name: go on down
		case sub == layout.ManifestsSubdir || sub == layout.LayersSubdir || sub == layout.ReferrersSubdir:
			return driver.ErrSkipDir
		case sub != layout.UploadsSubdir:
			return nil
		}
		ids, err := r.d.List(ctx, fi.Path)
		if err != nil {
			errs = append(errs, err)
			return driver.ErrSkipDir
		}
		for _, dir := range ids {
			id := path.Base(dir)
			if r.uploadExpired(ctx, repo, id, olderThan) || r.uploadFailed(ctx, repo, id, failedBefore) {
				purged++
				if !dryRun {
					if err := r.d.Delete(ctx, dir); err != nil && !errors.Is(err, driver.ErrNotFound) {
						errs = append(errs, err)
					}
				}
			}
		}
		return driver.ErrSkipDir
	})
	if errors.Is(err, driver.ErrNotFound) {
		err = nil
	}
	return purged, errors.Join(append(errs, err)...)
}

// uploadFailed reports a session whose head says its newest chunk failed
// before failedBefore, unless a request of this process is writing it.
func (r *Registry) uploadFailed(ctx context.Context, repo, id string, failedBefore time.Time) bool {
	if failedBefore.IsZero() || r.sessions.held(repo+"/"+id) {
		return false
	}
	h, found, err := r.loadHead(ctx, repo, id)
	if err != nil || !found || h.Failed == "" {
		return false
	}
	t, err := time.Parse(time.RFC3339Nano, h.Failed)
	return err == nil && t.Before(failedBefore)
}

func (r *Registry) uploadExpired(ctx context.Context, repo, id string, olderThan time.Time) bool {
	b, err := r.d.GetContent(ctx, layout.UploadStartedAt(repo, id))
	if err != nil {
		if !errors.Is(err, driver.ErrNotFound) {
			return false
		}
		// No startedat: judge by the directory's own age.
		fi, err := r.d.Stat(ctx, layout.UploadDir(repo, id))
		return err == nil && fi.ModTime.Before(olderThan)
	}
	started, err := time.Parse(time.RFC3339Nano, strings.TrimSpace(string(b)))
	if err != nil {
		return true
	}
	return started.Before(olderThan)
}
