package main

import (
	"context"
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"fmt"
	"io"

	"github.com/opencontainers/go-digest"
	"github.com/vbatts/tar-split/tar/storage"

	"github.com/cairn-registry/cairn/internal/bench/dataset"
	"github.com/cairn-registry/cairn/internal/dedup"
	"github.com/cairn-registry/cairn/internal/dedup/layer"
	"github.com/cairn-registry/cairn/internal/dedup/pack"
	"github.com/cairn-registry/cairn/internal/dedup/recompress"
	"github.com/cairn-registry/cairn/internal/dedup/recompress/deflate"
)

// Searched stretches as exceptions (issue 27). What a restore of a level-6
// layer still searches (gaps.go) could be written into the layer's recipe
// instead, as the original stream's own tokens there: the restore would
// search nothing. gapBits measures what that would store, in the bits the
// original spends on those tokens, and how much of it an earlier layer
// already has: the same tokens from the same offset of the same file (or,
// for tar headers and small files, before the same next file), which a
// store keeping such runs once could share. It also tells, of the searched
// tokens inside files stored as parses, which the file's own parse has too
// (same offset, same token): an exception list need only hold the others.

// gapCost is one kind of searched input.
type gapCost struct {
	Tar    int64 `json:"tarBytes"`   // input bytes the tokens stand for
	Tokens int64 `json:"tokens"`     // the original's tokens there
	Bits   int64 `json:"bits"`       // what the original spends on them
	Shared int64 `json:"sharedBits"` // of Bits, runs an earlier layer has
	Runs   int64 `json:"runs"`       // runs of consecutive searched tokens
	Seen   int64 `json:"sharedRuns"` // of Runs, ones an earlier layer has
	// Of Tokens and Bits, the tokens the file's own parse has at the same
	// offset; DisRuns are the runs of the others.
	Agree     int64 `json:"agreeTokens"`
	AgreeBits int64 `json:"agreeBits"`
	DisRuns   int64 `json:"disagreeRuns"`
}

// gapBits is gapCost by kind over a setting's level-6 layers.
type gapBits struct {
	Blob  int64               `json:"blobBytes"`
	Kinds map[string]*gapCost `json:"kinds"`
	// Stored blocks have no tokens: their bytes are the input's, and a
	// restore searches them today to find that storing them is best.
	StoredBlocks int64 `json:"storedBlocks"`
	StoredTar    int64 `json:"storedTarBytes"`

	seen map[[32]byte]bool // runs of the layers measured so far
}

// gapKindNames are gapKinds' kinds, in print order.
var gapKindNames = []string{"headers", "small", "heads", "bodies", "large"}

// measure adds layer l, deduplicated into r, to g: it decodes l's
// blob (stdlib gzip, one member or more) and charges each token no copy
// covers to the kind of tar bytes it starts in.
func (g *gapBits) measure(ctx context.Context, l *dataset.Layer, r *dedup.Recipe, files parseStreamer) error {
	if g.Kinds == nil {
		g.Kinds, g.seen = map[string]*gapCost{}, map[[32]byte]bool{}
		for _, k := range gapKindNames {
			g.Kinds[k] = &gapCost{}
		}
	}
	ents, err := tarLayout(r)
	if err != nil {
		return err
	}
	blob, err := layerBlob(l)
	if err != nil {
		return err
	}
	g.Blob += int64(len(blob))
	ps, err := files.StreamParses(ctx, r.Tar.Files, nil)
	if err != nil {
		return err
	}
	defer ps.Close()
	w := gapWalk{g: g, ents: ents, covered: copySpans(r), parses: &parseCursor{ps: ps}}
	var base int64 // tar offset of the member's first byte
	for p := 0; p < len(blob); {
		n, err := recompress.HeaderLen(blob[p:])
		if err != nil {
			return fmt.Errorf("member at %d: %w", p, err)
		}
		var d deflate.Decoder
		err = eachBlock(&d, blob[p+n:], func(b *deflate.Block) {
			in := base + b.In
			if b.Type == deflate.BlockStored && b.Size > 0 {
				g.StoredBlocks++
				g.StoredTar += int64(b.Size)
			}
			for _, t := range b.Tokens {
				w.token(in, t, b.TokenBits(t))
				in += int64(t.Size())
			}
		})
		if err != nil {
			return fmt.Errorf("member at %d: %w", p, err)
		}
		if w.err != nil {
			return w.err
		}
		w.end()
		base += d.Out()
		p += n + int((d.Bits()+7)/8) + 8 // the member's trailer
	}
	if base != l.TarSize {
		return fmt.Errorf("blob inflates to %d bytes, want %d", base, l.TarSize)
	}
	return nil
}

