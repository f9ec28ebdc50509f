package pack

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	"github.com/opencontainers/go-digest"

	"github.com/cairn-registry/cairn/internal/dedup/layer"
	"github.com/cairn-registry/cairn/internal/dedup/recompress/deflate"
	"github.com/cairn-registry/cairn/internal/layout"
)

// TestParseFrames: with KeepParses, files of MinParseFile bytes and more
// are stored as parse frames (the large one streamed), the rest as zstd;
// Stream reads them all back; StreamParses hands out each parse frame's
// file with tokens that inflate to exactly its bytes (the large one as a
// *ParsedStream, in pieces), and without tokens the files it is told the
// rebuild does not follow; a damaged parse frame reads as a corrupt file.
func TestParseFrames(t *testing.T) {
	e := newEnv(t, Options{})
	e.parseLevel = 6
	payloads := files(21, 30, 20_000)
	large := make([]byte, 0, 6<<20)
	r := rand.New(rand.NewPCG(22, 1))
	for len(large) < 6<<20 {
		large = fmt.Appendf(large, "%x\n", r.Uint64()%1000)
	}
	payloads = append(payloads, large)
	id, entries := e.onePack(payloads)
	ctx := context.Background()
	b, err := e.d.GetContent(ctx, layout.Pack(id))
	if err != nil {
		t.Fatal(err)
	}
	for _, en := range entries {
		if got, want := IsParseFrame(b[en.Offset:en.Offset+en.Length]), en.Size >= MinParseFile; got != want {
			t.Errorf("file of %d bytes: parse frame %v, want %v", en.Size, got, want)
		}
	}
	e.readAll(payloads)

	ps, err := e.store.StreamParses(ctx, recipeOf(payloads), nil)
	if err != nil {
		t.Fatal(err)
	}
	readStream(t, ps, payloads, func(i int, rc io.ReadCloser) func() {
		want := payloads[i]
		var level, n, pieces int
		switch p := rc.(type) {
		case *Parsed:
			level = p.Level
			for _, tk := range p.Tokens {
				n += tk.Size()
			}
			checkMarks(t, i, p.Tokens, p.Marks)
		case *ParsedStream:
			// Pieces come in order, each before its first byte is read,
			// and their tokens cover the file's bytes.
			level = p.Level
			var tokens int
			p.Follow(func(first int, rel, size int64, toks []deflate.Token, marks []deflate.Mark) {
				pieces++
				checkMarks(t, i, toks, marks)
				if first != tokens || rel != int64(n) {
					t.Errorf("file %d: piece from token %d at %d, want %d at %d", i, first, rel, tokens, n)
				}
				var covered int64
				for _, tk := range toks {
					covered += int64(tk.Size())
				}
				if covered != size {
					t.Errorf("file %d: piece at %d said %d bytes, its tokens cover %d", i, rel, size, covered)
				}
				tokens += len(toks)
				n += int(covered)
			})
		}
		if parsed := level != 0; parsed != (len(want) >= MinParseFile) || (parsed && (len(want) > smallFile) != isStream(rc)) {
			t.Fatalf("file %d (%d bytes): handed out as %T", i, len(want), rc)
		}
		return func() {
			if level != 0 && (level != 6 || n != len(want)) {
				t.Errorf("file %d: level %d, tokens of %d bytes, want 6 and %d", i, level, n, len(want))
			}
			if isStream(rc) && pieces < 2 {
				t.Errorf("file %d: tokens in %d pieces, want several", i, pieces)
			}
		}
	})

	// Files the rebuild does not follow come without their tokens, and
	// read the same.
	ps, err = e.store.StreamParses(ctx, recipeOf(payloads), func(i int) bool { return i%2 == 0 })
	if err != nil {
		t.Fatal(err)
	}
	readStream(t, ps, payloads, func(i int, rc io.ReadCloser) func() {
		if p, ok := rc.(*Parsed); ok && (len(p.Tokens) > 0) != (i%2 == 0) {
			t.Errorf("file %d (%d bytes): %d tokens handed out, want them only for even files", i, len(payloads[i]), len(p.Tokens))
		}
		return nil
	})

	// A damaged parse frame: the small one whole, the large one streamed.
	for _, k := range []int{len(entries) - 1, firstParse(entries)} {
		en := entries[k]
		bad := append([]byte(nil), b...)
		bad[en.Offset+en.Length/2] ^= 0x21
		if err := e.d.PutContent(ctx, layout.Pack(id), bad); err != nil {
			t.Fatal(err)
		}
		var rc io.ReadCloser
		if k == len(entries)-1 {
			// The large one with its tokens, as a rebuild reads it.
			ps, err := e.store.StreamParses(ctx, recipeOf(payloads[k:]), nil)
			if err != nil {
				t.Fatal(err)
			}
			defer ps.Close()
			rc, err = ps.Next()
			if err != nil {
				t.Fatal(err)
			}
			rc.(*ParsedStream).Follow(func(int, int64, int64, []deflate.Token, []deflate.Mark) {})
		} else {
			rc, err = e.store.Open(ctx, en.Digest)
		}
		var got []byte
		if err == nil {
			got, err = io.ReadAll(rc)
			rc.Close()
		}
		if err == nil {
			// The bits may still inflate, to other bytes, which Assemble
			// catches by the digest.
			if string(got) == string(payloads[k]) {
				t.Errorf("damaged parse frame of %d bytes reads as the file", en.Size)
			}
			continue
		}
		if !errors.Is(err, layer.ErrCorruptFile) {
			t.Errorf("damaged parse frame of %d bytes: %v, want ErrCorruptFile", en.Size, err)
		}
	}
}

