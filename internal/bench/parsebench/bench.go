// Package parsebench measures how far a layer's DEFLATE parse is a
// property of the files in it: whether the tokens (literals and matches)
// covering a file agree between two layers holding it, and with the parse
// of the file compressed on its own at the layer's settings. This is the
// premise of rebuilding a layer without searching for its matches again
// (issue 27): if the parses agree, a rebuild can decode the stored parses
// and Huffman-code them instead of searching.
//
// Tokens and block headers come from deflate.Decoder (Inflate adapts it),
// since compress/flate exposes neither. plan.go measures the next step:
// rebuild plans made of copied and searched stretches.
package parsebench

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"io"
	"time"

	"github.com/klauspost/compress/zstd"
)

// Encoder returns a raw DEFLATE writer at a producer's settings: what a
// stored parse of a file would be made with.
type Encoder func(w io.Writer) (io.WriteCloser, error)

// Layer is one gzip-compressed layer blob.
type Layer struct {
	Name string
	// Group names the producer and its settings; layers are compared with
	// each other only within a group.
	Group string
	// Encoder compresses a file on its own as the producer would; nil when
	// no encoder is known to (such as GNU gzip): no stored-parse figures.
	Encoder Encoder
	// Open returns the blob.
	Open func() (io.ReadCloser, error)
}

// Options configures Measure.
type Options struct {
	// Log receives one line per layer; nil for none.
	Log io.Writer
}

// Size classes of files, by their size.
var classNames = [4]string{"<4K", "4K-64K", "64K-1M", ">1M"}

func classOf(size int64) int {
	switch {
	case size < 4<<10:
		return 0
	case size < 64<<10:
		return 1
	case size < 1<<20:
		return 2
	}
	return 3
}

// Interior is the part of a file past its first 32 KiB and before its
// last 258 bytes, where an encoder's decisions depend on the file alone.
const (
	interiorHead = 32 << 10
	interiorTail = 258
)

// Agreement counts bytes compared and bytes whose tokens agree.
type Agreement struct {
	Files int   `json:"files"`
	Bytes int64 `json:"bytes"`
	Agree int64 `json:"agree"`
	// AgreeBack also counts matches that reach back before the file's
	// start with the same length and distance: they agree where the
	// file's neighbours do.
	AgreeBack int64 `json:"agree_back"`
}

// Share is Agree/Bytes, or -1 when nothing was compared.
func (a Agreement) Share() float64 {
	if a.Bytes == 0 {
		return -1
	}
	return float64(a.Agree) / float64(a.Bytes)
}

// Comparison is the agreement of one kind of comparison by size class
// and over file interiors.
type Comparison struct {
	Classes  [4]Agreement `json:"classes"` // by classNames
	Interior Agreement    `json:"interior"`
}

// Total sums the size classes.
func (c *Comparison) Total() Agreement {
	var t Agreement
	for _, a := range c.Classes {
		t.Files += a.Files
		t.Bytes += a.Bytes
		t.Agree += a.Agree
		t.AgreeBack += a.AgreeBack
	}
	return t
}

// add compares two parses of a file of the given size and returns the
// agreeing intervals (relative to the file).
func (c *Comparison) add(ref, got parse, size int64) intervals {
	var iv intervals
	var back int64
	agree(ref, got, size, func(lo, hi int64, isBack bool) {
		if isBack {
			back += hi - lo
			return
		}
		iv.add(lo, hi)
	})
	var n, in int64
	lo, hi := int64(interiorHead), size-interiorTail
	for _, v := range iv {
		n += v.hi - v.lo
		if a, b := max(v.lo, lo), min(v.hi, hi); a < b {
			in += b - a
		}
	}
	cl := &c.Classes[classOf(size)]
	cl.Files++
	cl.Bytes += size
	cl.Agree += n
	cl.AgreeBack += n + back
	if hi > lo {
		c.Interior.Files++
		c.Interior.Bytes += hi - lo
		c.Interior.Agree += in
		c.Interior.AgreeBack += in
	}
	return iv
}

