package layer

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"sync"

	"github.com/klauspost/compress/zstd"
	"github.com/opencontainers/go-digest"

	"github.com/cairn-registry/cairn/internal/iowatch"
	"github.com/cairn-registry/cairn/internal/layout"
	"github.com/cairn-registry/cairn/internal/storage/driver"
)

const (
	// putContentMax is the largest payload compressed in memory and stored
	// with one atomic PutContent; bigger ones stream through a Writer.
	putContentMax = 4 << 20
)

var _ FileStore = (*DriverStore)(nil)

// DriverStore is a FileStore over a storage driver: each payload is one
// zstd-compressed file at cairn/files/<alg>/<hex[0:2]>/<hex>. A stored file
// is never overwritten; concurrent Puts of one digest write equal bytes.
type DriverStore struct {
	d     driver.Driver
	small *zstd.Encoder // EncodeAll is safe for concurrent use
	encs  sync.Pool     // *zstd.Encoder for streamed payloads
	decs  Decoders
}

// NewDriverStore returns a DriverStore keeping payloads in d.
func NewDriverStore(d driver.Driver) (*DriverStore, error) {
	small, err := zstd.NewWriter(nil, zstd.WithEncoderConcurrency(1))
	if err != nil {
		return nil, fmt.Errorf("layer: %w", err)
	}
	return &DriverStore{d: d, small: small}, nil
}

// FilePath returns the driver path of the payload with digest d.
func FilePath(d digest.Digest) (string, error) {
	if err := d.Validate(); err != nil {
		return "", fmt.Errorf("layer: %w", err)
	}
	return layout.File(d), nil
}

// Has implements FileStore.
func (s *DriverStore) Has(ctx context.Context, d digest.Digest) (bool, error) {
	p, err := FilePath(d)
	if err != nil {
		return false, err
	}
	if _, err := s.d.Stat(ctx, p); err != nil {
		if errors.Is(err, driver.ErrNotFound) {
			return false, nil
		}
		return false, fmt.Errorf("layer: stat %s: %w", d, err)
	}
	return true, nil
}

// Put implements FileStore. It reads exactly size bytes from r.
func (s *DriverStore) Put(ctx context.Context, d digest.Digest, size int64, r io.Reader) error {
	p, err := FilePath(d)
	if err != nil {
		return err
	}
	if has, err := s.Has(ctx, d); err != nil || has {
		return err
	}
	if size <= putContentMax {
		buf := make([]byte, size+1)
		n, err := io.ReadFull(r, buf)
		if (err != io.ErrUnexpectedEOF && err != io.EOF) || int64(n) != size {
			return fmt.Errorf("layer: put %s: %d bytes given, want %d (%v)", d, n, size, err)
		}
		if err := s.d.PutContent(ctx, p, s.small.EncodeAll(buf[:n], nil)); err != nil {
			return fmt.Errorf("layer: put %s: %w", d, err)
		}
		return nil
	}
	if err := s.putLarge(ctx, d, p, size, r); err != nil {
		return fmt.Errorf("layer: put %s: %w", d, err)
	}
	return nil
}

func (s *DriverStore) putLarge(ctx context.Context, d digest.Digest, p string, size int64, r io.Reader) error {
	var rnd [8]byte
	if _, err := rand.Read(rnd[:]); err != nil {
		return err
	}
	// Large payloads are written under cairn/tmp, so a partial file never
	// sits at its final (content-addressed) path.
	tmp := layout.TmpFile(d, hex.EncodeToString(rnd[:]))
	fw, err := s.d.Writer(ctx, tmp, false)
	if err != nil {
		return err
	}
	enc, _ := s.encs.Get().(*zstd.Encoder)
	if enc == nil {
		if enc, err = zstd.NewWriter(nil, zstd.WithEncoderConcurrency(1)); err != nil {
			fw.Cancel(ctx)
			return err
		}
	}
	enc.Reset(fw)
	n, err := io.Copy(enc, io.LimitReader(r, size))
	if err == nil && n != size {
		err = fmt.Errorf("%d bytes given, want %d", n, size)
	}
	if cerr := enc.Close(); err == nil {
		err = cerr
	}
	enc.Reset(nil)
	s.encs.Put(enc)
	return driver.Publish(ctx, s.d, fw, tmp, p, err)
}

// Open implements FileStore. Bytes that do not decode (zstd checks its
// frames and their checksums) fail with ErrCorruptFile; the driver's own
// read errors are passed on as they are.
func (s *DriverStore) Open(ctx context.Context, d digest.Digest) (io.ReadCloser, error) {
	p, err := FilePath(d)
	if err != nil {
		return nil, err
	}
	rc, err := s.d.Reader(ctx, p, 0)
	if err != nil {
		return nil, fmt.Errorf("layer: open %s: %w", d, err)
	}
	out, err := s.decs.Open(rc)
	if err != nil {
		return nil, fmt.Errorf("layer: open %s: %w", d, err)
	}
	return out, nil
}

// Decoders decompresses stored payloads (zstd frames) with pooled
// decoders. The zero value is ready to use.
type Decoders struct{ pool sync.Pool }

// Open returns the decompressed stream of rc; closing it closes rc. Bytes
// that do not decode (zstd checks its frames and their checksums) fail
// with ErrCorruptFile; rc's own read errors are passed on as they are.
func (ds *Decoders) Open(rc io.ReadCloser) (io.ReadCloser, error) {
	dec, _ := ds.pool.Get().(*zstd.Decoder)
	if dec == nil {
		var err error
		if dec, err = zstd.NewReader(nil, zstd.WithDecoderConcurrency(1)); err != nil {
			rc.Close()
			return nil, err
		}
	}
	src := &srcReader{iowatch.ErrReader{R: rc}}
	if err := dec.Reset(src); err != nil {
		rc.Close()
		ds.pool.Put(dec)
		return nil, src.classify(err)
	}
	return &decReader{dec: dec, src: src, rc: rc, pool: &ds.pool}, nil
}

// srcReader remembers the driver's read error, so that a decoding failure
// can be told apart: a failed read is the storage's, anything else means
// the stored bytes are corrupt.
type srcReader struct{ iowatch.ErrReader }

// classify marks a decoder error as corruption unless the driver failed.
func (s *srcReader) classify(err error) error {
	if err == nil || err == io.EOF || s.Err != nil {
		return err
	}
	return fmt.Errorf("%w: %w", ErrCorruptFile, err)
}

// decReader returns its decoder to the pool on Close.
type decReader struct {
	dec  *zstd.Decoder
	src  *srcReader
	rc   io.ReadCloser
	pool *sync.Pool
}

func (r *decReader) Read(b []byte) (int, error) {
	if r.dec == nil {
		return 0, io.ErrClosedPipe
	}
	n, err := r.dec.Read(b)
	return n, r.src.classify(err)
}

func (r *decReader) Close() error {
	if r.dec == nil {
		return nil
	}
	r.dec.Reset(nil) // drops the reference to rc; the nil-input error is expected
	r.pool.Put(r.dec)
	r.dec = nil
	return r.rc.Close()
}
