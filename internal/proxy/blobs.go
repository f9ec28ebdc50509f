package proxy

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"slices"
	"sync"
	"time"

	"github.com/opencontainers/go-digest"

	"github.com/cairn-registry/cairn/internal/registry"
)

// StatBlob describes blob d for a GET (fetch true: a fetch is started,
// whose response gives the size) or a HEAD (fetch false: the upstream is
// asked with a HEAD) of the mirrored repo. A blob stored for another
// repository is linked into repo first, with no upstream request.
func (c *Cache) StatBlob(ctx context.Context, repo string, d digest.Digest, fetch bool) (registry.BlobInfo, error) {
	info, err := c.blobs.StatBlob(ctx, repo, d)
	if !errors.Is(err, registry.ErrBlobUnknown) {
		return info, err
	}
	// Stored already (for another repository, or by a fetch that has yet
	// to end): linked, not fetched.
	if ok, err := c.blobs.MountBlob(ctx, repo, d, ""); err != nil {
		return registry.BlobInfo{}, err
	} else if ok {
		return c.blobs.StatBlob(ctx, repo, d)
	}
	if fl := c.flight(d); fl != nil {
		if err := fl.wait(ctx); err != nil {
			return registry.BlobInfo{}, err
		}
		return registry.BlobInfo{Size: fl.size, Fetching: true}, nil
	}
	m, name, _ := c.route(repo)
	if fetch {
		fl, err := c.fetch(ctx, m, repo, name, d, false)
		if err != nil {
			return registry.BlobInfo{}, err
		}
		return registry.BlobInfo{Size: fl.size, Fetching: true}, nil
	}
	size, err := m.up.blobSize(ctx, name, d)
	if errors.Is(err, errNotFound) {
		return registry.BlobInfo{}, fmt.Errorf("%w: %s", registry.ErrBlobUnknown, d)
	}
	return registry.BlobInfo{Size: size, Fetching: true}, err
}

// OpenBlob streams blob d of the mirrored repo from offset: from storage
// when repo links it, else from the fetch under way (started if needed).
func (c *Cache) OpenBlob(ctx context.Context, repo string, d digest.Digest, info registry.BlobInfo, offset int64) (io.ReadCloser, error) {
	if fl := c.join(d, repo); fl != nil {
		return fl.reader(ctx, offset)
	}
	if local, err := c.blobs.StatBlob(ctx, repo, d); err == nil {
		return c.blobs.OpenBlob(ctx, d, local, offset)
	}
	m, name, _ := c.route(repo)
	// The reader's reference is taken with the flight, so that a fetch
	// that ends at once still reaches this reader with its error.
	fl, err := c.fetch(ctx, m, repo, name, d, true)
	if err != nil {
		return nil, err
	}
	return fl.reader(ctx, offset)
}

// flight is one blob being fetched from an upstream into a spool file.
type flight struct {
	d       digest.Digest
	ready   chan struct{} // closed when the upstream answered
	size    int64         // set before ready closes
	openErr error         // set before ready closes
	f       *os.File      // unlinked: gone when the last reader closes it

	mu       sync.Mutex
	more     sync.Cond // broadcast as bytes arrive and at the end
	n        int64     // bytes spooled
	complete bool      // every byte is spooled and matched d
	err      error     // the fetch failed; readers fail with it
	refs     int       // the fetch and each open reader
	repos    []string  // repositories to link the blob into
}

// wait waits for the upstream's answer; the error is its refusal.
func (fl *flight) wait(ctx context.Context) error {
	select {
	case <-fl.ready:
		return fl.openErr
	case <-ctx.Done():
		return ctx.Err()
	}
}

func (c *Cache) flight(d digest.Digest) *flight {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.flights[d]
}

// join returns the flight of d, if one runs, with a reference for a
// reader and repo recorded for linking.
func (c *Cache) join(d digest.Digest, repo string) *flight {
	c.mu.Lock()
	defer c.mu.Unlock()
	fl := c.flights[d]
	if fl == nil {
		return nil
	}
	fl.mu.Lock()
	fl.refs++
	if !slices.Contains(fl.repos, repo) {
		fl.repos = append(fl.repos, repo)
	}
	fl.mu.Unlock()
	return fl
}

