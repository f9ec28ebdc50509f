package pack

import (
	"bufio"
	"bytes"
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

// parsePiece is about how many bytes of a file a ParsedStream inflates
// before it hands their tokens on: a rebuild holds a large file's tokens a
// piece at a time.
const parsePiece = 1 << 20

// Parsed is a small file read from a parse frame with its tokens: a
// payload a rebuild can follow. It reads as the file's bytes. A larger one
// is read as a ParsedStream.
type Parsed struct {
	whole
	// Level is the deflate level the parse was written at.
	Level int
	// Tokens are the file's tokens from its first byte; Marks where each
	// block of them starts.
	Tokens []deflate.Token
	Marks  []deflate.Mark
}

// whole is a small file decompressed in one go: a layer.Whole.
type whole struct {
	*bytes.Reader
	b []byte
}

func newWhole(b []byte) whole { return whole{Reader: bytes.NewReader(b), b: b} }

// Bytes implements layer.Whole.
func (w whole) Bytes() []byte { return w.b }

// Close implements io.Closer.
func (whole) Close() error { return nil }

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

// decodeParse inflates the parse frame of file d (size bytes) with dec,
// with its tokens, in room from pool, when asked.
func decodeParse(dec *deflate.Decoder, pool *deflate.TokenPool, d digest.Digest, frame []byte, size int64, tokens bool) (io.ReadCloser, error) {
	corrupt := func(err error) error {
		return fmt.Errorf("pack: file %s: %w: %w", d, layer.ErrCorruptFile, err)
	}
	if len(frame) < len(parseMagic)+1 {
		return nil, corrupt(errors.New("short parse frame"))
	}
	level := int(frame[len(parseMagic)])
	dec.Reset(frame[len(parseMagic)+1:])
	if tokens {
		dec.AppendTokens(pool.Get(tokenRoom(size, int64(len(frame)))))
	} else {
		dec.SkipTokens()
	}
	out, err := dec.DecodeAll(make([]byte, 0, size+deflate.DstSlack), func(b *deflate.Block) error {
		if b.In+int64(b.Size) > size {
			return fmt.Errorf("parse inflates past %d bytes", size)
		}
		if b.Type == deflate.BlockStored && b.Size > 0 {
			// Not a parse KeepTokens wrote (its only stored block is the
			// empty one that ends the stream).
			tokens = false
		}
		return nil
	})
	if err != nil {
		return nil, corrupt(err)
	}
	if int64(len(out)) != size {
		return nil, corrupt(fmt.Errorf("parse inflates to %d bytes, want %d", len(out), size))
	}
	p := &Parsed{whole: newWhole(out), Level: level}
	if tokens {
		p.Tokens, p.Marks = dec.Tokens(), dec.Marks()
	}
	return p, nil
}

// tokenRoom is how many tokens to make room for, for size bytes of a
// parse coded in bytes bytes: a token takes 6 bits or more in all but odd
// files, and never stands for less than a byte. Growing the slice costs
// more than the room (a file of literals, a token a byte, grew it many
// times from a third of its size).
func tokenRoom(size, bytes int64) int {
	return int(min(size, bytes*8/6)) + 64
}

// ParsedStream is a file too large to hold whole with its tokens, read from
// its parse frame as the frame is read and inflated: it hands its tokens to
// the function Follow set, if any, a piece at a time (about parsePiece
// bytes, whole blocks), each before the piece's first byte is read, so that
// a rebuild following them holds only the pieces it has not passed. (Its
// decoder, tokens and all, inflates faster than compress/flate.) A failed
// read of the frame is the storage's; any other failure means the stored
// bytes are corrupt.
//
// From the first Read a goroutine of its own reads and inflates the frame
// up to two pieces ahead of the reader (a layer's assembly, which no
// other core can share); Close stops it.
type ParsedStream struct {
	// Level is the deflate level the parse was written at.
	Level int

	d      digest.Digest
	src    *iowatch.ErrReader
	rc     io.Closer
	dec    *deflate.Decoder
	pool   *deflate.TokenPool // the room of the pieces' tokens
	size   int64
	follow func(first int, rel, size int64, tokens []deflate.Token, marks []deflate.Mark)

	// The reader's side.
	pieces  chan piece    // from inflateAhead, once the first Read started it
	stop    chan struct{} // closed by Close
	exited  chan struct{} // closed when inflateAhead returns
	closed  bool
	pending []byte // what Read has yet to hand out
	held    []byte // the buffer pending is in
	// free takes back the buffers of pieces read, for inflateAhead to
	// reuse: three are out at once (read, queued, being inflated).
	free chan []byte
	err  error

	// inflateAhead's side.
	win         []byte // the last piece inflated, after the 32 KiB before it
	off         int64  // bytes inflated so far
	tokens      int    // tokens inflated so far
	pieceTokens int    // in the last piece
	plain       bool   // a stored block with bytes: no parse KeepTokens wrote
	done        bool
}

// piece is one piece of a ParsedStream: its bytes, its tokens and marks
// when followed, the index of its first token and its offset in the file;
// or the error that ended the stream.
type piece struct {
	b      []byte
	buf    []byte // the buffer b is in, after the window before it
	first  int
	rel    int64
	tokens []deflate.Token
	marks  []deflate.Mark
	err    error
}

// Follow makes p call f with each piece of its tokens: the index of the
// piece's first token among the file's, the offset of its first byte in
// the file, the bytes it covers, the tokens (not changed afterwards) and
// where each block of them starts (offsets from the piece's first byte).
// Set it before the first Read; f is called by Read.
func (p *ParsedStream) Follow(f func(first int, rel, size int64, tokens []deflate.Token, marks []deflate.Mark)) {
	p.follow = f
}

// openParsedStream reads the parse frame of file d (size bytes, < 0 when
// not known; at level) from br, which reads src, past its magic and level
// byte; its pieces' tokens are room from pool.
func openParsedStream(d digest.Digest, src *iowatch.ErrReader, br *bufio.Reader, rc io.Closer, size int64, level int, pool *deflate.TokenPool) *ParsedStream {
	return &ParsedStream{Level: level, d: d, src: src, rc: rc, size: size, pool: pool, dec: deflate.NewStreamDecoder(br, make([]byte, 64<<10))}
}

func (p *ParsedStream) Read(b []byte) (int, error) {
	for len(p.pending) == 0 {
		if p.err != nil {
			return 0, p.err
		}
		if p.closed {
			return 0, errors.New("pack: read of a closed parse stream")
		}
		if p.pieces == nil {
			p.pieces, p.stop, p.exited = make(chan piece, 1), make(chan struct{}), make(chan struct{})
			p.free = make(chan []byte, 3)
			go p.inflateAhead()
		}
		pc, ok := <-p.pieces
		switch {
		case !ok:
			p.err = io.EOF
		case pc.err != nil:
			p.err = pc.err
		default:
			if len(pc.tokens) > 0 {
				p.follow(pc.first, pc.rel, int64(len(pc.b)), pc.tokens, pc.marks)
			}
			if p.held != nil {
				select {
				case p.free <- p.held:
				default: // a spare: inflateAhead made one while none was back
				}
			}
			p.pending, p.held = pc.b, pc.buf
		}
	}
	n := copy(b, p.pending)
	p.pending = p.pending[n:]
	return n, nil
}

// inflateAhead inflates the pieces in order into p.pieces until the last,
// a failure, or Close.
func (p *ParsedStream) inflateAhead() {
	defer close(p.exited)
	defer close(p.pieces)
	for !p.done {
		pc := p.inflate()
		select {
		case p.pieces <- pc:
		case <-p.stop:
			return
		}
		if pc.err != nil {
			return
		}
	}
}

// inflate decodes the next piece into a buffer of its own, which the
// reader keeps while the next is decoded.
func (p *ParsedStream) inflate() piece {
	const window = 32 << 10
	prev := p.win[max(0, len(p.win)-window):]
	var buf []byte
	select {
	case buf = <-p.free:
	default:
		// The first pieces, or the reader is yet to give one back.
		buf = make([]byte, 0, window+parsePiece+64<<10)
	}
	p.win = append(buf[:0], prev...)
	start := len(p.win)
	if p.follow == nil || p.plain {
		p.dec.SkipTokens()
	} else {
		// Each piece's tokens are a slice of their own: the follower keeps
		// them (and may give them back to the pool). A piece takes about
		// as many as the one before.
		room := (parsePiece + 64<<10) / 2
		if p.pieceTokens > 0 {
			room = p.pieceTokens + p.pieceTokens/8 + 1024
		}
		p.dec.AppendTokens(p.pool.Get(room))
	}
	for len(p.win)-start < parsePiece && !p.done {
		b, out, err := p.dec.Next(p.win)
		p.win = out
		if err != nil {
			if p.src.Err != nil {
				return piece{err: fmt.Errorf("pack: file %s: %w", p.d, p.src.Err)}
			}
			return piece{err: p.corrupt(err)}
		}
		if p.size >= 0 && p.off+int64(len(p.win)-start) > p.size {
			return piece{err: p.corrupt(fmt.Errorf("parse inflates past %d bytes", p.size))}
		}
		if b.Type == deflate.BlockStored && b.Size > 0 {
			p.plain = true
		}
		p.done = b.Final
	}
	n := len(p.win) - start
	if p.done && p.size >= 0 && p.off+int64(n) != p.size {
		return piece{err: p.corrupt(fmt.Errorf("parse inflates to %d bytes, want %d", p.off+int64(n), p.size))}
	}
	pc := piece{b: p.win[start:], buf: p.win, first: p.tokens, rel: p.off}
	if !p.plain && p.follow != nil {
		pc.tokens, pc.marks = p.dec.Tokens(), p.dec.Marks()
	}
	p.tokens += len(pc.tokens)
	p.pieceTokens = len(pc.tokens)
	p.off += int64(n)
	return pc
}

func (p *ParsedStream) corrupt(err error) error {
	return fmt.Errorf("pack: file %s: %w: %w", p.d, layer.ErrCorruptFile, err)
}

// Close implements io.Closer: it stops the goroutine inflating ahead,
// closing the frame's reader first so that a read it waits in ends.
func (p *ParsedStream) Close() error {
	if p.closed {
		return nil
	}
	p.closed, p.pending = true, nil
	err := p.rc.Close()
	if p.pieces != nil {
		close(p.stop)
		<-p.exited
	}
	return err
}