// eachBlock decodes raw DEFLATE stream with d and calls f with each
// block, keeping of the output only the window matches reach into.
func eachBlock(d *deflate.Decoder, stream []byte, f func(*deflate.Block)) error {
	d.Reset(stream)
	var out []byte
	for {
		b, o, err := d.Next(out)
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return err
		}
		f(b)
		out = append(o[:0], o[max(0, len(o)-32<<10):]...)
	}
}

// tarEntry is one tar entry's place and kind; for a file, its digest, and
// for headers and padding, the digest of the next file (what the run is
// found by).
type tarEntry struct {
	off, end int64
	kind     string
	file     digest.Digest
	ord      int // a file's place among the recipe's files
}

// tarLayout lists r's tar entries with their kinds, as gapsOf sorts them.
func tarLayout(r *dedup.Recipe) ([]tarEntry, error) {
	var ents []tarEntry
	next := 0 // the next payload in r.Tar.Files
	err := tarEntries(r, func(e *storage.Entry, off int64) {
		switch {
		case e.Type == storage.SegmentType:
			ents = append(ents, tarEntry{off: off, end: off + int64(len(e.Payload)), kind: "headers"})
		case e.Size > 0:
			kind := "heads"
			switch {
			case e.Size < pack.MinParseFile:
				kind = "small"
			case e.Size > maxFollowedFile:
				kind = "large"
			}
			var d digest.Digest
			if next < len(r.Tar.Files) {
				d = r.Tar.Files[next].Digest
			}
			ents = append(ents, tarEntry{off: off, end: off + e.Size, kind: kind, file: d, ord: next})
			next++
		}
	})
	// Headers are found by the file after them.
	var after digest.Digest
	for i := len(ents) - 1; i >= 0; i-- {
		if ents[i].kind == "headers" {
			ents[i].file = after
		} else {
			after = ents[i].file
		}
	}
	return ents, err
}

// parseStreamer hands out a layer's files with their parses' tokens
// (pack.Store).
type parseStreamer interface {
	StreamParses(ctx context.Context, files []layer.File, want func(i int) bool) (layer.Payloads, error)
}

// parseCursor reads a layer's files in order for the tokens of their
// parses.
type parseCursor struct {
	ps   layer.Payloads
	next int // files read so far
	// The last file read: where each of its parse's tokens starts.
	offs []int64
	toks []deflate.Token
	k    int // the first token not before the last offset asked
}

// load reads files up to the j-th (counting from 0) and keeps its parse's
// tokens, none for a file stored otherwise.
func (pc *parseCursor) load(j int) error {
	for pc.next <= j {
		rc, err := pc.ps.Next()
		if err != nil {
			return err
		}
		pc.next++
		pc.offs, pc.toks, pc.k = pc.offs[:0], pc.toks[:0], 0
		if pc.next-1 == j {
			err = pc.keep(rc)
		}
		rc.Close()
		if err != nil {
			return err
		}
	}
	return nil
}

func (pc *parseCursor) keep(rc io.Reader) error {
	add := func(ts []deflate.Token) {
		off := int64(0)
		if n := len(pc.offs); n > 0 {
			off = pc.offs[n-1] + int64(pc.toks[n-1].Size())
		}
		for _, t := range ts {
			pc.offs, pc.toks = append(pc.offs, off), append(pc.toks, t)
			off += int64(t.Size())
		}
	}
	switch p := rc.(type) {
	case *pack.Parsed:
		add(p.Tokens)
	case *pack.ParsedStream:
		p.Follow(func(_ int, _, _ int64, ts []deflate.Token, _ []deflate.Mark) { add(ts) })
		_, err := io.Copy(io.Discard, p)
		return err
	}
	return nil
}

// has reports whether the parse has token t at file offset x; offsets are
// asked in order.
func (pc *parseCursor) has(x int64, t deflate.Token) bool {
	for pc.k < len(pc.offs) && pc.offs[pc.k] < x {
		pc.k++
	}
	return pc.k < len(pc.offs) && pc.offs[pc.k] == x && pc.toks[pc.k] == t
}

// gapWalk follows one layer's tokens in order.
type gapWalk struct {
	g       *gapBits
	ents    []tarEntry
	covered []span
	e, c    int // the entry and the copy span at or after the last token
	parses  *parseCursor
	err     error
	disRun  bool // the last searched token was one the parse has not

	// The run under way: consecutive searched tokens in one entry.
	run     bool
	runEnt  int
	runKind string
	runBits int64
	h       []byte // the run's entry, start and tokens, hashed at its end
}

