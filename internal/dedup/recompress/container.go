package recompress

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"

	"github.com/klauspost/compress/gzip"
	"github.com/klauspost/compress/zstd"

	"github.com/cairn-registry/cairn/internal/dedup/recompress/deflate"
)

// gzip header flag bits (RFC 1952).
const (
	flagHCRC    = 1 << 1
	flagExtra   = 1 << 2
	flagName    = 1 << 3
	flagComment = 1 << 4
)

// MaxTrailing bounds the bytes after the last gzip member that a recipe keeps
// verbatim; a blob with more trailing data is not worth a recipe.
const MaxTrailing = 64 << 10

// maxHeaderField bounds FNAME/FCOMMENT/FEXTRA so a hostile header cannot make
// the recipe large.
const maxHeaderField = 64 << 10

// pgzipMTime is time.Time{}.Unix() truncated to 32 bits, little-endian: what
// klauspost/pgzip writes when the caller leaves ModTime unset.
var pgzipMTime = []byte{0x00, 0x09, 0x6e, 0x88}

// member is one parsed gzip member: verbatim header and trailer, and where
// its deflate body lies in the blob.
type member struct {
	header    []byte
	bodyStart int64
	bodyEnd   int64
	trailer   []byte
	size      int64 // uncompressed bytes
	endsSync  bool  // body ends with 00 00 ff ff (stdlib's empty final stored block)
	// boundaries are the body's block boundaries that make restart points
	// (segments.go), if its encoder turns out to restart.
	boundaries []deflate.Boundary
	// speedBoundaries are those for BestSpeed, which needs no window index.
	speedBoundaries []deflate.Boundary
}

// container is a parsed gzip blob.
type container struct {
	members  []member
	trailing []byte
}

// countingReader counts bytes handed to the bufio.Reader above it, so the
// position of the consumer is count - Buffered().
type countingReader struct {
	r io.Reader
	n int64
}

func (c *countingReader) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	c.n += int64(n)
	return n, err
}

var errNotGzip = errors.New("recompress: not a gzip member")

// parseGzip walks every member of a gzip blob. deflate.Walk finds where
// each body ends (its last bit), its inflated size and its block
// boundaries, without inflating it; reading resumes right after the body.
func parseGzip(ra io.ReaderAt, size int64) (*container, error) {
	cr := &countingReader{r: io.NewSectionReader(ra, 0, size)}
	br := bufio.NewReaderSize(cr, 64<<10)
	pos := func() int64 { return cr.n - int64(br.Buffered()) }
	seek := func(off int64) {
		cr = &countingReader{r: io.NewSectionReader(ra, off, size-off), n: off}
		br.Reset(cr)
	}
	c := &container{}
	for {
		start := pos()
		if start == size {
			return c, nil
		}
		hdr, err := readHeader(br)
		if err != nil {
			if len(c.members) == 0 {
				return nil, err
			}
			return c, c.setTrailing(ra, start, size)
		}
		m := member{header: hdr, bodyStart: pos()}
		lazy, speed := &boundaryThinner{}, &boundaryThinner{anyWin: true}
		n, bits, err := deflate.Walk(br, func(b deflate.Boundary) { lazy.add(b); speed.add(b) })
		if err != nil {
			if len(c.members) == 0 {
				return nil, fmt.Errorf("recompress: member 0 deflate: %w", err)
			}
			return c, c.setTrailing(ra, start, size)
		}
		m.bodyEnd = m.bodyStart + (bits+7)/8
		seek(m.bodyEnd)
		m.size = n
		m.boundaries, m.speedBoundaries = lazy.done(n), speed.done(n)
		m.endsSync = m.bodyEnd-m.bodyStart >= 4 && bytes.Equal(lastBytes(ra, m.bodyEnd, 4), []byte{0, 0, 0xff, 0xff})
		tr := make([]byte, 8)
		if _, err := io.ReadFull(br, tr); err != nil {
			if len(c.members) == 0 {
				return nil, fmt.Errorf("recompress: member 0 trailer: %w", err)
			}
			return c, c.setTrailing(ra, start, size)
		}
		m.trailer = tr
		c.members = append(c.members, m)
	}
}

