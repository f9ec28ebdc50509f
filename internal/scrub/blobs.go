package scrub

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"sync"

	"github.com/klauspost/compress/zstd"
	"github.com/opencontainers/go-digest"

	"github.com/cairn-registry/cairn/internal/iowatch"
	"github.com/cairn-registry/cairn/internal/layout"
	"github.com/cairn-registry/cairn/internal/parallel"
	"github.com/cairn-registry/cairn/internal/storage/driver"
)

// hashJob is one stored object to stream through its digest.
type hashJob struct {
	path string
	d    digest.Digest
	k    key
	size int64 // as listed
}

// scanBlobs lists blobs/ once: every blob directory goes into the blob set,
// every data file to a worker that hashes it.
func (s *scrubber) scanBlobs(ctx context.Context) error {
	p := parallel.StartPool(s.opts.Workers, func(j hashJob) { s.verifyBlob(ctx, j) })
	parse := func(p string) (alg, hexs string, ok bool) {
		alg, hexs, _, ok = layout.ParseBlobPath(p)
		return alg, hexs, ok
	}
	err := s.walkDigests(ctx, layout.BlobsDir, parse, "the directory name", func(j hashJob) error {
		if strings.HasSuffix(j.path, "/"+layout.BlobRecipeLeaf) { // else data: ParseBlobPath knows no other leaf
			s.blobs.add(j.k, bRecipe)
			return nil
		}
		s.blobs.add(j.k, bData)
		return p.Send(ctx, j)
	})
	p.Wait()
	s.blobs.seal()
	return err
}

// walkDigests lists root once and calls found for every file whose path
// parse accepts, named by a digest cairn can verify; a path naming another
// is reported (what says which part of the path), anything else ignored:
// not part of the layout (a stray or temporary file).
func (s *scrubber) walkDigests(ctx context.Context, root string, parse func(string) (alg, hexs string, ok bool), what string, found func(hashJob) error) error {
	err := s.d.Walk(ctx, root, func(fi driver.FileInfo) error {
		if fi.IsDir {
			return nil
		}
		alg, hexs, ok := parse(fi.Path)
		if !ok {
			return nil
		}
		k, ok := s.keys.Parse(alg, hexs)
		d := digest.NewDigestFromEncoded(digest.Algorithm(alg), hexs)
		if !ok || !d.Algorithm().Available() {
			s.add(Finding{Kind: KindBadPath, Path: fi.Path, Detail: what + " is not a digest cairn can verify"})
			return nil
		}
		s.nListed.Add(1)
		return found(hashJob{path: fi.Path, d: d, k: k, size: fi.Size})
	})
	if errors.Is(err, driver.ErrNotFound) {
		err = nil
	}
	return err
}

