package layer

import (
	"github.com/cairn-registry/cairn/internal/iowatch"

	"bytes"
	"context"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"sync"

	"github.com/klauspost/compress/zstd"
	"github.com/opencontainers/go-digest"
	"github.com/vbatts/tar-split/tar/storage"
)

const (
	// readAhead is how many payloads are being fetched or waiting to be
	// written at once; it hides per-object latency of remote stores.
	readAhead = 4
	// prefetchMax is the largest payload read ahead into memory; larger
	// ones are only opened ahead and then streamed.
	prefetchMax = 4 << 20
)

// Assemble writes the tar that recipe was made from to w. Payloads are read
// ahead in parallel (bounded) and written strictly in recipe order; each is
// checked against its digest and size (a small one before any of its bytes
// is written, a streamed one as it ends) and against the size in the
// metadata. A payload that cannot be read fails with a *FileError naming
// it; metadata that disagrees with the payloads, with ErrMismatch. It does
// not check the result's digest: Verify does, and a restore checks the
// blob's. (tar-split's own assembly also sums every payload's crc64 against
// the metadata: each payload is already checked against its sha256, and
// two same-sized payloads swapped, which only the crc64 would tell here,
// fail those digests; the sum cost a restore 4% of its CPU in the one stage
// no second core shares.)
func Assemble(ctx context.Context, w io.Writer, recipe *Recipe, fs FileStore) error {
	return AssembleWith(ctx, w, recipe, fs, nil)
}

// PayloadFunc sees each payload as assembly reaches it, before any of its
// bytes is read: its index in the recipe's Files, the tar offset of its
// first byte, and the reader the store handed out (a store may hand out
// more than bytes: see pack.Parsed). It must not read rc.
type PayloadFunc func(i int, off int64, rc io.Reader)

// AssembleWith is Assemble calling seen, when not nil, with each payload a
// Streamer hands out.
func AssembleWith(ctx context.Context, w io.Writer, recipe *Recipe, fs FileStore, seen PayloadFunc) error {
	zr, err := zstd.NewReader(bytes.NewReader(recipe.Meta), zstd.WithDecoderConcurrency(1))
	if err != nil {
		return fmt.Errorf("layer: assemble: %w", err)
	}
	defer zr.Close()

	ctx, cancel := context.WithCancel(ctx)
	var pf getter
	var written int64 // tar bytes so far
	if st, ok := fs.(Streamer); ok {
		ps, err := st.Stream(ctx, recipe.Files)
		if err != nil {
			cancel()
			return fmt.Errorf("layer: assemble: %w", err)
		}
		pf = &streamed{ps: ps, files: recipe.Files, seen: seen, at: &written}
	} else {
		pf = startPrefetch(ctx, fs, recipe.Files)
	}
	defer pf.stop(cancel)

	up := &unpacker{dec: json.NewDecoder(zr)}
	var werr error // the output's failure, not the recipe's
	cw := writeFunc(func(b []byte) (int, error) {
		if werr = ctx.Err(); werr != nil {
			return 0, werr
		}
		n, err := w.Write(b)
		written += int64(n)
		werr = err
		return n, err
	})
	if err := writeTar(cw, up, pf); err != nil {
		var fe *FileError
		if werr == nil && !errors.As(err, &fe) && !errors.Is(err, ErrMismatch) {
			// Undecodable metadata.
			err = fmt.Errorf("%w: %w", ErrMismatch, err)
		}
		return fmt.Errorf("layer: assemble: %w", err)
	}
	if n := pf.used(); n < len(recipe.Files) {
		return fmt.Errorf("layer: assemble: %w: %d payloads listed, %d used", ErrMismatch, len(recipe.Files), n)
	}
	return nil
}

// Verify assembles recipe and checks that the output has the recipe's tar
// digest and size. Only a verified recipe may stand in for the tar.
func Verify(ctx context.Context, recipe *Recipe, fs FileStore) error {
	h := sha256.New()
	cw := &iowatch.Writer{W: h}
	if err := Assemble(ctx, cw, recipe, fs); err != nil {
		return err
	}
	got := digest.NewDigest(digest.SHA256, h)
	if cw.N != recipe.TarSize || got != recipe.TarDigest {
		return fmt.Errorf("%w: got %s (%d bytes), want %s (%d bytes)", ErrMismatch, got, cw.N, recipe.TarDigest, recipe.TarSize)
	}
	return nil
}