func isStream(rc io.Reader) bool {
	_, ok := rc.(*ParsedStream)
	return ok
}

// readInSteps reads r to its end in reads of varied sizes.
// readStream reads every payload of ps in order, checks its bytes, and
// closes ps. before sees each payload as it is handed out, before any of
// its bytes is read, and may return a check to run once it was read.
func readStream(t *testing.T, ps layer.Payloads, payloads [][]byte, before func(i int, rc io.ReadCloser) (after func())) {
	t.Helper()
	defer ps.Close()
	for i, want := range payloads {
		rc, err := ps.Next()
		if err != nil {
			t.Fatalf("file %d: %v", i, err)
		}
		after := before(i, rc)
		got, err := readInSteps(rc)
		rc.Close()
		if err != nil || string(got) != string(want) {
			t.Fatalf("file %d: %d bytes (%v), want %d", i, len(got), err, len(want))
		}
		if after != nil {
			after()
		}
	}
}

func readInSteps(r io.Reader) ([]byte, error) {
	var out []byte
	buf := make([]byte, 100_000)
	for k := 1; ; k++ {
		n, err := r.Read(buf[:k*7919%len(buf)+1])
		out = append(out, buf[:n]...)
		if err == io.EOF {
			return out, nil
		}
		if err != nil {
			return out, err
		}
	}
}

func firstParse(entries []Entry) int {
	for i, en := range entries {
		if en.Size >= MinParseFile && en.Size <= smallFile {
			return i
		}
	}
	return 0
}

// checkMarks checks that the marks handed with file i's tokens (or a piece
// of them) start with the first token and each names a token at its
// offset.
func checkMarks(t *testing.T, i int, toks []deflate.Token, marks []deflate.Mark) {
	t.Helper()
	if len(toks) > 0 && (len(marks) == 0 || marks[0] != deflate.Mark{}) {
		t.Errorf("file %d: %d tokens come with marks %v, want the first at token 0", i, len(toks), marks[:min(len(marks), 1)])
		return
	}
	k, at := 0, int64(0)
	for _, m := range marks {
		for k < m.Token && k < len(toks) {
			at += int64(toks[k].Size())
			k++
		}
		if k != m.Token || at != m.In {
			t.Errorf("file %d: mark %+v, but token %d starts at %d", i, m, k, at)
			return
		}
	}
}