func (s *scrubber) verifyBlob(ctx context.Context, j hashJob) {
	if ctx.Err() != nil {
		return
	}
	got, n, err := s.hashObject(ctx, j.path, j.d.Algorithm(), nil, &s.nBlobBytes)
	switch {
	case errors.Is(err, driver.ErrNotFound):
		s.nVanished.Add(1) // deleted since the listing
		return
	case err != nil:
		s.unreadable(ctx, j.path, j.d, err)
		return
	}
	s.nBlobs.Add(1)
	if got == j.d {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	i := s.addLocked(Finding{Kind: KindCorruptBlob, Path: j.path, Digest: string(j.d),
		Detail: fmt.Sprintf("content (%d bytes) hashes to %s", n, got)})
	s.corrupt[j.k] = corruptBlob{finding: i, k: j.k, digest: j.d}
}

// errCorruptFile marks a stored dedup file that does not decompress.
var errCorruptFile = errors.New("not a valid zstd stream")

// hashObject streams the object at p (through decode, when set) into a
// hash of alg, adding the bytes hashed to progress as they go.
// Storage errors are retried from the start; a decode error is not a
// storage error and comes back wrapping errCorruptFile.
func (s *scrubber) hashObject(ctx context.Context, p string, alg digest.Algorithm, decode func(io.Reader) (io.Reader, func(), error), progress interface{ Add(int64) int64 }) (digest.Digest, int64, error) {
	var got digest.Digest
	var n int64
	err := retry(ctx, func() error {
		rc, err := s.d.Reader(ctx, p, 0)
		if err != nil {
			return err
		}
		defer rc.Close()
		src := &iowatch.ErrReader{R: rc}
		var r io.Reader = src
		if decode != nil {
			dr, done, err := decode(src)
			if err != nil {
				if src.Err != nil {
					return src.Err
				}
				return fmt.Errorf("%w: %v", errCorruptFile, err)
			}
			defer done()
			r = dr
		}
		h := alg.Hash()
		bp := s.bufs.Get().(*[]byte)
		defer s.bufs.Put(bp)
		n, err = io.CopyBuffer(h, &progressReader{r: r, n: progress}, *bp)
		if err != nil {
			if src.Err != nil {
				return src.Err // storage failed: try again
			}
			return fmt.Errorf("%w: %v", errCorruptFile, err)
		}
		got = digest.NewDigest(alg, h)
		return nil
	})
	return got, n, err
}

type progressReader struct {
	r io.Reader
	n interface{ Add(int64) int64 }
}

func (p *progressReader) Read(b []byte) (int, error) {
	n, err := p.r.Read(b)
	p.n.Add(int64(n))
	return n, err
}

// scanFiles verifies every dedup file: it lists cairn/files once, each
// file going to a worker that decompresses and hashes it, then the packs
// (scanPacks). What is found stored goes into the file sets.
func (s *scrubber) scanFiles(ctx context.Context) error {
	var decs sync.Pool // *zstd.Decoder
	decode := func(r io.Reader) (io.Reader, func(), error) {
		dec, _ := decs.Get().(*zstd.Decoder)
		if dec == nil {
			var err error
			if dec, err = zstd.NewReader(nil, zstd.WithDecoderConcurrency(1)); err != nil {
				return nil, nil, err
			}
		}
		if err := dec.Reset(r); err != nil {
			decs.Put(dec)
			return nil, nil, err
		}
		return dec, func() { dec.Reset(nil); decs.Put(dec) }, nil
	}
	p := parallel.StartPool(s.opts.Workers, func(j hashJob) { s.verifyFile(ctx, j, decode) })
	err := s.walkDigests(ctx, layout.FilesDir, layout.ParseFilePath, "the file name", func(j hashJob) error {
		return p.Send(ctx, j)
	})
	p.Wait()
	if err == nil {
		err = s.scanPacks(ctx)
	}
	s.mu.Lock()
	s.objectSet.seal()
	s.packSet.seal()
	s.mu.Unlock()
	if err == nil {
		err = s.settleCopies(ctx)
	}
	return err
}

func (s *scrubber) verifyFile(ctx context.Context, j hashJob, decode func(io.Reader) (io.Reader, func(), error)) {
	if ctx.Err() != nil {
		return
	}
	got, n, err := s.hashObject(ctx, j.path, j.d.Algorithm(), decode, &s.nFileBytes)
	detail := ""
	switch {
	case errors.Is(err, driver.ErrNotFound):
		s.nVanished.Add(1)
		return
	case errors.Is(err, errCorruptFile):
		detail = "does not decompress: " + oneLine(err.Error())
	case err != nil:
		s.unreadable(ctx, j.path, j.d, err)
		s.mu.Lock()
		s.objectSet.add(j.k) // stored all the same
		s.mu.Unlock()
		return
	case got != j.d:
		detail = fmt.Sprintf("decompresses to %d bytes hashing to %s", n, got)
	}
	s.nFiles.Add(1)
	s.mu.Lock()
	defer s.mu.Unlock()
	if detail == "" {
		s.objectSet.add(j.k)
		return
	}
	s.bad[j.k] = &badFile{d: j.d, path: j.path, corrupt: detail}
}
