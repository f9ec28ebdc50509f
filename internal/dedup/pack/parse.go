package pack

import (
	"bufio"
	"bytes"
	"compress/flate"
	"errors"
	"fmt"
	"io"

	"github.com/opencontainers/go-digest"

	"github.com/cairn-registry/cairn/internal/dedup/layer"
	"github.com/cairn-registry/cairn/internal/dedup/recompress/deflate"
	"github.com/cairn-registry/cairn/internal/iowatch"
)

// Parse frames. With parses on, a file is stored as its own raw DEFLATE
// at ParseLevel, every token kept (deflate.Writer.KeepTokens), in place of
// a zstd frame: inflating it gives the file's bytes and the tokens a
// compress/flate encoder at that level chooses inside the file in any
// layer, which a rebuild takes instead of searching for them again
// (recompress, "Copies"). On the Debian dataset these frames are 0.4%
// larger than zstd's over all the files of 4 KiB and more, and smaller
// below 1 MiB. A frame is "CDF", the level byte, then the raw DEFLATE; a
// zstd frame starts with its own magic, so a pack may hold both and the
// index needs no codec.

const parseMagic = "CDF"

// ParseLevel is the deflate level files are stored as parses at, whatever
// the layer that stores them first was compressed with. A file is stored
// once and serves every layer holding it, and a rebuild follows only
// parses of its own level (recompress.Parses), so the level must be the
// one most layers sharing files have: compress/flate's default, which
// docker and buildkit push (crane's BestSpeed cannot be followed at all).
// Layers at other levels search as before. Go's encoder decides a token
// from the 32 KiB before it and the 258 bytes after, so a file's own
// parse agrees with its tokens inside any level-6 layer past its first
// 32 KiB, and mostly from its start (issue 27's premise).
const ParseLevel = 6

// MinParseFile is the least size of a file stored as a parse: below it a
// copied stretch does not pay for the search it interrupts.
const MinParseFile = 4 << 10

// maxParseFile bounds the file a stream decodes whole, with its tokens
// (about its size again), for a rebuild to follow: a larger one is
// inflated as it is read and its stretch of the layer searched, so that a
// restore holds at most a few such files.
const maxParseFile = 32 << 20

// Parsed is a file read from a parse frame with its tokens: a payload a
// rebuild can follow. It reads as the file's bytes.
type Parsed struct {
	*bytes.Reader
	// Level is the deflate level the parse was written at.
	Level int
	// Tokens are the file's tokens from its first byte.
	Tokens []deflate.Token
}

// Close implements io.Closer.
func (*Parsed) Close() error { return nil }

// IsParseFrame reports whether a file's stored bytes are a parse frame.
func IsParseFrame(frame []byte) bool { return isParse(frame) }

// isParse reports whether stored bytes start a parse frame.
func isParse(frame []byte) bool {
	return len(frame) > len(parseMagic) && string(frame[:len(parseMagic)]) == parseMagic
}

// streamParse writes the parse frame of size bytes of r to w.
func streamParse(w io.Writer, level int, size int64, r io.Reader) error {
	if _, err := w.Write(append([]byte(parseMagic), byte(level))); err != nil {
		return err
	}
	fw, err := deflate.NewWriter(w, level)
	if err != nil {
		return err
	}
	fw.KeepTokens()
	n, err := io.Copy(fw, io.LimitReader(r, size))
	if err == nil && n != size {
		err = fmt.Errorf("%d bytes given, want %d", n, size)
	}
	if cerr := fw.Close(); err == nil {
		err = cerr
	}
	return err
}

// decodeParse inflates the parse frame of file d (size bytes), with its
// tokens when asked.
func decodeParse(d digest.Digest, frame []byte, size int64, tokens bool) (io.ReadCloser, error) {
	corrupt := func(err error) error {
		return fmt.Errorf("pack: file %s: %w: %w", d, layer.ErrCorruptFile, err)
	}
	if len(frame) < len(parseMagic)+1 {
		return nil, corrupt(errors.New("short parse frame"))
	}
	level := int(frame[len(parseMagic)])
	var toks []deflate.Token
	out, err := deflate.NewDecoder(frame[len(parseMagic)+1:]).DecodeAll(make([]byte, 0, size), func(b *deflate.Block) error {
		if b.In+int64(b.Size) > size {
			return fmt.Errorf("parse inflates past %d bytes", size)
		}
		switch {
		case !tokens:
		case b.Type == deflate.BlockStored && b.Size > 0:
			// Not a parse KeepTokens wrote (its only stored block is the
			// empty one that ends the stream).
			tokens, toks = false, nil
		default:
			toks = append(toks, b.Tokens...)
		}
		return nil
	})
	if err != nil {
		return nil, corrupt(err)
	}
	if int64(len(out)) != size {
		return nil, corrupt(fmt.Errorf("parse inflates to %d bytes, want %d", len(out), size))
	}
	return &Parsed{Reader: bytes.NewReader(out), Level: level, Tokens: toks}, nil
}

// openParseStream inflates a parse frame as it is read from br, which
// reads src (past the frame's magic and level): the bytes of a file too large to hold with its
// tokens. A failed read of src is the storage's; any other failure means
// the stored bytes are corrupt.
func openParseStream(d digest.Digest, src *iowatch.ErrReader, br *bufio.Reader, rc io.Closer) io.ReadCloser {
	return &parseStream{d: d, src: src, fr: flate.NewReader(br), rc: rc}
}

type parseStream struct {
	d   digest.Digest
	src *iowatch.ErrReader
	fr  io.ReadCloser
	rc  io.Closer
}

func (p *parseStream) Read(b []byte) (int, error) {
	n, err := p.fr.Read(b)
	if err != nil && err != io.EOF && p.src.Err == nil {
		err = fmt.Errorf("pack: file %s: %w: %w", p.d, layer.ErrCorruptFile, err)
	}
	return n, err
}

func (p *parseStream) Close() error {
	p.fr.Close()
	return p.rc.Close()
}
