package recompress

import (
	"bytes"
	"compress/flate"
	"compress/gzip"
	"context"
	"encoding/json"
	"io"
	"testing"
	"time"

	kgzip "github.com/klauspost/compress/gzip"
	"github.com/klauspost/compress/zstd"
	"github.com/klauspost/pgzip"
	"github.com/opencontainers/go-digest"
)

// gzipSeeds are gzip blobs as real producers write them: Go's stdlib,
// klauspost and pgzip at several levels, with header fields, with the
// header CRC, several members, trailing zero padding, GNU gzip's output
// (testdata), and truncated and corrupted members.
func gzipSeeds(t testing.TB) [][]byte {
	plain := testInput(20 << 10)
	small := []byte("usr/bin/env\x00#!/bin/sh\necho hello\n")
	var seeds [][]byte
	add := func(w func(io.Writer) io.WriteCloser, p []byte) []byte {
		var buf bytes.Buffer
		zw := w(&buf)
		if _, err := zw.Write(p); err != nil {
			t.Fatal(err)
		}
		if err := zw.Close(); err != nil {
			t.Fatal(err)
		}
		seeds = append(seeds, buf.Bytes())
		return buf.Bytes()
	}
	std := func(level int) func(io.Writer) io.WriteCloser {
		return func(w io.Writer) io.WriteCloser { z, _ := gzip.NewWriterLevel(w, level); return z }
	}
	for _, l := range []int{gzip.HuffmanOnly, gzip.NoCompression, gzip.BestSpeed, gzip.DefaultCompression, gzip.BestCompression} {
		add(std(l), plain)
		add(func(w io.Writer) io.WriteCloser { z, _ := kgzip.NewWriterLevel(w, l); return z }, small)
	}
	add(func(w io.Writer) io.WriteCloser { z, _ := pgzip.NewWriterLevel(w, pgzip.DefaultCompression); return z }, plain)
	add(std(6), nil)
	fields := add(func(w io.Writer) io.WriteCloser {
		z, _ := gzip.NewWriterLevel(w, gzip.BestCompression)
		z.Name, z.Comment, z.Extra, z.ModTime = "layer.tar", "made by a test", []byte{'c', 'r', 2, 0, 1, 2}, time.Unix(1700000000, 0)
		return z
	}, small)
	hcrc := append([]byte{}, fields...)
	hcrc[3] |= flagHCRC
	seeds = append(seeds, hcrc) // a header CRC flag with no CRC: the body shifts by 2
	two := append(append([]byte{}, seeds[0]...), seeds[1]...)
	seeds = append(seeds, two, append(append([]byte{}, two...), make([]byte, 512)...))
	seeds = append(seeds, seeds[1][:len(seeds[1])/2], seeds[1][:len(seeds[1])-3])
	bad := append([]byte{}, seeds[1]...)
	bad[12] ^= 0x40
	seeds = append(seeds, bad, []byte{0x1f, 0x8b, 8}, []byte{0x1f, 0x8b, 8, 0xe0, 0, 0, 0, 0, 0, 3})
	return seeds
}

