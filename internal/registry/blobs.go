package registry

import (
	"context"
	"errors"
	"fmt"
	"io"

	"github.com/cairn-registry/cairn/internal/fence"
	"github.com/cairn-registry/cairn/internal/layout"

	"github.com/opencontainers/go-digest"

	"github.com/cairn-registry/cairn/internal/storage/driver"
)

// linkedInRepo reports whether repo links d as a layer or as a manifest
// revision (clients may fetch a manifest through the blob endpoint).
func (r *Registry) linkedInRepo(ctx context.Context, repo string, d digest.Digest) (bool, error) {
	ok, err := r.exists(ctx, layout.LayerLink(repo, d))
	if err != nil || ok {
		return ok, err
	}
	return r.exists(ctx, layout.RevisionLink(repo, d))
}

// BlobInfo describes a stored blob.
type BlobInfo struct {
	Size int64
	// Rebuilt is true when dedup removed the intact bytes: reads rebuild the
	// blob from its recipe, so storage cannot serve it by redirect.
	Rebuilt bool
	// Fetching is true when a pull-through cache is still fetching the
	// blob from its upstream: it is not in storage yet.
	Fetching bool
}

// DedupSource serves blobs whose data file deduplication removed, by
// rebuilding them from their recipe (package dedup implements it).
type DedupSource interface {
	// BlobSize returns the size of blob d from its recipe; an error
	// wrapping driver.ErrNotFound when d has no recipe.
	BlobSize(ctx context.Context, d digest.Digest) (int64, error)
	// Rebuilt reports whether dedup's metadata holds d as deduplicated:
	// a hint, read without a storage request, that its recipe serves it.
	// A lost metadata store reports false; StatBlob does not wait for
	// one that does not answer.
	Rebuilt(ctx context.Context, d digest.Digest) bool
	// OpenBlob streams the rebuilt blob d from offset.
	OpenBlob(ctx context.Context, d digest.Digest, offset int64) (io.ReadCloser, error)
	// CachedBlob streams intact blob d from offset out of a memory cache,
	// or returns nil when d is not cached.
	CachedBlob(d digest.Digest, offset int64) io.ReadCloser
}

// StatBlob describes blob d in repo.
func (r *Registry) StatBlob(ctx context.Context, repo string, d digest.Digest) (BlobInfo, error) {
	dc := r.opts.Descriptors
	if dc != nil {
		if size, ok := dc.Lookup(ctx, repo, d); ok {
			return BlobInfo{Size: size}, nil
		}
	}
	// While the link is checked, dedup's metadata is asked whether d is
	// deduplicated and, if so, its recipe is read: in place of a HEAD of
	// its data file (known missing) after the link's, so that on an
	// object store a cold GET waits for one request before its rebuild
	// starts instead of three. The hint is taken only if it came by the
	// time the link check did (a metadata store that is down or slow
	// costs nothing), and only as a hint: a recipe not found (the blob was
	// made intact again since) leaves the data file to decide.
	var hint <-chan dedupHint
	if r.opts.Dedup != nil {
		hctx, cancel := context.WithCancel(ctx)
		defer cancel() // what is still running ends on its own
		hint = r.askDedup(hctx, d)
	}
	linked, err := r.linkedInRepo(ctx, repo, d)
	if err != nil {
		return BlobInfo{}, err
	}
	if !linked {
		return BlobInfo{}, fmt.Errorf("%w: %s", ErrBlobUnknown, d)
	}
	select {
	case h := <-hint:
		if h.rebuilt {
			if res := <-h.size; res.err == nil {
				return BlobInfo{Size: res.size, Rebuilt: true}, nil
			}
		}
	default:
	}
	fi, err := driver.StatFile(ctx, r.d, layout.BlobData(d))
	if err == nil {
		if dc != nil {
			dc.Remember(ctx, repo, d, fi.Size)
		}
		return BlobInfo{Size: fi.Size}, nil
	}
	if errors.Is(err, driver.ErrNotFound) && r.opts.Dedup != nil {
		size, err := r.opts.Dedup.BlobSize(ctx, d)
		if err == nil {
			return BlobInfo{Size: size, Rebuilt: true}, nil
		}
	}
	if errors.Is(err, driver.ErrNotFound) {
		return BlobInfo{}, fmt.Errorf("%w: %s (link without data)", ErrBlobUnknown, d)
	}
	return BlobInfo{}, err
}

