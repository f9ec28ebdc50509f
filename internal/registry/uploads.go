package registry

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding"
	"errors"
	"fmt"
	"hash"
	"io"
	"path"
	"strings"
	"time"

	"github.com/opencontainers/go-digest"

	"github.com/cairn-registry/cairn/internal/storage/driver"
)

// Uploads: a session is _uploads/<id>/ holding startedat (RFC 3339), data
// (the bytes so far) and hashstates/sha256/<offset> (the sha256 state after
// offset bytes). Saving the hash state after each chunk means finishing an
// upload never re-reads it. Uploads hash with sha256; an upload finished
// with another algorithm's digest is re-read once to verify.

// uploadHashAlg is the algorithm whose running state is kept.
const uploadHashAlg = digest.SHA256

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

// StartUpload opens a new upload session in repo and returns its id.
func (r *Registry) StartUpload(ctx context.Context, repo string) (string, error) {
	id := newUploadID()
	started := time.Now().UTC().Format(time.RFC3339Nano)
	if err := r.d.PutContent(ctx, uploadStartedAtPath(repo, id), []byte(started)); err != nil {
		return "", err
	}
	return id, nil
}

// checkUpload fails with ErrUploadUnknown unless the session exists.
func (r *Registry) checkUpload(ctx context.Context, repo, id string) error {
	if !validUploadID(id) {
		return fmt.Errorf("%w: %q", ErrUploadUnknown, id)
	}
	ok, err := r.exists(ctx, uploadStartedAtPath(repo, id))
	if err != nil {
		return err
	}
	if !ok {
		return fmt.Errorf("%w: %s", ErrUploadUnknown, id)
	}
	return nil
}

// UploadSize returns how many bytes upload id holds.
func (r *Registry) UploadSize(ctx context.Context, repo, id string) (int64, error) {
	if err := r.checkUpload(ctx, repo, id); err != nil {
		return 0, err
	}
	fi, err := r.d.Stat(ctx, uploadDataPath(repo, id))
	if errors.Is(err, driver.ErrNotFound) {
		return 0, nil
	}
	if err != nil {
		return 0, err
	}
	return fi.Size, nil
}

// AppendUpload appends body to upload id. start is the offset the client
// says the chunk begins at, or -1 for a streamed chunk; a chunk that does not
// continue the upload fails with a *RangeError. It returns the new size.
func (r *Registry) AppendUpload(ctx context.Context, repo, id string, body io.Reader, start int64) (int64, error) {
	if err := r.checkUpload(ctx, repo, id); err != nil {
		return 0, err
	}
	size, _, err := r.appendUpload(ctx, repo, id, body, start, true)
	return size, err
}

// appendUpload writes body at the end of the upload and returns the new size
// and the sha256 state over everything written. saveState keeps that state
// for the next chunk; the last chunk of a finishing upload has no next.
func (r *Registry) appendUpload(ctx context.Context, repo, id string, body io.Reader, start int64, saveState bool) (int64, hash.Hash, error) {
	dataPath := uploadDataPath(repo, id)
	w, err := r.d.Writer(ctx, dataPath, true)
	if errors.Is(err, driver.ErrNotFound) {
		w, err = r.d.Writer(ctx, dataPath, false)
	}
	if err != nil {
		return 0, nil, err
	}
	offset := w.Size()
	if start >= 0 && start != offset {
		w.Close()
		return 0, nil, &RangeError{Size: offset}
	}
	h, err := r.uploadHashAt(ctx, repo, id, offset)
	if err != nil {
		w.Close()
		return 0, nil, err
	}
	n, err := copyHashing(w, h, body)
	if err != nil {
		// Keep what reached storage so the client can resume at its Range;
		// the hash state for the partial offset is not saved, so a resume
		// rebuilds it from the data.
		w.Close()
		return 0, nil, fmt.Errorf("upload %s: %w", id, err)
	}
	if err := w.Commit(ctx); err != nil {
		return 0, nil, err
	}
	if err := w.Close(); err != nil {
		return 0, nil, err
	}
	size := offset + n
	if n > 0 && saveState {
		if err := r.saveHashState(ctx, repo, id, h, size); err != nil {
			return 0, nil, err
		}
	}
	return size, h, nil
}

// uploadHashAt returns the sha256 state after offset bytes of the upload:
// from the saved state when there is one, else by hashing the data again.
func (r *Registry) uploadHashAt(ctx context.Context, repo, id string, offset int64) (hash.Hash, error) {
	h := sha256.New()
	if offset == 0 {
		return h, nil
	}
	state, err := r.d.GetContent(ctx, uploadHashStatePath(repo, id, uploadHashAlg, offset))
	if err == nil {
		if err := h.(encoding.BinaryUnmarshaler).UnmarshalBinary(state); err == nil {
			return h, nil
		}
		h.Reset()
	} else if !errors.Is(err, driver.ErrNotFound) {
		return nil, err
	}
	rc, err := r.d.Reader(ctx, uploadDataPath(repo, id), 0)
	if err != nil {
		return nil, err
	}
	defer rc.Close()
	if _, err := io.CopyN(h, rc, offset); err != nil {
		return nil, fmt.Errorf("rehash upload %s: %w", id, err)
	}
	return h, nil
}

func (r *Registry) saveHashState(ctx context.Context, repo, id string, h hash.Hash, size int64) error {
	state, err := h.(encoding.BinaryMarshaler).MarshalBinary()
	if err != nil {
		return err
	}
	return r.d.PutContent(ctx, uploadHashStatePath(repo, id, uploadHashAlg, size), state)
}