// FuzzParseGzip: the container parser either refuses the first member or
// splits the whole blob into members and trailing bytes that are exactly
// the blob's bytes (header, deflate body, trailer, ...), each body a
// complete deflate stream of the recorded size. What Go's gzip reader
// reads whole, the parser must split into members with no trailing bytes:
// a recipe keeps trailing bytes verbatim and refuses more than MaxTrailing.
func FuzzParseGzip(f *testing.F) {
	for _, s := range gzipSeeds(f) {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		c, err := parseGzip(bytes.NewReader(data), int64(len(data)))

		var plain []byte
		zr, gerr := gzip.NewReader(bytes.NewReader(data))
		if gerr == nil {
			plain, gerr = io.ReadAll(zr)
		}
		// Go's reader ignores the reserved FLG bits; the parser refuses a
		// member with any set (RFC 1952 says a reader must), which makes
		// it trailing data or an error. Every other stdlib-readable blob
		// must parse.
		reserved := func(h []byte) bool { return len(h) > 3 && h[3]&0xe0 != 0 }
		if err != nil {
			if gerr == nil && !reserved(data) {
				t.Fatalf("parseGzip refused a blob Go's gzip reader reads: %v", err)
			}
			return
		}
		if len(c.members) == 0 && len(data) != 0 {
			t.Fatalf("no members and no error for %d bytes", len(data))
		}
		var pos int64
		var inflated []byte
		for i, m := range c.members {
			end := pos + int64(len(m.header))
			if len(m.header) < 10 || end > int64(len(data)) || !bytes.Equal(m.header, data[pos:end]) || m.bodyStart != end {
				t.Fatalf("member %d: header %x at %d does not match the blob (body at %d)", i, m.header, pos, m.bodyStart)
			}
			if m.bodyEnd < m.bodyStart || m.bodyEnd+8 > int64(len(data)) || !bytes.Equal(m.trailer, data[m.bodyEnd:m.bodyEnd+8]) {
				t.Fatalf("member %d: body %d-%d, trailer %x do not match the blob", i, m.bodyStart, m.bodyEnd, m.trailer)
			}
			body := bytes.NewReader(data[m.bodyStart:m.bodyEnd])
			out, err := io.ReadAll(flate.NewReader(body))
			if err != nil || int64(len(out)) != m.size || body.Len() != 0 {
				t.Fatalf("member %d: body inflates to %d bytes (err %v, %d left), recorded %d", i, len(out), err, body.Len(), m.size)
			}
			b := data[m.bodyStart:m.bodyEnd]
			if want := len(b) >= 4 && bytes.Equal(b[len(b)-4:], []byte{0, 0, 0xff, 0xff}); m.endsSync != want {
				t.Fatalf("member %d: endsSync %v, body ends % x", i, m.endsSync, b[max(0, len(b)-4):])
			}
			inflated = append(inflated, out...)
			pos = m.bodyEnd + 8
		}
		if !bytes.Equal(c.trailing, data[pos:]) || len(c.trailing) > MaxTrailing {
			t.Fatalf("trailing %d bytes, the blob has %d after its last member", len(c.trailing), int64(len(data))-pos)
		}
		if gerr == nil {
			if len(c.trailing) > 0 && !reserved(c.trailing) {
				t.Fatalf("Go's gzip reader reads the whole blob; the parser left %d trailing bytes", len(c.trailing))
			}
			if len(c.trailing) == 0 && !bytes.Equal(inflated, plain) {
				t.Fatalf("members inflate to %d bytes, Go's gzip reader to %d", len(inflated), len(plain))
			}
		}
	})
}

// encoderFor returns a writer producing a whole blob (container included)
// the way encoder family fam at level would, and the level actually used.
func encoderFor(fam byte, level int8) (func(io.Writer) (io.WriteCloser, error), int) {
	switch fam % 4 {
	case 0:
		l := int(level)%11 - 1 // -2..9, stdlib's range
		if l < gzip.HuffmanOnly {
			l = gzip.HuffmanOnly
		}
		return func(w io.Writer) (io.WriteCloser, error) { return gzip.NewWriterLevel(w, l) }, l
	case 1:
		l := int(level)%11 - 1 // -2..9; -3 (stateless) is not reproducible by design
		if l < -2 {
			l = -2
		}
		return func(w io.Writer) (io.WriteCloser, error) { return kgzip.NewWriterLevel(w, l) }, l
	case 2:
		l := int(level)%11 - 1
		if l < -2 {
			l = -2
		}
		return func(w io.Writer) (io.WriteCloser, error) {
			z, err := pgzip.NewWriterLevel(w, l)
			if err == nil {
				err = z.SetConcurrency(256<<10, 2)
			}
			return z, err
		}, l
	default:
		l := 1 + int(uint8(level))%4
		return func(w io.Writer) (io.WriteCloser, error) {
			return zstd.NewWriter(w, zstd.WithEncoderLevel(zstd.EncoderLevel(l)), zstd.WithEncoderConcurrency(1))
		}, l
	}
}

