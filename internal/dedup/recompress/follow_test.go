package recompress

import (
	"bytes"
	"compress/gzip"
	"context"
	"fmt"
	"io"
	"slices"
	"testing"

	"github.com/cairn-registry/cairn/internal/dedup/recompress/deflate"
	"github.com/cairn-registry/cairn/internal/testutil/layertest"
)

// sourceFile is one file of a corpus laid out as a tar lays out files.
type sourceFile struct {
	off  int64
	body []byte
}

// goSources lays out Go's own sources (real text, as a layer's files are)
// up to about n bytes as files of about fileSize bytes, each after a
// 512-byte header of its own, as a tar does.
func goSources(t testing.TB, n, fileSize int) ([]byte, []sourceFile) {
	t.Helper()
	var input []byte
	var files []sourceFile
	for _, f := range layertest.GoSources(t, n, fileSize) {
		hdr := make([]byte, 512)
		copy(hdr, f.Name)
		input = append(input, hdr...)
		files = append(files, sourceFile{off: int64(len(input)), body: f.Body})
		input = append(input, f.Body...)
		input = append(input, make([]byte, (512-len(f.Body)%512)%512)...)
	}
	return input, files
}

// ownParse is what a parse frame of body at level holds: its tokens when
// compressed on its own.
func ownParse(t testing.TB, level int, body []byte) []deflate.Token {
	t.Helper()
	var buf bytes.Buffer
	w, err := deflate.NewWriter(&buf, level)
	if err != nil {
		t.Fatal(err)
	}
	w.KeepTokens()
	w.Write(body)
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	var toks []deflate.Token
	out, err := deflate.NewDecoder(buf.Bytes()).DecodeAll(nil, func(b *deflate.Block) error {
		toks = append(toks, b.Tokens...)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(out, body) {
		t.Fatal("own parse does not inflate to the file")
	}
	return toks
}

// ownParses returns the own parse at level of each file large enough to
// be stored as one (nil for the others).
func ownParses(t testing.TB, files []sourceFile, level int) [][]deflate.Token {
	toks := make([][]deflate.Token, len(files))
	for i, f := range files {
		if len(f.body) >= 4<<10 {
			toks[i] = ownParse(t, level, f.body)
		}
	}
	return toks
}

// parsesOf returns the parses of the files keep selects, with marks as a
// decoder gives them.
func parsesOf(files []sourceFile, toks [][]deflate.Token, level int, keep func(i int) bool) *Parses {
	ps := &Parses{}
	for i, f := range files {
		if toks[i] != nil && keep(i) {
			marks, size := marksEvery(toks[i], 1000)
			ps.Add(i, f.off, size, level, toks[i], marks)
		}
	}
	return ps
}

// addPieces adds the parse toks of file i at off to ps in pieces of n
// tokens (whole when n is 0), as pack.ParsedStream hands a large file's.
func addPieces(ps *Parses, i int, off int64, level int, toks []deflate.Token, n int) {
	if n == 0 {
		n = len(toks)
	}
	for first := 0; first < len(toks); first += n {
		piece := toks[first:min(first+n, len(toks))]
		marks, size := marksEvery(piece, 700)
		ps.AddPiece(i, first, off, size, level, piece, marks)
		off += size
	}
}

// marksEvery returns marks every n tokens of toks, as a decoder gives
// them per block, and the bytes toks cover.
func marksEvery(toks []deflate.Token, n int) ([]deflate.Mark, int64) {
	var marks []deflate.Mark
	var size int64
	for k, t := range toks {
		if k%n == 0 {
			marks = append(marks, deflate.Mark{Token: k, In: size})
		}
		size += int64(t.Size())
	}
	return marks, size
}

// TestTokenAtMarks: a parse finds the first token at or after every
// offset, with marks given (as a decoder's blocks) and with none.
func TestTokenAtMarks(t *testing.T) {
	var body []byte
	for i := range 3000 {
		body = fmt.Appendf(body, "token %d of a parse, at a known offset; ", i*i%997)
	}
	toks := ownParse(t, 6, body)
	marks, size := marksEvery(toks, 333)
	given := &Parse{Tokens: toks, size: size, marks: marks}
	none := &Parse{Tokens: toks, size: size}
	i, at := 0, int64(0) // the answer, walked
	for rel := int64(0); rel <= size; rel += 7 {
		for i < len(toks) && at < rel {
			at += int64(toks[i].Size())
			i++
		}
		for _, p := range []*Parse{given, none} {
			if gi, gat := p.tokenAt(rel); gi != i || gat != at {
				t.Fatalf("offset %d (marks given: %v): token %d at %d, want %d at %d", rel, p == given, gi, gat, i, at)
			}
		}
	}
}

// TestFollowPieces: parses handed in pieces (a large file's) are checked
// and followed as a whole parse is: copies lie inside pieces, cover most
// of the input, and a rebuild with the same pieces takes them.
func TestFollowPieces(t *testing.T) {
	input, files := goSources(t, 3<<20, 1<<20)
	blob, rec := gzipRecipe(t, 6, input)
	own := ownParses(t, files, 6)
	inPieces := func() *Parses {
		ps := &Parses{}
		for i, f := range files {
			addPieces(ps, i, f.off, 6, own[i], 5000)
		}
		return ps
	}
	kept, err := CheckFollowing(io.Discard, rec, bytes.NewReader(input), bytes.NewReader(blob), inPieces())
	if err != nil {
		t.Fatal(err)
	}
	covered, copies := kept.CopiedBytes(), 0
	for _, m := range kept.Members {
		for _, c := range m.Copies {
			copies++
			if c.First/5000 != (c.First+c.Count-1)/5000 {
				t.Fatalf("copy of tokens %d+%d spans pieces of 5000", c.First, c.Count)
			}
		}
	}
	t.Logf("%d copies cover %d of %d bytes", copies, covered, len(input))
	if covered < int64(len(input))*3/4 {
		t.Errorf("copies cover %d of %d bytes, want at least 3/4", covered, len(input))
	}
	var out bytes.Buffer
	if err := RebuildFollowing(&out, kept, bytes.NewReader(input), 2, inPieces()); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(out.Bytes(), blob) {
		t.Fatal("a rebuild following parses in pieces wrote other bytes than the blob")
	}
}

// gzipRecipe compresses input as compress/gzip does at level and finds its
// recipe.
func gzipRecipe(t testing.TB, level int, input []byte) ([]byte, Recipe) {
	t.Helper()
	var buf bytes.Buffer
	zw, _ := gzip.NewWriterLevel(&buf, level)
	zw.Write(input)
	zw.Close()
	blob := buf.Bytes()
	rec, err := FindRecipe(context.Background(), bytes.NewReader(blob), int64(len(blob)), func() io.Reader { return bytes.NewReader(input) })
	if err != nil {
		t.Fatal(err)
	}
	return blob, rec
}

// TestFollowCopies: the check of a compress/gzip level-6 blob finds the
// stretches its files' own parses give (most of the input), and a rebuild
// following them, or any subset of them, writes the blob bit for bit on
// one core or several; copies whose parse is missing, of another level or
// not where the copy says are searched instead.
func TestFollowCopies(t *testing.T) {
	size := 4 << 20
	if raceEnabled {
		size = 2 << 20 // one restart point still
	}
	input, files := goSources(t, size, 128<<10)
	blob, rec := gzipRecipe(t, 6, input)
	if len(rec.Members) != 1 || len(rec.Members[0].Restarts) == 0 {
		t.Fatalf("recipe %+v: want one member with restart points", rec.Members)
	}
	own6, own9 := ownParses(t, files, 6), ownParses(t, files, 9)
	all := func(int) bool { return true }
	var out bytes.Buffer
	kept, err := CheckFollowing(&out, rec, bytes.NewReader(input), bytes.NewReader(blob), parsesOf(files, own6, 6, all))
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(out.Bytes(), blob) {
		t.Fatal("checked rebuild differs from the blob")
	}
	copies := kept.Members[0].Copies
	var covered int64
	for _, c := range copies {
		covered += c.Size
	}
	t.Logf("%d files, %d bytes: %d copies cover %.1f%%", len(files), len(input), len(copies), 100*float64(covered)/float64(len(input)))
	if covered < int64(len(input))/2 {
		t.Fatalf("copies cover %d of %d input bytes, want at least half", covered, len(input))
	}

	rebuild := rebuildsBlob(t, input, blob)
	rebuild("all parses, one core", kept, parsesOf(files, own6, 6, all), 1)
	rebuild("all parses, four cores", kept, parsesOf(files, own6, 6, all), 4)
	rebuild("every other parse", kept, parsesOf(files, own6, 6, func(i int) bool { return i%2 == 0 }), 2)
	rebuild("no parses", kept, nil, 2)
	rebuild("parses of level 9", kept, parsesOf(files, own9, 9, all), 2)

	// Copies that do not check out against the parses: skipped.
	bad := kept
	bad.Members = slices.Clone(kept.Members)
	bad.Members[0].Copies = slices.Clone(copies)
	for i := range bad.Members[0].Copies {
		c := &bad.Members[0].Copies[i]
		switch i % 3 {
		case 0:
			c.First++
		case 1:
			c.Count--
		}
	}
	rebuild("copies that do not check out", bad, parsesOf(files, own6, 6, all), 2)
}

// rebuildsBlob returns a check that a rebuild of input with recipe r,
// following parses ps on procs cores, writes blob.
func rebuildsBlob(t *testing.T, input, blob []byte) func(name string, r Recipe, ps *Parses, procs int) {
	return func(name string, r Recipe, ps *Parses, procs int) {
		t.Helper()
		var out bytes.Buffer
		if err := RebuildFollowing(&out, r, bytes.NewReader(input), procs, ps); err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if !bytes.Equal(out.Bytes(), blob) {
			t.Fatalf("%s: rebuild differs from the blob", name)
		}
	}
}

// BenchmarkRebuildFollowing compares, on one core, a rebuild of a
// compress/gzip level-6 blob of Go sources in files of 128 KiB that
// follows its files' parses with today's, which searches throughout.
// MB/s are of the blob; the parses are decoded once, outside the timing.
func BenchmarkRebuildFollowing(b *testing.B) {
	input, files := goSources(b, 8<<20, 128<<10)
	blob, rec := gzipRecipe(b, 6, input)
	toks := ownParses(b, files, 6)
	all := func(int) bool { return true }
	parses := func() *Parses { return parsesOf(files, toks, 6, all) }
	rec, err := CheckFollowing(io.Discard, rec, bytes.NewReader(input), bytes.NewReader(blob), parses())
	if err != nil {
		b.Fatal(err)
	}
	for _, follow := range []bool{false, true} {
		name := "search"
		if follow {
			name = "follow"
		}
		b.Run(name, func(b *testing.B) {
			b.SetBytes(int64(len(blob)))
			for b.Loop() {
				var ps *Parses
				if follow {
					ps = parses()
				}
				if err := RebuildFollowing(io.Discard, rec, bytes.NewReader(input), 1, ps); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// FuzzFollowCopies feeds files made from the fuzzer's bytes (repeated,
// mutated and laid out among Go sources, so that a member has restart
// points) through the check that finds copies (and spans) and through
// rebuilds that follow a subset of the parses, some copies made wrong:
// every rebuild writes the blob, searching where a copy does not check
// out.
//
//cairn:fuzztime 30s
func FuzzFollowCopies(f *testing.F) {
	f.Add([]byte("package main\n\nfunc main() {}\n"), uint8(6), uint16(1))
	f.Add(bytes.Repeat([]byte{0}, 5000), uint8(9), uint16(7))
	f.Add([]byte("\x00\x01\x02abcabcabcabc"), uint8(4), uint16(0xffff))
	f.Add([]byte("spans of a layer's tokens"), uint8(6), uint16(0x1803))
	f.Add(bytes.Repeat([]byte{7, 7, 0}, 3000), uint8(6), uint16(0x9001))
	base := layertest.GoSources(f, 2<<20, 64<<10)
	f.Fuzz(func(t *testing.T, seed []byte, level uint8, pick uint16) {
		lv := 4 + int(level)%6
		srcs := base
		if pick&0x8000 != 0 {
			// A member too small for restart points, followed as one
			// segment.
			srcs = base[:max(1, len(base)/4)]
		}
		// Files: the Go sources, every third replaced by the seed grown
		// to the source's size (repeated, with a byte changed per copy).
		var input []byte
		var files []sourceFile
		for i, src := range srcs {
			body := src.Body
			if i%3 == 1 && len(seed) > 0 {
				body = make([]byte, 0, len(src.Body))
				for k := 0; len(body) < len(src.Body); k++ {
					body = append(body, seed...)
					body[len(body)-1] ^= byte(k)
				}
			}
			hdr := make([]byte, 512)
			copy(hdr, src.Name)
			input = append(input, hdr...)
			files = append(files, sourceFile{off: int64(len(input)), body: body})
			input = append(input, body...)
			input = append(input, make([]byte, (512-len(body)%512)%512)...)
		}
		blob, rec := gzipRecipe(t, lv, input)
		open := func() io.Reader { return bytes.NewReader(input) }
		some := func(salt uint16) func(int) bool {
			return func(i int) bool { return (pick^salt)>>(uint(i)%16)&1 == 1 }
		}
		own := ownParses(t, files, lv)
		// Stored parses are at level 6 whatever layer stored them first
		// (pack.ParseLevel): beside the member's own level, or, with
		// pick's bit 14, alone, when only the level's own may be taken.
		six := own
		if lv != 6 {
			six = ownParses(t, files, 6)
		}
		// With pick's bit 13 parses come in pieces, as a large file's
		// do, cut differently for the check and the rebuild: a copy
		// across pieces is searched.
		piece := 0
		if pick&0x2000 != 0 {
			piece = 300
		}
		parses := func(salt uint16) *Parses {
			ps := &Parses{}
			for i, f := range files {
				if !some(salt)(i) {
					continue
				}
				if own[i] != nil && (lv == 6 || pick&0x4000 == 0) {
					addPieces(ps, i, f.off, lv, own[i], piece+int(salt%7)*50)
				}
				if lv != 6 && six[i] != nil {
					addPieces(ps, i, f.off, 6, six[i], piece+int(salt%7)*50)
				}
			}
			return ps
		}
		// With pick's bit 12 the check keeps spans and block headers
		// too: the rebuild then searches only where neither copies nor
		// spans reach.
		ps := parses(0)
		ps.KeepSpans, ps.KeepHeaders = pick&0x1000 != 0, pick&0x1000 != 0
		kept, err := CheckFollowing(io.Discard, rec, open(), bytes.NewReader(blob), ps)
		if err != nil {
			t.Fatal(err)
		}
		if lv != 6 && pick&0x4000 != 0 && kept.HasCopies() {
			t.Fatalf("a level-%d member follows level-6 parses", lv)
		}
		for m := range kept.Members {
			for i := range kept.Members[m].Copies {
				c := &kept.Members[m].Copies[i]
				switch (int(pick) + i) % 7 {
				case 0:
					c.First++
				case 1:
					c.Source++
				}
			}
		}
		var out bytes.Buffer
		err = RebuildFollowing(&out, kept, open(), 2, parses(0x5a5a))
		if err != nil {
			t.Fatal(err) // the copies that do not check out are searched
		}
		if !bytes.Equal(out.Bytes(), blob) {
			t.Fatal("a rebuild following parses wrote other bytes than the blob")
		}
	})
}

// TestFollowSmallMember: a member too small for restart points (most small
// layers) is checked and rebuilt as one segment when parses are at hand:
// its copies cover most of it, and a rebuild following them, or none,
// writes the blob. Without copies a restore takes the encoder's path.
func TestFollowSmallMember(t *testing.T) {
	input, files := goSources(t, 512<<10, 64<<10)
	blob, rec := gzipRecipe(t, 6, input)
	if rec.HasRestarts() {
		t.Fatalf("a member of %d bytes has restart points", len(input))
	}
	own := ownParses(t, files, 6)
	all := func(int) bool { return true }
	kept, err := CheckFollowing(io.Discard, rec, bytes.NewReader(input), bytes.NewReader(blob), parsesOf(files, own, 6, all))
	if err != nil {
		t.Fatal(err)
	}
	var covered int64
	for _, c := range kept.Members[0].Copies {
		covered += c.Size
	}
	t.Logf("copies cover %d of %d bytes", covered, len(input))
	if covered < int64(len(input))/2 {
		t.Errorf("copies cover %d of %d bytes, want at least half", covered, len(input))
	}
	for _, ps := range []*Parses{parsesOf(files, own, 6, all), parsesOf(files, own, 6, func(i int) bool { return i%2 == 0 }), nil} {
		var out bytes.Buffer
		if err := RebuildFollowing(&out, kept, bytes.NewReader(input), 1, ps); err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(out.Bytes(), blob) {
			t.Fatal("a rebuild following parses wrote other bytes than the blob")
		}
	}
}

// checkedGoSources is n bytes of Go source in a tar-like input, its
// compress/gzip level-6 blob, the recipe a check following the files'
// parses kept (with block headers, and spans if asked), and a function
// giving those parses afresh.
func checkedGoSources(tb testing.TB, n int, spans bool) (input, blob []byte, kept Recipe, parses func() *Parses) {
	tb.Helper()
	input, files := goSources(tb, n, 64<<10)
	blob, rec := gzipRecipe(tb, 6, input)
	own := ownParses(tb, files, 6)
	parses = func() *Parses { return parsesOf(files, own, 6, func(int) bool { return true }) }
	ps := parses()
	ps.KeepHeaders, ps.KeepSpans = true, spans
	kept, err := CheckFollowing(io.Discard, rec, bytes.NewReader(input), bytes.NewReader(blob), ps)
	if err != nil {
		tb.Fatal(err)
	}
	return input, blob, kept, parses
}

// TestFollowHeaders: a check keeps the original's dynamic block headers
// (one per block of the segments it reproduced); a rebuild writing them
// back, with or without the parses, writes the blob; a header that cannot
// be read is derived again, and one sending other codes gives other bits,
// which the digest catches.
func TestFollowHeaders(t *testing.T) {
	input, blob, kept, parses := checkedGoSources(t, 3<<20, false)
	var headers int
	for _, m := range kept.Members {
		headers += len(m.Headers)
		for i := 1; i < len(m.Headers); i++ {
			if m.Headers[i].In <= m.Headers[i-1].In {
				t.Fatal("headers out of input order")
			}
		}
	}
	// Go's level 6 ends a block every 16K tokens: ~50-100 KiB of input.
	if min := len(input) / (200 << 10); headers < min {
		t.Fatalf("%d headers kept for %d bytes, want at least %d", headers, len(input), min)
	}
	rebuild := func(r Recipe, ps *Parses) []byte {
		t.Helper()
		var out bytes.Buffer
		if err := RebuildFollowing(&out, r, bytes.NewReader(input), 2, ps); err != nil {
			t.Fatal(err)
		}
		return out.Bytes()
	}
	if !bytes.Equal(rebuild(kept, parses()), blob) {
		t.Fatal("a rebuild with headers and parses wrote other bytes than the blob")
	}
	noCopies := kept
	noCopies.Members = slices.Clone(kept.Members)
	for i := range noCopies.Members {
		noCopies.Members[i].Copies = nil
	}
	if !bytes.Equal(rebuild(noCopies, &Parses{}), blob) {
		t.Fatal("a rebuild with headers alone wrote other bytes than the blob")
	}
	damaged := func(f func(h *deflate.BlockHeader)) Recipe {
		r := noCopies
		r.Members = slices.Clone(noCopies.Members)
		for i := range r.Members {
			hs := slices.Clone(r.Members[i].Headers)
			for k := range hs {
				hs[k].Data = slices.Clone(hs[k].Data)
				f(&hs[k])
			}
			r.Members[i].Headers = hs
		}
		return r
	}
	// All ones: 288 literal/length codes, more than a block may send.
	if !bytes.Equal(rebuild(damaged(func(h *deflate.BlockHeader) {
		for i := range h.Data {
			h.Data[i] = 0xff
		}
	}), &Parses{}), blob) {
		t.Fatal("unreadable headers were not derived again")
	}
	// Headers whose bits do not fill their bytes, or out of order, are
	// derived again too: no header may fail a restore.
	if !bytes.Equal(rebuild(damaged(func(h *deflate.BlockHeader) { h.Bits -= 8 }), &Parses{}), blob) {
		t.Fatal("headers shorter than their bytes were not derived again")
	}
	if !bytes.Equal(rebuild(damaged(func(h *deflate.BlockHeader) { h.In = 1 << 40 }), &Parses{}), blob) {
		t.Fatal("headers out of order were not derived again")
	}
	var out bytes.Buffer
	// Each block with the next block's header: codes that read, other
	// than its own.
	swapped := noCopies
	swapped.Members = slices.Clone(noCopies.Members)
	for i := range swapped.Members {
		hs := slices.Clone(swapped.Members[i].Headers)
		for k := range hs {
			next := swapped.Members[i].Headers[(k+1)%len(hs)]
			hs[k].Bits, hs[k].Data = next.Bits, next.Data
		}
		swapped.Members[i].Headers = hs
	}
	out.Reset()
	if err := RebuildFollowing(&out, swapped, bytes.NewReader(input), 2, &Parses{}); err == nil && bytes.Equal(out.Bytes(), blob) {
		t.Fatal("headers sending other codes wrote the blob: headers are not written back")
	}
}

// BenchmarkRebuildHeaders times a level-6 rebuild following parses and
// one searching everywhere (parses off), with the blocks' codes derived
// and with stored headers.
func BenchmarkRebuildHeaders(b *testing.B) {
	input, _, kept, parses := checkedGoSources(b, 8<<20, false)
	without := func(copies, headers bool) Recipe {
		r := kept
		r.Members = slices.Clone(kept.Members)
		for i := range r.Members {
			if copies {
				r.Members[i].Copies = nil
			}
			if headers {
				r.Members[i].Headers = nil
			}
		}
		return r
	}
	for _, bc := range []struct {
		name string
		r    Recipe
	}{
		{"copies/derived", without(false, true)}, {"copies/stored", kept},
		{"search/derived", without(true, true)}, {"search/stored", without(true, false)},
	} {
		b.Run(bc.name, func(b *testing.B) {
			b.SetBytes(int64(len(input)))
			for b.Loop() {
				if err := RebuildFollowing(io.Discard, bc.r, bytes.NewReader(input), 1, parses()); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