// writeTar writes the tar up's entries describe to w: raw segments as they
// are, and each non-empty file's payload from pf, which must be as long as
// the entry says (or empty).
func writeTar(w io.Writer, up *unpacker, pf getter) error {
	var buf []byte // for payloads that cannot write themselves out
	for {
		e, err := up.Next()
		if err == io.EOF {
			return nil
		}
		if err != nil {
			return err
		}
		switch e.Type {
		case storage.SegmentType:
			if _, err := w.Write(e.Payload); err != nil {
				return err
			}
		case storage.FileType:
			if e.Size == 0 {
				continue
			}
			rc, err := pf.Get(e.GetName())
			if err != nil {
				return err
			}
			if _, ok := rc.(io.WriterTo); !ok && buf == nil {
				buf = make([]byte, 64<<10)
			}
			n, err := io.CopyBuffer(w, rc, buf)
			rc.Close()
			if err != nil {
				return err
			}
			// A header-only member (a hard link) may declare a size and
			// carry no payload.
			if n != e.Size && n != 0 {
				return fmt.Errorf("%w: payload of %q is %d bytes, the metadata says %d", ErrMismatch, e.GetName(), n, e.Size)
			}
		}
	}
}

// unpacker is tar-split's storage.Unpacker without its duplicate-path check.
type unpacker struct{ dec *json.Decoder }

func (u *unpacker) Next() (*storage.Entry, error) {
	var e storage.Entry
	if err := u.dec.Decode(&e); err != nil {
		return nil, err
	}
	return &e, nil
}

// fetched is one payload: in memory, or an open stream, or an error.
type fetched struct {
	rc  io.ReadCloser
	err error
}

// prefetch is tar-split's storage.FileGetter fed in recipe order. It ignores
// the name asm asks for: with duplicate paths a name does not identify a
// payload, the position does (and a misorder fails the result's digest).
type prefetch struct {
	order <-chan chan fetched
	sem   chan struct{}
	done  sync.WaitGroup
	next  int
	files []File
}

func startPrefetch(ctx context.Context, fs FileStore, files []File) *prefetch {
	order := make(chan chan fetched, readAhead)
	pf := &prefetch{order: order, sem: make(chan struct{}, readAhead), files: files}
	pf.done.Add(1)
	go func() {
		defer pf.done.Done()
		defer close(order)
		for _, f := range files {
			// A slot is held from fetch start until the writer closes
			// the payload, so at most readAhead are in memory or open.
			select {
			case pf.sem <- struct{}{}:
			case <-ctx.Done():
				return
			}
			ch := make(chan fetched, 1)
			order <- ch // never blocks: cap(order) == cap(sem)
			pf.done.Add(1)
			go func() {
				defer pf.done.Done()
				ch <- fetch(ctx, fs, f)
			}()
		}
	}()
	return pf
}

func fetch(ctx context.Context, fs FileStore, f File) fetched {
	if err := checkFile(f); err != nil {
		return fetched{err: err}
	}
	rc, err := fs.Open(ctx, f.Digest)
	if err != nil {
		return fetched{err: &FileError{Digest: f.Digest, Err: err}}
	}
	return checked(rc, f)
}

// checkFile refuses a recipe's payload entry that cannot be right.
func checkFile(f File) error {
	if f.Size < 0 || f.Digest.Validate() != nil {
		return fmt.Errorf("%w: payload %q of %d bytes", ErrMismatch, f.Digest, f.Size)
	}
	return nil
}

// checked reads a small payload whole (or takes it as it is, when the store
// holds it whole) and checks it before any of its bytes are used; a large
// one is checked as it streams.
func checked(rc io.ReadCloser, f File) fetched {
	if w, ok := rc.(Whole); ok {
		if err := checkBytes(w.Bytes(), f); err != nil {
			rc.Close()
			return fetched{err: &FileError{Digest: f.Digest, Err: err}}
		}
		return fetched{rc: rc}
	}
	if f.Size > prefetchMax {
		return fetched{rc: &checkedPayload{rc: rc, f: f, v: f.Digest.Verifier()}}
	}
	defer rc.Close()
	// One byte more than expected, so a too-long payload is noticed here.
	buf := make([]byte, f.Size+1)
	n, err := io.ReadFull(rc, buf)
	switch {
	case err == nil:
		err = fmt.Errorf("%w: longer than %d bytes", ErrCorruptFile, f.Size)
	case err != io.ErrUnexpectedEOF && err != io.EOF:
	default:
		if err = checkBytes(buf[:n], f); err == nil {
			return fetched{rc: io.NopCloser(bytes.NewReader(buf[:n]))}
		}
	}
	return fetched{err: &FileError{Digest: f.Digest, Err: err}}
}