// dedupHint is what dedup's metadata says of a blob: whether it is
// deduplicated, and then its size from its recipe, on size.
type dedupHint struct {
	rebuilt bool
	size    <-chan sizeResult
}

type sizeResult struct {
	size int64
	err  error
}

// askDedup asks dedup in the background whether blob d is deduplicated
// (sent as soon as its metadata answers) and, if so, reads its size from
// its recipe.
func (r *Registry) askDedup(ctx context.Context, d digest.Digest) <-chan dedupHint {
	hint := make(chan dedupHint, 1)
	go func() {
		if !r.opts.Dedup.Rebuilt(ctx, d) {
			hint <- dedupHint{}
			return
		}
		size := make(chan sizeResult, 1)
		hint <- dedupHint{rebuilt: true, size: size}
		n, err := r.opts.Dedup.BlobSize(ctx, d)
		size <- sizeResult{n, err}
	}()
	return hint
}

// OpenBlob streams blob d from offset: its intact bytes, or its rebuild when
// dedup removed them (also when that happened since StatBlob). The caller
// has checked the blob with StatBlob, which returned info: when that found
// it rebuilt, the dedup source is asked first, which saves a GET of the
// missing data file; the data file is still read if the source no longer
// knows d (promoted back to intact meanwhile). A read from the start is a
// pull, reported to the Observer.
func (r *Registry) OpenBlob(ctx context.Context, d digest.Digest, info BlobInfo, offset int64) (io.ReadCloser, error) {
	if offset == 0 && r.opts.Observer != nil {
		// A read from the middle resumes a pull already counted.
		r.opts.Observer.BlobPulled(ctx, ClientFrom(ctx), d)
	}
	if r.opts.Dedup != nil {
		if rc := r.opts.Dedup.CachedBlob(d, offset); rc != nil {
			return rc, nil
		}
	}
	var rc io.ReadCloser
	var err error
	if info.Rebuilt && r.opts.Dedup != nil {
		rc, err = r.opts.Dedup.OpenBlob(ctx, d, offset)
		if errors.Is(err, driver.ErrNotFound) {
			rc, err = r.d.Reader(ctx, layout.BlobData(d), offset)
		}
	} else {
		rc, err = r.d.Reader(ctx, layout.BlobData(d), offset)
		if errors.Is(err, driver.ErrNotFound) && r.opts.Dedup != nil {
			rc, err = r.opts.Dedup.OpenBlob(ctx, d, offset)
		}
	}
	if errors.Is(err, driver.ErrNotFound) {
		return nil, fmt.Errorf("%w: %s", ErrBlobUnknown, d)
	}
	return rc, err
}

// storedSize returns the size of blob d's bytes, from its data file or its
// dedup recipe; ok is false when neither exists. The size is -1 when only a
// recipe exists and no dedup source can read it.
func (r *Registry) storedSize(ctx context.Context, d digest.Digest) (size int64, ok bool, err error) {
	fi, err := driver.StatFile(ctx, r.d, layout.BlobData(d))
	if err == nil {
		return fi.Size, true, nil
	}
	if !errors.Is(err, driver.ErrNotFound) {
		return 0, false, err
	}
	if ok, err := r.exists(ctx, layout.BlobRecipe(d)); err != nil || !ok {
		return 0, false, err
	}
	if r.opts.Dedup != nil {
		if size, err := r.opts.Dedup.BlobSize(ctx, d); err == nil {
			return size, true, nil
		}
	}
	return -1, true, nil
}