// FuzzRecompress: a blob that a supported encoder made from any input, in
// one or two members, written in pieces of any size, with any trailing
// padding, gets a recipe that survives JSON and rebuilds it byte for byte.
// A miss here is a layer dedup keeps intact for no reason; a recipe that
// rebuilds other bytes would be caught by Verify, and is a bug here.
//
//cairn:fuzztime 30s
func FuzzRecompress(f *testing.F) {
	plain := testInput(70 << 10)
	for fam := range byte(4) {
		for _, level := range []int8{0, 1, 2, 6, 7, 10} {
			f.Add(plain[:1000+int(level)*4000], fam, level, fam+1, level, uint16(0), uint16(7919), byte(0))
		}
	}
	f.Add([]byte{}, byte(0), int8(7), byte(0), int8(7), uint16(0), uint16(1), byte(0))
	f.Add(plain[:3000], byte(0), int8(10), byte(1), int8(2), uint16(1500), uint16(100), byte(8))
	f.Add(plain[:300], byte(2), int8(6), byte(0), int8(1), uint16(299), uint16(1), byte(200))
	f.Fuzz(func(t *testing.T, plain []byte, fam1 byte, level1 int8, fam2 byte, level2 int8, split, chunk uint16, pad byte) {
		if len(plain) > 1<<20 {
			return
		}
		gz := fam1%4 != 3
		members := 1
		if gz && split > 0 && int(split) < len(plain) && fam2%4 != 3 {
			members = 2 // zstd blobs are one stream: members are gzip's
		}
		cuts := []int{0, len(plain)}
		if members == 2 {
			cuts = []int{0, int(split), len(plain)}
		}
		var blob bytes.Buffer
		for i := range members {
			fam, level := fam1, level1
			if i == 1 {
				fam, level = fam2, level2
			}
			open, _ := encoderFor(fam, level)
			zw, err := open(&blob)
			if err != nil {
				t.Fatal(err)
			}
			p := plain[cuts[i]:cuts[i+1]]
			step := max(1, int(chunk))
			for len(p) > 0 {
				k := min(len(p), step)
				if _, err := zw.Write(p[:k]); err != nil {
					t.Fatal(err)
				}
				p = p[k:]
			}
			if err := zw.Close(); err != nil {
				t.Fatal(err)
			}
		}
		if gz {
			blob.Write(make([]byte, int(pad))) // producers pad to a block size
		}
		b := blob.Bytes()
		ctx := context.Background()
		rec, err := FindRecipe(ctx, bytes.NewReader(b), int64(len(b)), opener(plain))
		if err != nil {
			t.Fatalf("no recipe for a %d-byte blob of %d members: %v", len(b), members, err)
		}
		js, err := json.Marshal(rec)
		if err != nil {
			t.Fatal(err)
		}
		var back Recipe
		if err := json.Unmarshal(js, &back); err != nil {
			t.Fatal(err)
		}
		if js2, _ := json.Marshal(back); !bytes.Equal(js, js2) {
			t.Fatalf("recipe changes through JSON:\n%s\n%s", js, js2)
		}
		var out bytes.Buffer
		if err := Rebuild(&out, back, bytes.NewReader(plain), 0); err != nil {
			t.Fatalf("Rebuild: %v (recipe %s)", err, js)
		}
		if !bytes.Equal(out.Bytes(), b) {
			t.Fatalf("rebuilt %d bytes differ from the %d-byte blob (recipe %s)", out.Len(), len(b), js)
		}
		if err := Verify(back, bytes.NewReader(plain), digest.FromBytes(b), int64(len(b))); err != nil {
			t.Fatal(err)
		}
	})
}