// fetchIdle ends a fetch whose upstream sent nothing for this long.
const fetchIdle = 5 * time.Minute

// fetch starts fetching blob d of upstream repository name for repo,
// unless a fetch of d runs already, and returns that flight once the
// upstream answered with the blob's size. With reader, the flight holds a
// reference for the caller's reader (flight.reader takes it over) and
// links the blob into repo too; it is returned even when the upstream
// refused, for the reader to release.
func (c *Cache) fetch(ctx context.Context, m *mirror, repo, name string, d digest.Digest, reader bool) (*flight, error) {
	c.mu.Lock()
	if fl := c.flights[d]; fl != nil {
		if reader {
			fl.mu.Lock()
			fl.refs++
			if !slices.Contains(fl.repos, repo) {
				fl.repos = append(fl.repos, repo)
			}
			fl.mu.Unlock()
		}
		c.mu.Unlock()
		if reader {
			return fl, nil
		}
		return fl, fl.wait(ctx)
	}
	// Registered before the upstream answers, so that concurrent first
	// pulls wait for this one instead of asking the upstream too.
	fl := &flight{d: d, ready: make(chan struct{}), size: -1, refs: 1, repos: []string{repo}}
	if reader {
		fl.refs++
	}
	fl.more.L = &fl.mu
	c.flights[d] = fl
	c.mu.Unlock()

	// The fetch serves every client that joins: it outlives this request,
	// but not an upstream that stops sending.
	fctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	idle := time.AfterFunc(fetchIdle, cancel)
	go func() {
		defer cancel()
		defer idle.Stop()
		body, size, err := c.open(fctx, m, name, d)
		if err != nil {
			fl.openErr = err
			close(fl.ready)
			c.end(fl, err)
			return
		}
		fl.size = size
		close(fl.ready)
		c.spool(fctx, fl, body, idle)
	}()
	if reader {
		return fl, nil
	}
	return fl, fl.wait(ctx)
}

// open asks the upstream for the blob and creates its spool file.
func (c *Cache) open(ctx context.Context, m *mirror, name string, d digest.Digest) (io.ReadCloser, int64, error) {
	body, size, err := m.up.blob(ctx, name, d)
	if errors.Is(err, errNotFound) {
		return nil, 0, fmt.Errorf("%w: %s", registry.ErrBlobUnknown, d)
	}
	if err != nil {
		return nil, 0, err
	}
	if size < 0 {
		// Sent chunked: its HEAD must tell the size, which clients need.
		if size, err = m.up.blobSize(ctx, name, d); err != nil {
			body.Close()
			return nil, 0, fmt.Errorf("%w: blob %s sent without a length: %w", ErrUpstream, d, err)
		}
	}
	return body, size, nil
}

// spool copies the upstream's bytes into the spool file, checking them,
// then stores the blob and links it into every repository that asked.
func (c *Cache) spool(ctx context.Context, fl *flight, body io.ReadCloser, idle *time.Timer) {
	defer body.Close()
	f, err := os.CreateTemp(c.spoolDir, "cairn-proxy-*")
	if err == nil {
		os.Remove(f.Name())
	}
	fl.mu.Lock()
	fl.f = f
	fl.mu.Unlock()
	if err != nil {
		c.end(fl, fmt.Errorf("proxy: spool file: %w", err))
		return
	}
	v := fl.d.Verifier()
	buf := make([]byte, 256<<10)
	for fl.n < fl.size {
		k, rerr := body.Read(buf[:min(int64(len(buf)), fl.size-fl.n)])
		idle.Reset(fetchIdle)
		if k > 0 {
			v.Write(buf[:k])
			if _, err := f.WriteAt(buf[:k], fl.n); err != nil {
				c.end(fl, fmt.Errorf("proxy: spool file: %w", err))
				return
			}
			fl.mu.Lock()
			fl.n += int64(k)
			fl.more.Broadcast()
			fl.mu.Unlock()
		}
		if rerr == io.EOF && fl.n < fl.size {
			rerr = io.ErrUnexpectedEOF
		}
		if rerr != nil && rerr != io.EOF {
			c.end(fl, fmt.Errorf("%w: blob %s after %d of %d bytes: %w", ErrUpstream, fl.d, fl.n, fl.size, rerr))
			return
		}
	}
	idle.Stop() // storing may take its time
	if !v.Verified() {
		c.end(fl, fmt.Errorf("%w: blob %s does not match its digest", ErrUpstream, fl.d))
		return
	}
	fl.mu.Lock()
	fl.complete = true
	fl.more.Broadcast()
	fl.mu.Unlock()
	c.log.Info("proxy: fetched blob", "digest", fl.d, "size", fl.size)
	c.end(fl, c.storeSpooled(ctx, fl))
}