// OwnParse is what storing each file's own parse would give.
type OwnParse struct {
	// Comparison is the layer's parse against each file's own parse.
	Comparison
	// CoveredBytes are layer bytes whose token the file's own parse gives;
	// WholeFileBytes are bytes of files whose own parse agrees on all of
	// them.
	CoveredBytes   int64 `json:"covered_bytes"`
	WholeFileBytes int64 `json:"whole_file_bytes"`
	// Exceptions price the layers' tokens the stored parses do not give
	// (tar headers and padding included); InHeaders is their part outside
	// file contents.
	Exceptions Exceptions `json:"exceptions"`
	InHeaders  Exceptions `json:"exceptions_outside_files"`
	// UniqueFiles and UniqueBytes are the distinct files of the group;
	// DeflateBytes their own raw DEFLATE and ZstdBytes their zstd frames
	// (klauspost zstd defaults, as dedup stores files).
	UniqueFiles  int     `json:"unique_files"`
	UniqueBytes  int64   `json:"unique_bytes"`
	DeflateBytes int64   `json:"deflate_bytes"`
	ZstdBytes    int64   `json:"zstd_bytes"`
	EncodeSecs   float64 `json:"encode_seconds"`
}

// Blocks describes the layers' block structure.
type Blocks struct {
	Blocks  int `json:"blocks"`
	Dynamic int `json:"dynamic"`
	Fixed   int `json:"fixed"`
	Stored  int `json:"stored"`
	// Boundaries are block starts after a stream's first; InFiles of them
	// fall strictly inside a file's contents, InShared inside a file
	// another layer of the group holds too.
	Boundaries int `json:"boundaries"`
	InFiles    int `json:"in_files"`
	InShared   int `json:"in_shared_files"`
	// HeaderBits are the dynamic blocks' headers: 3-bit block header and
	// code-lengths section.
	HeaderBits int64 `json:"header_bits"`
}

// Group is the result for one producer and level.
type Group struct {
	Name            string     `json:"name"`
	Layers          int        `json:"layers"`
	CompressedBytes int64      `json:"compressed_bytes"`
	TarBytes        int64      `json:"tar_bytes"`
	Files           int        `json:"files"`
	FileBytes       int64      `json:"file_bytes"`
	Shared          Comparison `json:"shared"`
	Stored          *OwnParse  `json:"stored,omitempty"`
	Blocks          Blocks     `json:"blocks"`
	DecodeSecs      float64    `json:"decode_seconds"`
}

// Report is Measure's result.
type Report struct {
	Groups []*Group `json:"groups"`
	Secs   float64  `json:"seconds"`
}

// file is one regular file's contents in a layer's tar.
type file struct {
	off, size int64
	sum       [sha256.Size]byte
}

// Measure decodes every layer's tokens and compares them per file: with
// the first layer of the group holding the same file, and with the file's
// own parse. Layers are read twice: once to count which files each group
// shares, then to compare.
func Measure(ctx context.Context, layers []Layer, opts Options) (*Report, error) {
	start := time.Now()
	logf := func(format string, args ...any) {
		if opts.Log != nil {
			fmt.Fprintf(opts.Log, format+"\n", args...)
		}
	}
	// Pass 1: how many layers of each group hold each file.
	count := map[string]map[[sha256.Size]byte]int{}
	for _, l := range layers {
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		files, err := digestFiles(l)
		if err != nil {
			return nil, err
		}
		c := count[l.Group]
		if c == nil {
			c = map[[sha256.Size]byte]int{}
			count[l.Group] = c
		}
		seen := map[[sha256.Size]byte]bool{}
		for _, f := range files {
			if !seen[f.sum] {
				seen[f.sum] = true
				c[f.sum]++
			}
		}
	}
	r := &Report{}
	groups := map[string]*groupState{}
	for _, l := range layers {
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		g := groups[l.Group]
		if g == nil {
			g = &groupState{Group: &Group{Name: l.Group}, count: count[l.Group], ref: map[[sha256.Size]byte]parse{}, own: map[[sha256.Size]byte]parse{}, done: map[[sha256.Size]byte]bool{}}
			if l.Encoder != nil {
				g.Stored = &OwnParse{}
				zenc, err := zstd.NewWriter(nil, zstd.WithEncoderConcurrency(1))
				if err != nil {
					return nil, fmt.Errorf("parsebench: %w", err)
				}
				defer zenc.Close()
				g.zstd = zenc
			}
			groups[l.Group] = g
			r.Groups = append(r.Groups, g.Group)
		}
		t := time.Now()
		if err := g.layer(l); err != nil {
			return nil, fmt.Errorf("parsebench: layer %s: %w", l.Name, err)
		}
		logf("parse: %s (%s): %.1fs", l.Name, l.Group, time.Since(t).Seconds())
	}
	r.Secs = time.Since(start).Seconds()
	return r, nil
}