// FinishUpload appends body (nil when the client sent no last chunk),
// verifies the whole upload against d, moves it into the blob store and
// links it into repo. A digest mismatch cancels the upload.
func (r *Registry) FinishUpload(ctx context.Context, repo, id string, d digest.Digest, body io.Reader, start int64) (int64, error) {
	if err := r.checkUpload(ctx, repo, id); err != nil {
		return 0, err
	}
	var size int64
	var h hash.Hash
	var err error
	if body != nil {
		size, h, err = r.appendUpload(ctx, repo, id, body, start, false)
		if err != nil {
			return 0, err
		}
	} else {
		fi, err := r.d.Stat(ctx, uploadDataPath(repo, id))
		switch {
		case errors.Is(err, driver.ErrNotFound):
			size = 0
		case err != nil:
			return 0, err
		default:
			size = fi.Size
		}
	}
	got, err := r.uploadDigest(ctx, repo, id, d.Algorithm(), size, h)
	if err != nil {
		return 0, err
	}
	if got != d {
		r.cancelUpload(ctx, repo, id)
		return 0, fmt.Errorf("%w: upload has %s, client said %s", ErrDigestInvalid, got, d)
	}
	if err := r.commitUpload(ctx, repo, id, d, size); err != nil {
		return 0, err
	}
	return size, nil
}

// uploadDigest computes the digest of the upload's size bytes with alg,
// reusing h (the running sha256) when it covers them.
func (r *Registry) uploadDigest(ctx context.Context, repo, id string, alg digest.Algorithm, size int64, h hash.Hash) (digest.Digest, error) {
	if alg == uploadHashAlg {
		if h == nil {
			var err error
			if h, err = r.uploadHashAt(ctx, repo, id, size); err != nil {
				return "", err
			}
		}
		return digest.NewDigest(alg, h), nil
	}
	hh := alg.Hash()
	if size > 0 {
		rc, err := r.d.Reader(ctx, uploadDataPath(repo, id), 0)
		if err != nil {
			return "", err
		}
		defer rc.Close()
		if _, err := io.CopyN(hh, rc, size); err != nil {
			return "", fmt.Errorf("hash upload %s: %w", id, err)
		}
	}
	return digest.NewDigest(alg, hh), nil
}

// commitUpload moves verified upload data into blobs/ (atomically) unless the
// blob is already there, links it into repo, and removes the session.
func (r *Registry) commitUpload(ctx context.Context, repo, id string, d digest.Digest, size int64) error {
	// An existing blob may be one GC is about to delete (see layout.go).
	done, err := r.protectForGC(ctx, &JournalRecord{Repo: repo, Digest: d})
	if err != nil {
		return err
	}
	defer done()
	have, err := r.exists(ctx, blobDataPath(d))
	if err != nil {
		return err
	}
	if !have {
		if size == 0 {
			err = r.d.PutContent(ctx, blobDataPath(d), nil)
		} else {
			err = r.d.Move(ctx, uploadDataPath(repo, id), blobDataPath(d))
		}
		if err != nil {
			return fmt.Errorf("commit upload %s: %w", id, err)
		}
	}
	if err := r.writeLink(ctx, layerLinkPath(repo, d), d); err != nil {
		return err
	}
	r.cancelUpload(ctx, repo, id)
	return nil
}

// CancelUpload deletes upload id and everything written to it.
func (r *Registry) CancelUpload(ctx context.Context, repo, id string) error {
	if err := r.checkUpload(ctx, repo, id); err != nil {
		return err
	}
	return r.cancelUpload(ctx, repo, id)
}

func (r *Registry) cancelUpload(ctx context.Context, repo, id string) error {
	err := r.d.Delete(ctx, uploadPath(repo, id))
	if errors.Is(err, driver.ErrNotFound) {
		return nil
	}
	return err
}

// PurgeUploads deletes upload sessions started before olderThan in every
// repository and returns how many it deleted (or would, with dryRun). A
// session whose startedat is unreadable is purged too: nothing can finish it.
func (r *Registry) PurgeUploads(ctx context.Context, olderThan time.Time, dryRun bool) (int, error) {
	purged := 0
	var errs []error
	err := r.d.Walk(ctx, repositoriesPath(), func(fi driver.FileInfo) error {
		if err := ctx.Err(); err != nil {
			return err
		}
		if !fi.IsDir {
			return nil
		}
		switch path.Base(fi.Path) {
		case "_manifests", "_layers", "_referrers":
			return driver.ErrSkipDir
		case "_uploads":
		default:
			return nil
		}
		ids, err := r.d.List(ctx, fi.Path)
		if err != nil {
			errs = append(errs, err)
			return driver.ErrSkipDir
		}
		for _, dir := range ids {
			if r.uploadExpired(ctx, dir, olderThan) {
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

func (r *Registry) uploadExpired(ctx context.Context, dir string, olderThan time.Time) bool {
	b, err := r.d.GetContent(ctx, dir+"/startedat")
	if err != nil {
		if !errors.Is(err, driver.ErrNotFound) {
			return false
		}
		// No startedat: judge by the directory's own age.
		fi, err := r.d.Stat(ctx, dir)
		return err == nil && fi.ModTime.Before(olderThan)
	}
	started, err := time.Parse(time.RFC3339Nano, strings.TrimSpace(string(b)))
	if err != nil {
		return true
	}
	return started.Before(olderThan)
}