// storeSpooled stores the complete spool as blob d of the first
// repository that asked, and links it into the others.
func (c *Cache) storeSpooled(ctx context.Context, fl *flight) error {
	fl.mu.Lock()
	repos := slices.Clone(fl.repos)
	fl.mu.Unlock()
	id, err := c.blobs.StartUpload(ctx, repos[0])
	if err != nil {
		return err
	}
	if _, err := c.blobs.FinishUpload(ctx, repos[0], id, fl.d, io.NewSectionReader(fl.f, 0, fl.size), 0); err != nil {
		c.blobs.CancelUpload(ctx, repos[0], id)
		return err
	}
	for {
		for _, r := range repos[1:] {
			if _, err := c.blobs.MountBlob(ctx, r, fl.d, repos[0]); err != nil {
				return err
			}
		}
		// Readers that joined while we linked are linked too; then the
		// flight ends and later pulls find the blob stored.
		c.mu.Lock()
		fl.mu.Lock()
		more := len(fl.repos) > len(repos)
		if !more {
			delete(c.flights, fl.d)
		}
		later := slices.Clone(fl.repos[len(repos):])
		fl.mu.Unlock()
		c.mu.Unlock()
		if !more {
			return nil
		}
		repos = append([]string{repos[0]}, later...)
	}
}

// end finishes the fetch with err (nil: stored) and drops its reference.
func (c *Cache) end(fl *flight, err error) {
	if err != nil {
		c.log.Warn("proxy: blob fetch failed", "digest", fl.d, "err", err)
	}
	c.mu.Lock()
	if c.flights[fl.d] == fl {
		delete(c.flights, fl.d)
	}
	c.mu.Unlock()
	fl.mu.Lock()
	if err != nil && !fl.complete {
		fl.err = err
	}
	fl.more.Broadcast()
	fl.mu.Unlock()
	fl.release()
}

func (fl *flight) release() {
	fl.mu.Lock()
	defer fl.mu.Unlock()
	fl.refs--
	if fl.refs == 0 && fl.f != nil {
		fl.f.Close()
	}
}

// reader streams the flight's bytes from offset as they arrive, once the
// upstream answered; it holds the reference join took.
func (fl *flight) reader(ctx context.Context, offset int64) (io.ReadCloser, error) {
	if err := fl.wait(ctx); err != nil {
		fl.release()
		return nil, err
	}
	return &flightReader{fl: fl, pos: offset}, nil
}

type flightReader struct {
	fl     *flight
	pos    int64
	closed bool
}

func (r *flightReader) Read(p []byte) (int, error) {
	fl := r.fl
	fl.mu.Lock()
	for r.pos >= fl.n && !fl.complete && fl.err == nil {
		fl.more.Wait()
	}
	n, err := fl.n, fl.err
	f, complete := fl.f, fl.complete
	fl.mu.Unlock()
	if r.pos < n {
		k, rerr := f.ReadAt(p[:min(int64(len(p)), n-r.pos)], r.pos)
		r.pos += int64(k)
		if rerr == io.EOF {
			rerr = nil
		}
		return k, rerr
	}
	if err != nil {
		return 0, err
	}
	if complete {
		return 0, io.EOF
	}
	return 0, io.ErrUnexpectedEOF
}

func (r *flightReader) Close() error {
	if !r.closed {
		r.closed = true
		r.fl.release()
	}
	return nil
}