// checkBytes checks a whole payload against its size and digest.
func checkBytes(b []byte, f File) error {
	switch {
	case int64(len(b)) > f.Size:
		return fmt.Errorf("%w: longer than %d bytes", ErrCorruptFile, f.Size)
	case int64(len(b)) != f.Size:
		return fmt.Errorf("%w: %d bytes, want %d", ErrCorruptFile, len(b), f.Size)
	case f.Digest.Algorithm().FromBytes(b) != f.Digest:
		return fmt.Errorf("%w: content does not match the digest", ErrCorruptFile)
	}
	return nil
}

// checkedPayload streams a payload too large to read ahead and fails as it
// ends if the payload had another size or digest. The bytes before are out
// by then: the caller's digest check of the whole result must catch them.
type checkedPayload struct {
	rc io.ReadCloser
	f  File
	v  digest.Verifier
	n  int64
}

func (c *checkedPayload) Read(p []byte) (int, error) {
	n, err := c.rc.Read(p)
	if over := c.n + int64(n) - c.f.Size; over > 0 {
		n -= int(over)
		err = fmt.Errorf("%w: longer than %d bytes", ErrCorruptFile, c.f.Size)
	}
	c.n += int64(n)
	c.v.Write(p[:n])
	switch {
	case err == io.EOF && c.n != c.f.Size:
		err = fmt.Errorf("%w: %d bytes, want %d", ErrCorruptFile, c.n, c.f.Size)
	case err == io.EOF && !c.v.Verified():
		err = fmt.Errorf("%w: content does not match the digest", ErrCorruptFile)
	case err == io.EOF || err == nil:
		return n, err
	}
	return n, &FileError{Digest: c.f.Digest, Err: err}
}

func (c *checkedPayload) Close() error { return c.rc.Close() }

// getter is tar-split's storage.FileGetter, fed in recipe order, that
// Assemble stops when done.
type getter interface {
	Get(string) (io.ReadCloser, error)
	// used is how many payloads were handed out.
	used() int
	stop(cancel context.CancelFunc)
}

// streamed is a getter over a Streamer's payloads.
type streamed struct {
	ps    Payloads
	files []File
	next  int
	seen  PayloadFunc
	at    *int64 // the tar bytes written so far: where a payload starts
}

func (s *streamed) Get(string) (io.ReadCloser, error) {
	if s.next >= len(s.files) {
		return nil, fmt.Errorf("%w: metadata has more payloads than the %d listed", ErrMismatch, len(s.files))
	}
	f := s.files[s.next]
	if err := checkFile(f); err != nil {
		return nil, err
	}
	rc, err := s.ps.Next()
	if err != nil {
		return nil, &FileError{Digest: f.Digest, Err: err}
	}
	if s.seen != nil {
		s.seen(s.next, *s.at, rc)
	}
	r := checked(rc, f)
	if r.err != nil {
		return nil, r.err
	}
	s.next++
	return r.rc, nil
}

func (s *streamed) used() int { return s.next }

func (s *streamed) stop(cancel context.CancelFunc) {
	cancel()
	s.ps.Close()
}

func (pf *prefetch) used() int { return pf.next }

// Get implements storage.FileGetter.
func (pf *prefetch) Get(string) (io.ReadCloser, error) {
	ch, ok := <-pf.order
	if !ok {
		return nil, fmt.Errorf("%w: metadata has more payloads than the %d listed", ErrMismatch, len(pf.files))
	}
	r := <-ch
	if r.err != nil {
		<-pf.sem
		return nil, r.err
	}
	pf.next++
	return &slotCloser{ReadCloser: r.rc, sem: pf.sem}, nil
}

// stop cancels outstanding fetches, closes payloads nobody will read and
// waits for every fetch goroutine.
func (pf *prefetch) stop(cancel context.CancelFunc) {
	cancel()
	for ch := range pf.order {
		if r := <-ch; r.rc != nil {
			r.rc.Close()
		}
		<-pf.sem
	}
	pf.done.Wait()
}

// slotCloser frees the read-ahead slot when the writer is done with it.
type slotCloser struct {
	io.ReadCloser
	sem  chan struct{}
	once sync.Once
}

func (s *slotCloser) Close() error {
	err := s.ReadCloser.Close()
	s.once.Do(func() { <-s.sem })
	return err
}

type writeFunc func([]byte) (int, error)

func (f writeFunc) Write(b []byte) (int, error) { return f(b) }