// TestParseDecodersPooled: small parse frames share pooled decoders, and
// what one decode handed out (bytes, tokens, marks) stays as it was while
// the decoder goes on to other frames, with tokens and without, and to a
// damaged one, which fails as a corrupt file and leaves the next right.
func TestParseDecodersPooled(t *testing.T) {
	s := newEnv(t, Options{}).store
	bodies := files(23, 6, 200_000)
	frames := make([][]byte, len(bodies))
	for i, body := range bodies {
		body = append(body, bytes.Repeat([]byte("padding to a parse frame\n"), MinParseFile/20)...)
		bodies[i] = body
		var b bytes.Buffer
		if err := streamParse(&b, ParseLevel, int64(len(body)), bytes.NewReader(body)); err != nil {
			t.Fatal(err)
		}
		frames[i] = b.Bytes()
	}
	decode := func(i int, tokens bool) *Parsed {
		rc, err := s.decodeSmall(digest.FromBytes(bodies[i]), frames[i], int64(len(bodies[i])), tokens)
		if err != nil {
			t.Fatal(err)
		}
		return rc.(*Parsed)
	}
	// What a decoder of its own hands out, to compare with.
	want := make([]*Parsed, len(bodies))
	for i := range bodies {
		p, err := decodeParse(&deflate.Decoder{}, nil, digest.FromBytes(bodies[i]), frames[i], int64(len(bodies[i])), true)
		if err != nil {
			t.Fatal(err)
		}
		want[i] = p.(*Parsed)
	}
	var kept []*Parsed
	for round := range 3 {
		for i := range bodies {
			p := decode(i, (i+round)%2 == 0)
			if len(p.Tokens) > 0 {
				kept = append(kept, p)
			}
		}
		cut := frames[round][:len(frames[round])/2]
		if _, err := s.decodeSmall(digest.FromBytes(bodies[round]), cut, int64(len(bodies[round])), true); !errors.Is(err, layer.ErrCorruptFile) {
			t.Fatalf("a cut parse frame: %v, want a corrupt file", err)
		}
	}
	for _, p := range kept {
		i := slices.IndexFunc(bodies, func(b []byte) bool { return bytes.Equal(b, p.Bytes()) })
		if i < 0 {
			t.Fatal("a decoded file's bytes changed after its decoder went on")
		}
		if !slices.Equal(p.Tokens, want[i].Tokens) || !slices.Equal(p.Marks, want[i].Marks) {
			t.Fatalf("file %d: its tokens or marks changed after its decoder went on", i)
		}
	}
	if len(kept) < len(bodies) {
		t.Fatalf("%d decodes came with tokens, want at least %d", len(kept), len(bodies))
	}
}

// TestParsedStreamInflatesAhead: once read, a large parse frame inflates
// its next piece without waiting for the reader, and Close stops that
// mid-file: the goroutine has ended when Close returns, and the stream
// reads no more.
func TestParsedStreamInflatesAhead(t *testing.T) {
	e := newEnv(t, Options{})
	e.parseLevel = 6
	large := make([]byte, 0, 6<<20)
	r := rand.New(rand.NewPCG(23, 1))
	for len(large) < 6<<20 {
		large = fmt.Appendf(large, "%x\n", r.Uint64()%1000)
	}
	e.ingest("l", [][]byte{large}, 0)
	rc, err := e.store.Open(context.Background(), digest.FromBytes(large))
	if err != nil {
		t.Fatal(err)
	}
	p, ok := rc.(*ParsedStream)
	if !ok {
		t.Fatalf("a file of %d bytes opened as %T", len(large), rc)
	}
	var pieces int
	p.Follow(func(int, int64, int64, []deflate.Token, []deflate.Mark) { pieces++ })
	buf := make([]byte, 10)
	if _, err := io.ReadFull(p, buf); err != nil || string(buf) != string(large[:10]) {
		t.Fatalf("first bytes %q (%v), want %q", buf, err, large[:10])
	}
	// A hang guard, not a timing assertion: the next piece needs no Read.
	for deadline := time.Now().Add(time.Minute); len(p.pieces) == 0; {
		if time.Now().After(deadline) {
			t.Fatal("no piece inflated ahead of the reader")
		}
		time.Sleep(time.Millisecond)
	}
	if pieces != 1 {
		t.Fatalf("tokens handed on for %d pieces, want the first only (the next goes with its bytes)", pieces)
	}
	if err := p.Close(); err != nil {
		t.Fatal(err)
	}
	select {
	case <-p.exited:
	default:
		t.Fatal("the inflating goroutine outlived Close")
	}
	if n, err := p.Read(buf); err == nil || n != 0 {
		t.Fatalf("read after Close: %d bytes, %v", n, err)
	}
}