func (c *container) setTrailing(ra io.ReaderAt, off, size int64) error {
	n := size - off
	if n > MaxTrailing {
		return fmt.Errorf("%w: %d trailing bytes after last gzip member", ErrIrreproducible, n)
	}
	c.trailing = make([]byte, n)
	if _, err := ra.ReadAt(c.trailing, off); err != nil && !errors.Is(err, io.EOF) {
		return fmt.Errorf("recompress: read trailing bytes: %w", err)
	}
	return nil
}

func lastBytes(ra io.ReaderAt, end int64, n int) []byte {
	b := make([]byte, n)
	if _, err := ra.ReadAt(b, end-int64(n)); err != nil && !errors.Is(err, io.EOF) {
		return nil
	}
	return b
}

// readHeader reads one gzip member header and returns its bytes verbatim.
func readHeader(br *bufio.Reader) ([]byte, error) {
	h := make([]byte, 10, 32)
	if _, err := io.ReadFull(br, h); err != nil {
		return nil, fmt.Errorf("%w: %w", errNotGzip, err)
	}
	if h[0] != 0x1f || h[1] != 0x8b || h[2] != 8 {
		return nil, errNotGzip
	}
	flg := h[3]
	if flg&0xe0 != 0 {
		return nil, fmt.Errorf("%w: reserved flag bits set", errNotGzip)
	}
	if flg&flagExtra != 0 {
		var xl [2]byte
		if _, err := io.ReadFull(br, xl[:]); err != nil {
			return nil, fmt.Errorf("%w: FEXTRA: %w", errNotGzip, err)
		}
		n := int(xl[0]) | int(xl[1])<<8
		extra := make([]byte, n)
		if _, err := io.ReadFull(br, extra); err != nil {
			return nil, fmt.Errorf("%w: FEXTRA: %w", errNotGzip, err)
		}
		h = append(append(h, xl[:]...), extra...)
	}
	for _, f := range []byte{flagName, flagComment} {
		if flg&f == 0 {
			continue
		}
		s, err := br.ReadSlice(0)
		if err != nil || len(s) > maxHeaderField {
			return nil, fmt.Errorf("%w: unterminated or oversized string field", errNotGzip)
		}
		h = append(h, s...)
	}
	if flg&flagHCRC != 0 {
		var crc [2]byte
		if _, err := io.ReadFull(br, crc[:]); err != nil {
			return nil, fmt.Errorf("%w: FHCRC: %w", errNotGzip, err)
		}
		h = append(h, crc[:]...)
	}
	return h, nil
}

// HeaderLen is the length of the gzip member header b starts with: where
// its raw DEFLATE stream begins.
func HeaderLen(b []byte) (int, error) {
	h, err := readHeader(bufio.NewReader(bytes.NewReader(b)))
	return len(h), err
}

// OpenUncompressed opens the uncompressed stream of a layer blob read from
// r, by its magic bytes: gzip (every member; bytes after the last member
// that are not another member end the stream, as recipes keep them
// verbatim as trailing data), zstd, or r itself (a plain tar). Close
// releases the decoder.
func OpenUncompressed(r io.Reader) (io.ReadCloser, error) {
	br := bufio.NewReaderSize(r, 64<<10)
	magic, _ := br.Peek(4)
	switch {
	case len(magic) >= 3 && magic[0] == 0x1f && magic[1] == 0x8b && magic[2] == 8:
		zr, err := gzip.NewReader(br)
		if err != nil {
			return nil, err
		}
		return &tolerantGzip{zr: zr}, nil
	case bytes.Equal(magic, zstdMagic):
		zr, err := zstd.NewReader(br, zstd.WithDecoderConcurrency(1))
		if err != nil {
			return nil, err
		}
		return zstdReadCloser{zr}, nil
	}
	return io.NopCloser(br), nil
}

// tolerantGzip ends the stream at bytes after the last member that are
// not another member.
type tolerantGzip struct{ zr *gzip.Reader }

func (g *tolerantGzip) Read(p []byte) (int, error) {
	n, err := g.zr.Read(p)
	if errors.Is(err, gzip.ErrHeader) {
		err = io.EOF
	}
	return n, err
}

func (g *tolerantGzip) Close() error { return g.zr.Close() }

type zstdReadCloser struct{ *zstd.Decoder }

func (z zstdReadCloser) Close() error { z.Decoder.Close(); return nil }