// token charges token t, at tar offset in and taking bits, if no copy
// covers it.
func (w *gapWalk) token(in int64, t deflate.Token, bits int) {
	for w.c < len(w.covered) && w.covered[w.c].to <= in {
		w.c++
	}
	if w.c < len(w.covered) && w.covered[w.c].from <= in {
		w.end()
		return
	}
	for w.e < len(w.ents) && w.ents[w.e].end <= in {
		w.e++
	}
	if w.e >= len(w.ents) {
		w.end()
		return // the zero blocks ending the tar
	}
	en := w.ents[w.e]
	kind := en.kind
	if kind == "heads" && in-en.off >= 32<<10 {
		kind = "bodies"
	}
	if w.run && (w.runEnt != w.e || w.runKind != kind) {
		w.end()
	}
	if !w.run {
		w.run, w.runEnt, w.runKind, w.runBits = true, w.e, kind, 0
		w.h = append(w.h[:0], kind...)
		w.h = append(w.h, en.file...)
		w.h = binary.LittleEndian.AppendUint64(w.h, uint64(in-en.off))
	}
	w.h = binary.LittleEndian.AppendUint32(w.h, uint32(t))
	w.runBits += int64(bits)
	k := w.g.Kinds[kind]
	k.Tar += int64(t.Size())
	k.Tokens++
	k.Bits += int64(bits)
	if w.agrees(en, in-en.off, t) {
		k.Agree++
		k.AgreeBits += int64(bits)
		w.disRun = false
	} else if !w.disRun {
		k.DisRuns++
		w.disRun = true
	}
}

// agrees reports whether the parse of entry en's file has token t at
// offset x of the file.
func (w *gapWalk) agrees(en tarEntry, x int64, t deflate.Token) bool {
	if w.parses == nil || en.kind == "headers" || w.err != nil {
		return false
	}
	if w.err = w.parses.load(en.ord); w.err != nil {
		return false
	}
	return w.parses.has(x, t)
}

// end closes the run under way, if any: an earlier layer has it when one
// ran the same tokens from the same place.
func (w *gapWalk) end() {
	if !w.run {
		return
	}
	w.run, w.disRun = false, false
	k := w.g.Kinds[w.runKind]
	k.Runs++
	key := sha256.Sum256(w.h)
	if w.g.seen[key] {
		k.Seen++
		k.Shared += w.runBits
		return
	}
	w.g.seen[key] = true
}

// writeGapBits prints g for setting s against what the setting stores.
func writeGapBits(w io.Writer, s *followSetting) {
	g := s.GapBits
	if g.Kinds == nil {
		return
	}
	fmt.Fprintf(w, "\nlevel-6 searched input written as the original's tokens instead (parses %v), %.1f MB of blobs, %.1f MB stored:\n", s.Parses, float64(g.Blob)/1e6, float64(s.Stored)/1e6)
	fmt.Fprintf(w, "  %-10s %9s %10s %9s %8s %9s %10s %8s %10s %9s %9s\n", "kind", "tar MB", "tokens", "MB", "of blob", "runs", "shared MB", "runs", "in parse", "other MB", "runs")
	var all gapCost
	row := func(name string, k *gapCost) {
		fmt.Fprintf(w, "  %-10s %9.1f %10d %9.2f %7.1f%% %9d %10.2f %7.1f%% %9.1f%% %9.2f %9d\n", name, float64(k.Tar)/1e6, k.Tokens,
			float64(k.Bits)/8e6, 100*float64(k.Bits)/8/float64(max(g.Blob, 1)), k.Runs, float64(k.Shared)/8e6, 100*float64(k.Seen)/float64(max(k.Runs, 1)),
			100*float64(k.Agree)/float64(max(k.Tokens, 1)), float64(k.Bits-k.AgreeBits)/8e6, k.DisRuns)
	}
	for _, name := range gapKindNames {
		k := g.Kinds[name]
		row(name, k)
		all.Tar += k.Tar
		all.Tokens += k.Tokens
		all.Bits += k.Bits
		all.Shared += k.Shared
		all.Runs += k.Runs
		all.Seen += k.Seen
		all.Agree += k.Agree
		all.AgreeBits += k.AgreeBits
		all.DisRuns += k.DisRuns
	}
	row("all", &all)
	fmt.Fprintf(w, "  stored blocks: %d, %.1f MB of tar (no tokens; not in the rows above)\n", g.StoredBlocks, float64(g.StoredTar)/1e6)
	fmt.Fprintf(w, "  (MB: the original's bits for those tokens, without block headers; shared: runs an earlier layer has, same tokens from the same offset of the same file;\n   in parse: tokens the file's own parse has at the same offset; other MB and runs: the rest, what an exception list would hold)\n")
}
