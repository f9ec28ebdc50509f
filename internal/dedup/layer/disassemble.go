package layer

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/json"
	"fmt"
	"hash"
	"hash/crc64"
	"io"
	"os"

	"github.com/klauspost/compress/zstd"
	"github.com/opencontainers/go-digest"
	"github.com/vbatts/tar-split/tar/asm"
	"github.com/vbatts/tar-split/tar/storage"
)

const (
	// spoolMax is the largest payload hashed in memory; bigger ones spill to
	// a temp file, because the digest (the store key) is known only at EOF.
	spoolMax = 1 << 20
	// Bounds on the raw (non-payload) bytes kept in the recipe: a header
	// with PAX or GNU long-name records is at most a few MiB in tar-split's
	// reader, and trailing bytes after the end-of-archive are kept verbatim.
	metaBase     = 64 << 20
	metaPerEntry = 4 << 20
)

// Disassemble reads an uncompressed tar once, stores each payload not yet in
// fs, and returns the recipe that rebuilds the tar. Payloads stream through a
// bounded in-memory spool or a temp file; neither the tar nor a whole large
// payload is held in memory. The recipe still needs Verify before use.
// Payloads stored before a failure stay in fs (they are valid content).
func Disassemble(ctx context.Context, tarStream io.Reader, fs Sink) (*Recipe, error) {
	var meta bytes.Buffer
	zw, err := zstd.NewWriter(&meta, zstd.WithEncoderConcurrency(1))
	if err != nil {
		return nil, fmt.Errorf("layer: disassemble: %w", err)
	}
	p := &packer{enc: json.NewEncoder(zw)}
	sp := &spooler{fs: fs, sha: sha256.New(), crc: crc64.New(storage.CRCTable), seen: make(map[digest.Digest]bool)}
	defer sp.close()

	// Everything below the pipe runs in tar-split's goroutine: the input
	// reader, the packer and the putter. consumed is only touched there
	// until the pipe is closed, which orders it before our read of it.
	var consumed int64
	in := readFunc(func(b []byte) (int, error) {
		if err := ctx.Err(); err != nil {
			return 0, err
		}
		n, err := tarStream.Read(b)
		consumed += int64(n)
		return n, err
	})
	put := putFunc(func(name string, r io.Reader) (int64, []byte, error) {
		f, crc, err := sp.put(ctx, &sparseGuard{r: r, consumed: &consumed, start: consumed})
		if err != nil {
			return 0, nil, fmt.Errorf("member %q: %w", name, err)
		}
		p.puts = append(p.puts, f)
		return f.Size, crc, nil
	})
	out, err := asm.NewInputTarStream(in, p, put)
	if err != nil {
		return nil, fmt.Errorf("layer: disassemble: %w", err)
	}
	sum := sha256.New()
	total, err := io.Copy(sum, out)
	if err != nil {
		return nil, fmt.Errorf("layer: disassemble: %w", err)
	}
	if err := zw.Close(); err != nil {
		return nil, fmt.Errorf("layer: disassemble: %w", err)
	}
	if p.used != len(p.puts) || p.segBytes+p.fileBytes != total {
		return nil, fmt.Errorf("%w: %d raw + %d payload bytes for a %d-byte tar", ErrNotReproducible, p.segBytes, p.fileBytes, total)
	}
	return &Recipe{
		TarDigest: digest.NewDigest(digest.SHA256, sum),
		TarSize:   total,
		Meta:      meta.Bytes(),
		Files:     p.puts,
	}, nil
}

// packer is tar-split's storage.Packer. It encodes each entry at once, so the
// Payload slices tar-split hands in (which alias its reused read buffers) are
// consumed before they change; a packer that kept entries would have to copy
// them. Unlike tar-split's JSON packer it accepts duplicate paths: assembly is
// driven by entry order, not by name.
type packer struct {
	enc       *json.Encoder
	pos       int
	entries   int
	segBytes  int64
	fileBytes int64
	puts      []File // payloads in the order the putter stored them
	used      int    // how many of puts the file entries have claimed
}

