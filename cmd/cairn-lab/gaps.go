package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"sort"

	"github.com/klauspost/compress/zstd"
	"github.com/vbatts/tar-split/tar/storage"

	"github.com/cairn-registry/cairn/internal/dedup"
	"github.com/cairn-registry/cairn/internal/dedup/pack"
)

// Where the input copies do not cover lies, by kind, in bytes of a
// level-6 layer's tar: what a restore still searches.
type gapKinds struct {
	Headers int64 `json:"headers"` // tar headers and padding
	Small   int64 `json:"small"`   // files below pack.MinParseFile (no parse)
	Large   int64 `json:"large"`   // files above the size a stream decodes with tokens
	Heads   int64 `json:"heads"`   // parsed files' first 32 KiB
	Bodies  int64 `json:"bodies"`  // parsed files past their first 32 KiB
}

func (g *gapKinds) add(o gapKinds) {
	g.Headers += o.Headers
	g.Small += o.Small
	g.Large += o.Large
	g.Heads += o.Heads
	g.Bodies += o.Bodies
}

// maxFollowedFile mirrors the pack store's limit on files streamed with
// their tokens.
const maxFollowedFile = 32 << 20

// span is an interval [from, to) of tar offsets.
type span struct{ from, to int64 }

// copySpans are the tar intervals r's copies and spans cover (a rebuild
// searches none of them), in order.
func copySpans(r *dedup.Recipe) []span {
	var covered []span
	var base int64
	for _, m := range r.Compression.Members {
		m.Stretches(func(in, size int64, _ bool) {
			covered = append(covered, span{base + in, base + in + size})
		})
		base += m.Size
	}
	sort.Slice(covered, func(i, j int) bool { return covered[i].from < covered[j].from })
	return covered
}

// gapsOf sorts the bytes of r's tar its copies and spans do not cover.
func gapsOf(r *dedup.Recipe) (gapKinds, error) {
	var g gapKinds
	covered := copySpans(r)
	k := 0
	// uncovered returns how many bytes of [from, to) no copy covers.
	uncovered := func(from, to int64) int64 {
		for k < len(covered) && covered[k].to <= from {
			k++
		}
		n := to - from
		for j := k; j < len(covered) && covered[j].from < to; j++ {
			n -= min(covered[j].to, to) - max(covered[j].from, from)
		}
		return n
	}
	err := tarEntries(r, func(e *storage.Entry, off int64) {
		switch e.Type {
		case storage.SegmentType:
			g.Headers += uncovered(off, off+int64(len(e.Payload)))
		case storage.FileType:
			n := e.Size
			switch {
			case n < pack.MinParseFile:
				g.Small += uncovered(off, off+n)
			case n > maxFollowedFile:
				g.Large += uncovered(off, off+n)
			default:
				head := min(n, 32<<10)
				g.Heads += uncovered(off, off+head)
				g.Bodies += uncovered(off+head, off+n)
			}
		}
	})
	return g, err
}

// tarEntries calls fn with each entry of r's tar-split metadata, in order,
// and the tar offset where its bytes start.
func tarEntries(r *dedup.Recipe, fn func(e *storage.Entry, off int64)) error {
	zr, err := zstd.NewReader(bytes.NewReader(r.Tar.Meta), zstd.WithDecoderConcurrency(1))
	if err != nil {
		return err
	}
	defer zr.Close()
	dec := json.NewDecoder(zr)
	var off int64
	for {
		var e storage.Entry
		if err := dec.Decode(&e); errors.Is(err, io.EOF) {
			return nil
		} else if err != nil {
			return err
		}
		fn(&e, off)
		switch e.Type {
		case storage.SegmentType:
			off += int64(len(e.Payload))
		case storage.FileType:
			off += e.Size
		}
	}
}

// writeGaps prints where the uncovered input of a setting's level-6
// layers lies, as shares of their tar bytes.
func writeGaps(w io.Writer, s *followSetting) {
	var tar int64
	for _, l := range s.Layers {
		tar += l.TarBytes
	}
	g := s.Gaps
	share := func(n int64) string { return fmt.Sprintf("%.1f%%", 100*float64(n)/float64(max(tar, 1))) }
	fmt.Fprintf(w, "\nlevel-6 input not covered by copies (parses %v), share of %.1f MB of tar:\n", s.Parses, float64(tar)/1e6)
	fmt.Fprintf(w, "  tar headers and padding  %s\n", share(g.Headers))
	fmt.Fprintf(w, "  files < %d KiB            %s\n", pack.MinParseFile>>10, share(g.Small))
	fmt.Fprintf(w, "  files > %d MiB           %s\n", maxFollowedFile>>20, share(g.Large))
	fmt.Fprintf(w, "  other files' first 32 KiB %s\n", share(g.Heads))
	fmt.Fprintf(w, "  other files past 32 KiB  %s\n", share(g.Bodies))
}