// blobExists reports whether blob d's bytes are stored, intact or as a dedup
// recipe.
func (r *Registry) blobExists(ctx context.Context, d digest.Digest) (bool, error) {
	ok, err := r.exists(ctx, layout.BlobData(d))
	if err != nil || ok {
		return ok, err
	}
	return r.exists(ctx, layout.BlobRecipe(d))
}

// Redirector hands out URLs that serve stored files without cairn: an
// object store's presigned URLs, or a CDN's.
type Redirector interface {
	// RedirectURL returns a URL that answers a GET (Range included) of the
	// file at path, a driver path, without credentials for a short while.
	RedirectURL(ctx context.Context, path string) (string, error)
}

// BlobRedirectURL returns a URL the client may GET blob d from directly,
// or "" when cairn serves it: without a Redirector, and for a blob StatBlob
// found rebuilt (its intact bytes are not in storage). The caller has
// authorized the pull and checked the blob with StatBlob (info), so a URL
// is handed out only for a blob linked in the repository. A redirected GET
// from offset 0 is a pull like one cairn serves, and is reported to the
// Observer (a read from the middle resumes one already counted). The
// URL names the data file, so a layer whose intact copy dedup drops after
// StatBlob answers 404 from the store; the window is one request long.
func (r *Registry) BlobRedirectURL(ctx context.Context, d digest.Digest, info BlobInfo, offset int64) (string, error) {
	if r.opts.Redirector == nil || info.Rebuilt || info.Fetching {
		return "", nil
	}
	u, err := r.opts.Redirector.RedirectURL(ctx, layout.BlobData(d))
	if err != nil || u == "" {
		return "", err
	}
	if offset == 0 && r.opts.Observer != nil {
		r.opts.Observer.BlobPulled(ctx, ClientFrom(ctx), d)
	}
	return u, nil
}

// DeleteBlob unlinks blob d from repo. The data stays until garbage
// collection finds nothing else references it.
func (r *Registry) DeleteBlob(ctx context.Context, repo string, d digest.Digest) error {
	if !r.opts.DeleteEnabled {
		return fmt.Errorf("%w: deletes are disabled", ErrUnsupported)
	}
	err := r.d.Delete(ctx, layout.LayerLinkDir(repo, d))
	// Forgotten after the link is gone, so that a HEAD racing the delete
	// cannot leave an entry behind it (unless it read the link before).
	if dc := r.opts.Descriptors; dc != nil {
		dc.Forget(ctx, repo, d)
	}
	if errors.Is(err, driver.ErrNotFound) {
		return fmt.Errorf("%w: %s", ErrBlobUnknown, d)
	}
	return err
}

// ForgetBlob drops what the descriptor cache holds about blob d in repo:
// the caller found the blob gone although StatBlob said it was there.
func (r *Registry) ForgetBlob(ctx context.Context, repo string, d digest.Digest) {
	if dc := r.opts.Descriptors; dc != nil {
		dc.Forget(ctx, repo, d)
	}
}

// MountBlob links blob d into repo without an upload when the caller may
// read it: from repository from when given, else from anywhere in the
// registry. It reports false when the blob cannot be mounted (the client
// then uploads it).
func (r *Registry) MountBlob(ctx context.Context, repo string, d digest.Digest, from string) (bool, error) {
	if from != "" {
		if ValidateName(from) != nil {
			return false, nil
		}
	}
	// The blob may be one GC is about to delete (see package fence).
	done, err := r.protectForGC(ctx, &fence.Record{Repo: repo, Digest: d})
	if err != nil {
		return false, err
	}
	defer done()
	if from != "" {
		ok, err := r.exists(ctx, layout.LayerLink(from, d))
		if err != nil || !ok {
			return false, err
		}
	}
	ok, err := r.blobExists(ctx, d)
	if err != nil || !ok {
		return false, err
	}
	if err := r.writeLink(ctx, layout.LayerLink(repo, d), d); err != nil {
		return false, err
	}
	return true, nil
}
