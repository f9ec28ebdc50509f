package main

import (
	"io"
	"strings"
	"testing"

	"github.com/opencontainers/go-digest"

	"github.com/cairn-registry/cairn/internal/dedup/recompress/deflate"
)

// TestGapWalk: tokens a copy covers cost nothing; the rest are charged to
// the kind of bytes they start in, in runs that end at a copy or an entry's
// end, and a run an earlier layer had (same file, offset and tokens) is
// shared.
func TestGapWalk(t *testing.T) {
	f1, f2 := digest.FromString("f1"), digest.FromString("f2")
	ents := []tarEntry{
		{0, 512, "headers", f1, 0},
		{512, 512 + 40<<10, "heads", f1, 0},
		{512 + 40<<10, 1024 + 40<<10, "headers", f2, 0},
		{1024 + 40<<10, 1024 + 41<<10, "small", f2, 1},
	}
	lit := deflate.LiteralToken('x')
	match := deflate.MatchToken(100, 50)
	layer := func(g *gapBits, covered []span, parses *parseCursor) {
		w := gapWalk{g: g, ents: ents, covered: covered, parses: parses}
		in := int64(0)
		feed := func(t deflate.Token, n int) {
			for range n {
				w.token(in, t, 7)
				in += int64(t.Size())
			}
		}
		feed(lit, 512)                // the header
		feed(match, 10)               // 1000 bytes of f1's head
		feed(lit, 32<<10-1000)        // the rest of its first 32 KiB
		feed(match, (8<<10)/100)      // 8100 bytes of its body
		feed(lit, 40<<10-32<<10-8100) // to its end
		feed(lit, 512)                // f2's header
		feed(lit, 1<<10)              // f2
		w.end()
	}
	g := &gapBits{}
	g.Kinds, g.seen = map[string]*gapCost{}, map[[32]byte]bool{}
	for _, k := range gapKindNames {
		g.Kinds[k] = &gapCost{}
	}
	// A copy covers f1 from byte 1000 of its head to its end. f1's own
	// parse (already read: file 0) starts with the layer's first five
	// matches and then differs; f2 is read from the stream and has none.
	parse := &parseCursor{ps: &fakePayloads{n: 1}, next: 1}
	for x := range 5 {
		parse.offs, parse.toks = append(parse.offs, int64(100*x)), append(parse.toks, match)
	}
	parse.offs, parse.toks = append(parse.offs, 500), append(parse.toks, lit)
	layer(g, []span{{512 + 1000, 512 + 40<<10}}, parse)
	if parse.next != 2 {
		t.Fatalf("%d files read, want 2", parse.next)
	}
	want := map[string]gapCost{
		"headers": {Tar: 1024, Tokens: 1024, Bits: 7 * 1024, Runs: 2, DisRuns: 2},
		"heads":   {Tar: 1000, Tokens: 10, Bits: 70, Runs: 1, Agree: 5, AgreeBits: 35, DisRuns: 1},
		"small":   {Tar: 1024, Tokens: 1024, Bits: 7 * 1024, Runs: 1, DisRuns: 1},
	}
	check := func(when string) {
		t.Helper()
		for _, k := range gapKindNames {
			if got := *g.Kinds[k]; got != want[k] {
				t.Errorf("%s: %s: %+v, want %+v", when, k, got, want[k])
			}
		}
	}
	check("first layer")
	// The same layer again, with no copy: what the first had is shared,
	// f1's head past byte 1000 and its body are new.
	layer(g, nil, nil)
	body := int64(40<<10 - 32<<10)
	want["headers"] = gapCost{Tar: 2048, Tokens: 2048, Bits: 7 * 2048, Runs: 4, Seen: 2, Shared: 7 * 1024, DisRuns: 4}
	want["small"] = gapCost{Tar: 2048, Tokens: 2048, Bits: 7 * 2048, Runs: 2, Seen: 1, Shared: 7 * 1024, DisRuns: 2}
	headTokens := int64(10 + 32<<10 - 1000)
	want["heads"] = gapCost{Tar: 1000 + 32<<10, Tokens: 10 + headTokens, Bits: 70 + 7*headTokens, Runs: 2, Agree: 5, AgreeBits: 35, DisRuns: 2}
	bodyTokens := int64((8<<10)/100 + 40<<10 - 32<<10 - 8100)
	want["bodies"] = gapCost{Tar: body, Tokens: bodyTokens, Bits: 7 * bodyTokens, Runs: 1, DisRuns: 1}
	check("second layer")
}

// fakePayloads hands out n empty payloads: files stored without a parse.
type fakePayloads struct{ n int }

func (f *fakePayloads) Next() (io.ReadCloser, error) {
	if f.n == 0 {
		return nil, io.EOF
	}
	f.n--
	return io.NopCloser(strings.NewReader("")), nil
}

func (f *fakePayloads) Close() error { return nil }