func (p *packer) AddEntry(e storage.Entry) (int, error) {
	switch e.Type {
	case storage.SegmentType:
		p.segBytes += int64(len(e.Payload))
		if p.segBytes > metaBase+int64(p.entries)*metaPerEntry {
			return -1, ErrTooMuchMetadata
		}
	case storage.FileType:
		p.entries++
		// asm calls the putter exactly for entries with Size > 0. Count the
		// bytes the putter saw, not e.Size: a header-only member (hard link)
		// may declare a size yet carry no body.
		if e.Size > 0 {
			if p.used >= len(p.puts) {
				return -1, fmt.Errorf("%w: entry %q has no payload", ErrNotReproducible, e.GetName())
			}
			p.fileBytes += p.puts[p.used].Size
			p.used++
		}
	}
	e.Position = p.pos
	if err := p.enc.Encode(&e); err != nil {
		return -1, err
	}
	p.pos++
	return e.Position, nil
}

// spooler hashes one payload at a time and stores it if unseen.
type spooler struct {
	fs   Sink
	buf  []byte
	tmp  *os.File
	sha  hash.Hash
	crc  hash.Hash64
	seen map[digest.Digest]bool // stored or found during this layer
}

func (s *spooler) put(ctx context.Context, r io.Reader) (File, []byte, error) {
	s.sha.Reset()
	s.crc.Reset()
	if s.buf == nil {
		s.buf = make([]byte, spoolMax)
	}
	n, err := io.ReadFull(r, s.buf)
	var body io.Reader
	switch {
	case err == io.EOF || err == io.ErrUnexpectedEOF:
		s.sha.Write(s.buf[:n])
		s.crc.Write(s.buf[:n])
		body = bytes.NewReader(s.buf[:n])
	case err != nil:
		return File{}, nil, err
	default:
		size, err := s.spill(r)
		if err != nil {
			return File{}, nil, err
		}
		n = int(size)
		body = io.NewSectionReader(s.tmp, 0, size)
	}
	f := File{Digest: digest.NewDigest(digest.SHA256, s.sha), Size: int64(n)}
	crc := s.crc.Sum(nil)
	if s.seen[f.Digest] {
		return f, crc, nil
	}
	has, err := s.fs.Has(ctx, f.Digest)
	if err != nil {
		return File{}, nil, err
	}
	if !has {
		if err := s.fs.Put(ctx, f.Digest, f.Size, body); err != nil {
			return File{}, nil, err
		}
	}
	s.seen[f.Digest] = true
	return f, crc, nil
}

// spill writes the full spool buffer and the rest of r to the temp file,
// hashing as it goes, and returns the payload size.
func (s *spooler) spill(r io.Reader) (int64, error) {
	if s.tmp == nil {
		t, err := os.CreateTemp("", "cairn-layer-*")
		if err != nil {
			return 0, err
		}
		s.tmp = t
	} else if err := s.tmp.Truncate(0); err != nil {
		return 0, err
	}
	if _, err := s.tmp.Seek(0, io.SeekStart); err != nil {
		return 0, err
	}
	w := io.MultiWriter(s.tmp, s.sha, s.crc)
	if _, err := w.Write(s.buf); err != nil {
		return 0, err
	}
	n, err := io.CopyBuffer(w, r, s.buf)
	return int64(len(s.buf)) + n, err
}

func (s *spooler) close() {
	if s.tmp != nil {
		s.tmp.Close()
		os.Remove(s.tmp.Name())
	}
}

// sparseGuard fails a payload read that yields more bytes than the tar
// stream supplied since the payload began. Regular payloads are read 1:1
// from the stream; a sparse member's reader invents zeros for its holes,
// and a crafted sparse map could make it invent terabytes.
type sparseGuard struct {
	r        io.Reader
	consumed *int64
	start    int64
	n        int64
}

func (g *sparseGuard) Read(b []byte) (int, error) {
	n, err := g.r.Read(b)
	g.n += int64(n)
	if g.n > *g.consumed-g.start {
		return n, fmt.Errorf("%w: payload larger than its bytes in the tar (sparse member)", ErrNotReproducible)
	}
	return n, err
}

type readFunc func([]byte) (int, error)

func (f readFunc) Read(b []byte) (int, error) { return f(b) }

type putFunc func(string, io.Reader) (int64, []byte, error)

func (f putFunc) Put(name string, r io.Reader) (int64, []byte, error) { return f(name, r) }
