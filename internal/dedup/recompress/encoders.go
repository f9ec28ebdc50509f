package recompress

import (
	"fmt"
	"io"
	"strconv"
	"strings"

	kflate "github.com/klauspost/compress/flate"
	"github.com/klauspost/compress/zstd"
	"github.com/klauspost/pgzip"

	"github.com/cairn-registry/cairn/internal/dedup/recompress/deflate"
)

// Encoder ids. Each names one implementation, level and (for pgzip) block
// size; the id is what a recipe stores and what Tally counts.
const (
	famStdlib   = "stdlib-gzip"
	famKlaus    = "klauspost-gzip"
	famPgzip    = "pgzip"
	famZstd     = "klauspost-zstd"
	pgzipHeader = 10 // pgzip's header when no Name/Extra/Comment is set
	gzipTrailer = 8
	// maxPgzipBlock bounds the block size an encoder id may name, well
	// above every candidate in pgzipBlocks.
	maxPgzipBlock = 16 << 20
)

// Levels tried. -1 is left out where it is an alias (stdlib: 6, klauspost
// and pgzip: 5) so each output is tried once. klauspost's StatelessCompression
// (-3) is left out: its output depends on how the producer split its writes.
var (
	stdlibLevels = []int{6, 9, 1, -2, 0, 2, 3, 4, 5, 7, 8}
	klausLevels  = []int{5, 9, 1, -2, 0, 2, 3, 4, 6, 7, 8}
	// pgzip's default block size (1 MiB) is what containers/image (podman,
	// buildah, skopeo) uses: it calls pgzip.NewWriterLevel without
	// SetConcurrency. The others are common explicit choices.
	pgzipBlocks = []int{1 << 20, 512 << 10, 256 << 10, 4 << 20}
	zstdLevels  = []int{2, 1, 3, 4} // zstd.EncoderLevel values; 2 is SpeedDefault
)

// bodyEncoder produces exactly the bytes a recipe member's encoder id names:
// a raw deflate body for gzip ids, a whole frame for zstd ids.
type bodyEncoder interface {
	io.Writer
	Close() error
}

// newEncoder opens the encoder named by id, writing to w, with procs
// cores for the encoders that use several.
func newEncoder(id string, w io.Writer, procs int) (bodyEncoder, error) {
	fam, level, block, err := parseID(id)
	if err != nil {
		return nil, err
	}
	switch fam {
	case famStdlib:
		// The copy of compress/flate: same output, and it reports block
		// boundaries for restart points.
		return deflate.NewWriter(w, level)
	case famKlaus:
		return kflate.NewWriter(w, level)
	case famPgzip:
		// The output does not depend on the blocks in flight
		// (concurrency.go): one per core.
		return newPgzip(w, level, block, pgzipInFlight(block, procs))
	case famZstd:
		// Nor on the concurrency, which overlaps at most two stages.
		return zstd.NewWriter(w, zstdOptions(level, procs)...)
	}
	return nil, fmt.Errorf("recompress: unknown encoder %q", id)
}

func parseID(id string) (fam string, level, block int, err error) {
	parts := strings.Split(id, "/")
	bad := fmt.Errorf("recompress: malformed encoder id %q", id)
	if len(parts) < 2 {
		return "", 0, 0, bad
	}
	level, err = strconv.Atoi(parts[1])
	if err != nil {
		return "", 0, 0, bad
	}
	fam = parts[0]
	switch fam {
	case famStdlib, famKlaus, famZstd:
		if len(parts) != 2 {
			return "", 0, 0, bad
		}
	case famPgzip:
		if len(parts) != 3 {
			return "", 0, 0, bad
		}
		block, err = parseBlock(parts[2])
		if err != nil {
			return "", 0, 0, bad
		}
	default:
		return "", 0, 0, bad
	}
	return fam, level, block, nil
}

func formatBlock(b int) string {
	if b%(1<<20) == 0 {
		return strconv.Itoa(b>>20) + "MiB"
	}
	return strconv.Itoa(b>>10) + "KiB"
}