func readAll(l Layer) ([]byte, error) {
	rc, err := l.Open()
	if err != nil {
		return nil, fmt.Errorf("parsebench: layer %s: %w", l.Name, err)
	}
	defer rc.Close()
	b, err := io.ReadAll(rc)
	if err != nil {
		return nil, fmt.Errorf("parsebench: layer %s: %w", l.Name, err)
	}
	return b, nil
}

// digestFiles lists the files of l's tar with compress/gzip, independently
// of Inflate.
func digestFiles(l Layer) ([]file, error) {
	blob, err := readAll(l)
	if err != nil {
		return nil, err
	}
	zr, err := gzip.NewReader(bytes.NewReader(blob))
	if err != nil {
		return nil, fmt.Errorf("parsebench: layer %s: %w", l.Name, err)
	}
	tarBytes, err := io.ReadAll(zr)
	if err != nil {
		return nil, fmt.Errorf("parsebench: layer %s: %w", l.Name, err)
	}
	files, err := tarFiles(tarBytes)
	if err != nil {
		return nil, fmt.Errorf("parsebench: layer %s: %w", l.Name, err)
	}
	return files, nil
}

// tarFiles lists the regular files with contents in a tar, with the
// offset of their contents.
func tarFiles(b []byte) ([]file, error) {
	br := bytes.NewReader(b)
	tr := tar.NewReader(br)
	var files []file
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return files, nil
		}
		if err != nil {
			return nil, fmt.Errorf("tar: %w", err)
		}
		if h.Typeflag != tar.TypeReg || h.Size == 0 {
			continue
		}
		// tar.Reader has read exactly the header blocks: the reader's
		// position is where the contents start.
		off := br.Size() - int64(br.Len())
		if off+h.Size > int64(len(b)) {
			return nil, fmt.Errorf("tar: %s runs past the end", h.Name)
		}
		files = append(files, file{off: off, size: h.Size, sum: sha256.Sum256(b[off : off+h.Size])})
	}
}

// groupState is one group's figures and what later layers compare with.
type groupState struct {
	*Group
	count map[[sha256.Size]byte]int
	// ref is the parse of each shared file in the first layer holding it;
	// own is the file's own parse, kept for shared files; done marks files
	// already counted in Stored's unique figures.
	ref, own map[[sha256.Size]byte]parse
	done     map[[sha256.Size]byte]bool
	zstd     *zstd.Encoder
}

func (g *groupState) layer(l Layer) error {
	blob, err := readAll(l)
	if err != nil {
		return err
	}
	t := time.Now()
	var lp parse
	var blocks []Block
	out, err := Gunzip(blob, Visitor{
		Token: lp.token,
		Block: func(b Block) { b.LitLens, b.DistLens = nil, nil; blocks = append(blocks, b) },
	})
	if err != nil {
		return err
	}
	g.DecodeSecs += time.Since(t).Seconds()
	files, err := tarFiles(out)
	if err != nil {
		return err
	}
	g.Layers++
	g.CompressedBytes += int64(len(blob))
	g.TarBytes += int64(len(out))
	g.Files += len(files)

	g.blocks(blocks, files)
	var covered intervals
	var inFiles []interval
	cur := cursor{p: lp}
	seen := map[[sha256.Size]byte]bool{}
	for _, f := range files {
		g.FileBytes += f.size
		got := cur.extract(f.off, f.off+f.size)
		inFiles = append(inFiles, interval{f.off, f.off + f.size})
		// A second copy of a file in the same layer is not compared: the
		// question is whether layers agree.
		if g.count[f.sum] >= 2 && !seen[f.sum] {
			seen[f.sum] = true
			if ref, ok := g.ref[f.sum]; ok {
				g.Shared.add(ref, got, f.size)
			} else {
				g.ref[f.sum] = got
			}
		}
		if g.Stored == nil {
			continue
		}
		own, err := g.ownParse(l.Encoder, f, out[f.off:f.off+f.size])
		if err != nil {
			return err
		}
		iv := g.Stored.add(own, got, f.size)
		var n int64
		for _, v := range iv {
			covered.add(f.off+v.lo, f.off+v.hi)
			n += v.hi - v.lo
		}
		g.Stored.CoveredBytes += n
		if n == f.size {
			g.Stored.WholeFileBytes += f.size
		}
	}
	if g.Stored != nil {
		x := exceptions(lp, covered)
		add(&g.Stored.Exceptions, x)
		// The same walk with every file's contents covered leaves the
		// tokens of tar headers, padding and tokens crossing file edges.
		add(&g.Stored.InHeaders, exceptions(lp, inFiles))
	}
	return nil
}

func add(a *Exceptions, b Exceptions) {
	a.Runs += b.Runs
	a.Tokens += b.Tokens
	a.Bytes += b.Bytes
	a.Size += b.Size
}

// ownParse returns the parse of the file compressed on its own.
func (g *groupState) ownParse(enc Encoder, f file, data []byte) (parse, error) {
	if p, ok := g.own[f.sum]; ok {
		return p, nil
	}
	t := time.Now()
	var buf bytes.Buffer
	w, err := enc(&buf)
	if err != nil {
		return nil, err
	}
	if _, err := w.Write(data); err != nil {
		return nil, err
	}
	if err := w.Close(); err != nil {
		return nil, err
	}
	var p parse
	back, _, err := Inflate(make([]byte, 0, len(data)), buf.Bytes(), Visitor{Token: p.token})
	if err != nil {
		return nil, fmt.Errorf("own parse: %w", err)
	}
	if !bytes.Equal(back, data) {
		return nil, errors.New("own parse: inflated bytes differ from the file")
	}
	s := g.Stored
	if !g.done[f.sum] {
		g.done[f.sum] = true
		s.UniqueFiles++
		s.UniqueBytes += f.size
		s.DeflateBytes += int64(buf.Len())
		s.ZstdBytes += int64(len(g.zstd.EncodeAll(data, nil)))
	}
	s.EncodeSecs += time.Since(t).Seconds()
	if g.count[f.sum] >= 2 {
		g.own[f.sum] = p
	}
	return p, nil
}

func (g *groupState) blocks(blocks []Block, files []file) {
	b := &g.Blocks
	k := 0
	for i, bl := range blocks {
		b.Blocks++
		switch bl.Type {
		case BlockDynamic:
			b.Dynamic++
			b.HeaderBits += int64(bl.HeaderBits)
		case BlockFixed:
			b.Fixed++
		default:
			b.Stored++
		}
		// A block at the start of a later gzip member is a stream's
		// first block too; Off 0 only catches the first member, which
		// is all the dataset has.
		if i == 0 || bl.Off == 0 {
			continue
		}
		b.Boundaries++
		for k < len(files) && files[k].off+files[k].size <= bl.Off {
			k++
		}
		if k < len(files) && files[k].off < bl.Off {
			b.InFiles++
			if g.count[files[k].sum] >= 2 {
				b.InShared++
			}
		}
	}
}