func parseBlock(s string) (int, error) {
	mult := 0
	switch {
	case strings.HasSuffix(s, "MiB"):
		mult, s = 1<<20, strings.TrimSuffix(s, "MiB")
	case strings.HasSuffix(s, "KiB"):
		mult, s = 1<<10, strings.TrimSuffix(s, "KiB")
	default:
		return 0, fmt.Errorf("bad block size %q", s)
	}
	n, err := strconv.Atoi(s)
	// pgzip allocates whole blocks up front: a damaged recipe naming a
	// huge one must fail here, not exhaust the serving process's memory.
	if err != nil || n <= 0 || n > maxPgzipBlock/mult {
		return 0, fmt.Errorf("bad block size %q", s)
	}
	return n * mult, nil
}

func stdlibID(l int) string       { return famStdlib + "/" + strconv.Itoa(l) }
func klausID(l int) string        { return famKlaus + "/" + strconv.Itoa(l) }
func pgzipID(l, block int) string { return famPgzip + "/" + strconv.Itoa(l) + "/" + formatBlock(block) }
func zstdID(l int) string         { return famZstd + "/" + strconv.Itoa(l) }
func preferLevel(ls []int, first int) []int {
	out := []int{first}
	for _, l := range ls {
		if l != first {
			out = append(out, l)
		}
	}
	return out
}

// gzipCandidates orders encoder ids for one member by its fingerprints: the
// pgzip MTIME, the stdlib's closing empty stored block, and XFL (2 = best
// compression, 4 = fastest, as all three writers set it).
func gzipCandidates(m member) []string {
	xfl := m.header[8]
	hint := func(ls []int, def int) []int {
		switch xfl {
		case 2:
			return preferLevel(ls, 9)
		case 4:
			return preferLevel(ls, 1)
		}
		return preferLevel(ls, def)
	}
	var std, kl, pg []string
	for _, l := range hint(stdlibLevels, 6) {
		std = append(std, stdlibID(l))
	}
	for _, l := range hint(klausLevels, 5) {
		kl = append(kl, klausID(l))
	}
	for _, b := range pgzipBlocks {
		for _, l := range hint(klausLevels, 5) {
			pg = append(pg, pgzipID(l, b))
		}
	}
	isPgzip := string(m.header[4:8]) == string(pgzipMTime) && len(m.header) == pgzipHeader
	switch {
	case isPgzip:
		return concat(pg, kl, std)
	case m.endsSync:
		return concat(std, kl, pg)
	default:
		return concat(kl, std, pg)
	}
}

func zstdCandidates() []string {
	var ids []string
	for _, l := range zstdLevels {
		ids = append(ids, zstdID(l))
	}
	return ids
}

func concat(s ...[]string) []string {
	var out []string
	for _, x := range s {
		out = append(out, x...)
	}
	return out
}

// pgzipBody turns pgzip's complete gzip output into the deflate body alone.
type pgzipBody struct {
	z  *pgzip.Writer
	hw *stripWriter
}

func (p *pgzipBody) Write(b []byte) (int, error) { return p.z.Write(b) }

func (p *pgzipBody) Close() error {
	if err := p.z.Close(); err != nil {
		return err
	}
	return p.hw.finish()
}

// stripWriter drops the first skip bytes and withholds the last 8 (the gzip
// trailer) so only the deflate body reaches w.
type stripWriter struct {
	w    io.Writer
	skip int
	hold []byte
}

func (s *stripWriter) Write(p []byte) (int, error) {
	n := len(p)
	if s.skip > 0 {
		d := min(s.skip, len(p))
		s.skip -= d
		p = p[d:]
	}
	if len(s.hold)+len(p) <= gzipTrailer {
		s.hold = append(s.hold, p...)
		return n, nil
	}
	// Emit everything except the last 8 bytes of hold+p.
	out := len(s.hold) + len(p) - gzipTrailer
	if out <= len(s.hold) {
		if _, err := s.w.Write(s.hold[:out]); err != nil {
			return 0, err
		}
		s.hold = append(s.hold[:0], append(s.hold[out:], p...)...)
		return n, nil
	}
	if _, err := s.w.Write(s.hold); err != nil {
		return 0, err
	}
	rest := out - len(s.hold)
	if _, err := s.w.Write(p[:rest]); err != nil {
		return 0, err
	}
	s.hold = append(s.hold[:0], p[rest:]...)
	return n, nil
}

func (s *stripWriter) finish() error {
	if s.skip != 0 || len(s.hold) != gzipTrailer {
		return fmt.Errorf("recompress: pgzip output shorter than header and trailer")
	}
	return nil
}
