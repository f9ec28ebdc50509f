package layer

import (
	"archive/tar"
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"strings"
	"testing"

	"github.com/klauspost/compress/zstd"
	"github.com/opencontainers/go-digest"
	"github.com/vbatts/tar-split/tar/storage"
)

// seedTars are small tars of every header flavour a layer may use: USTAR,
// PAX (long names, xattrs), GNU (long names and links), duplicate paths,
// devices and FIFOs, payloads at block boundaries, and the odd streams
// disassembly must keep verbatim (padding and junk after the end-of-archive
// blocks, no end-of-archive blocks, a truncated member). GNU tar's own
// output (sparse, oldgnu, v7, posix) lives in testdata/fuzz.
func seedTars(t testing.TB) [][]byte {
	long := strings.Repeat("long-directory-name/", 6) + "file.txt"
	base := append(etcMembers(),
		reg("b511", strings.Repeat("x", 511)),
		reg("b512", strings.Repeat("y", 512)),
		reg("b513", strings.Repeat("z", 513)),
	)
	devs := []member{
		{hdr: tar.Header{Typeflag: tar.TypeChar, Name: "dev/null", Devmajor: 1, Devminor: 3, Mode: 0o666}},
		{hdr: tar.Header{Typeflag: tar.TypeBlock, Name: "dev/sda", Devmajor: 8, Mode: 0o660}},
		{hdr: tar.Header{Typeflag: tar.TypeFifo, Name: "run/fifo", Mode: 0o600}},
	}
	pax := tar.Header{Typeflag: tar.TypeReg, Name: "x/attr", Size: 3, Uname: "root", Gname: "root", PAXRecords: map[string]string{
		"SCHILY.xattr.user.comment":        "hello",
		"SCHILY.xattr.security.capability": "\x01\x00\x00\x02\x00\x20",
	}}
	full := buildTar(t, tar.FormatPAX, []member{reg("a", "aaa"), reg("b", strings.Repeat("b", 700))}, nil)
	return [][]byte{
		buildTar(t, tar.FormatUSTAR, append(base, devs...), nil),
		buildTar(t, tar.FormatPAX, append(base, reg(long, "long"), member{hdr: pax, body: "abc"},
			member{hdr: tar.Header{Typeflag: tar.TypeSymlink, Name: "x/longlink", Linkname: long}}), nil),
		buildTar(t, tar.FormatGNU, append(base, reg(long, "gnu long"),
			member{hdr: tar.Header{Typeflag: tar.TypeSymlink, Name: long + ".lnk", Linkname: long}}), nil),
		buildTar(t, tar.FormatPAX, []member{reg("f", "one"), reg("f", "two"), reg("./f", "one")}, nil),
		buildTar(t, tar.FormatGNU, []member{reg("caf\xe9/\xff", "latin1")}, nil),
		buildTar(t, tar.FormatPAX, base[:3], make([]byte, 1024+17)),
		buildTar(t, tar.FormatPAX, base[:3], []byte("junk after the end")),
		full[:len(full)-1024],
		full[:700],
		buildTar(t, tar.FormatUSTAR, []member{reg("f", "data"),
			{hdr: tar.Header{Typeflag: tar.TypeLink, Name: "l", Linkname: "f", Size: 4}}}, nil),
		nil,
	}
}

// FuzzDisassembleAssemble: for any input Disassemble accepts, the recipe
// names exactly that input (digest and size), every payload it lists is in
// the store, and Assemble and Verify reproduce the input byte for byte, also
// after the recipe went through JSON (as it does to storage). Dedup drops a
// layer's intact copy on the strength of this.
//
//cairn:fuzztime 30s
func FuzzDisassembleAssemble(f *testing.F) {
	for _, s := range seedTars(f) {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		ctx := context.Background()
		fs := newMemStore()
		r, err := Disassemble(ctx, bytes.NewReader(data), fs)
		if err != nil {
			return
		}
		if r.TarDigest != digest.FromBytes(data) || r.TarSize != int64(len(data)) {
			t.Fatalf("recipe describes %s/%d, input is %s/%d", r.TarDigest, r.TarSize, digest.FromBytes(data), len(data))
		}
		for _, file := range r.Files {
			b, ok := fs.files[file.Digest]
			if !ok || int64(len(b)) != file.Size {
				t.Fatalf("payload %s (%d bytes) listed but not stored", file.Digest, file.Size)
			}
		}
		js, err := json.Marshal(r)
		if err != nil {
			t.Fatal(err)
		}
		var back Recipe
		if err := json.Unmarshal(js, &back); err != nil {
			t.Fatal(err)
		}
		for _, rec := range []*Recipe{r, &back} {
			wantRebuilt(t, rec, fs, data)
		}
	})
}

// FuzzAssemble feeds Assemble metadata it did not write (a recipe read back
// from damaged storage): arbitrary tar-split entries, or arbitrary bytes
// where the zstd stream should be, with payloads picked from a fixed store.
// It must never panic or hang, never write more than the metadata's raw
// bytes plus the listed payloads, and whenever it succeeds, its output must
// be exactly what the entries describe: each segment's bytes, then for each
// member with a body the next listed payload, which must be as long as the
// member says (or empty: a hard link may declare a size and carry none).
// Assemble does not sum the members' crc64 (see its doc): a payload of the
// right size but other bytes is caught by the digests, not here.
func FuzzAssemble(f *testing.F) {
	ctx := context.Background()
	fs := newMemStore()
	var payloads []File // every payload in fs, in a fixed order the fuzzer indexes
	for _, s := range seedTars(f) {
		r, err := Disassemble(ctx, bytes.NewReader(s), fs)
		if err != nil {
			continue
		}
		var pick []byte
		for _, file := range r.Files {
			i := indexOf(payloads, file)
			if i < 0 {
				i = len(payloads)
				payloads = append(payloads, file)
			}
			pick = append(pick, byte(i))
		}
		plain, err := unzstd(r.Meta)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(plain, pick, false)
		f.Add(r.Meta, pick, true)
	}
	if len(payloads) == 0 {
		f.Fatal("no seed tar has a payload")
	}
	f.Fuzz(func(t *testing.T, meta, pick []byte, raw bool) {
		files := make([]File, 0, len(pick))
		var budget int64
		for _, p := range pick {
			file := payloads[int(p)%len(payloads)]
			files = append(files, file)
			budget += file.Size
		}
		rec := &Recipe{Meta: meta, Files: files}
		if !raw {
			rec.Meta = zstdBytes(t, meta)
		}
		budget += int64(len(meta))
		if raw {
			// Raw bytes may hold zstd frames that expand (before any
			// damage that ends the stream); entries carry at most those.
			plain, _ := unzstd(meta)
			budget += int64(len(plain))
		}
		var out bytes.Buffer
		err := Assemble(ctx, &out, rec, fs)
		if int64(out.Len()) > budget {
			t.Fatalf("Assemble wrote %d bytes from %d bytes of metadata and %d payloads", out.Len(), len(meta), len(files))
		}
		if err != nil {
			return
		}
		plain := meta
		if raw {
			if plain, err = unzstd(meta); err != nil {
				t.Fatalf("Assemble succeeded on metadata that is not zstd: %v", err)
			}
		}
		want, werr := describedTar(plain, files, fs)
		if werr != nil {
			t.Fatalf("Assemble succeeded on metadata the oracle refuses: %v", werr)
		}
		if !bytes.Equal(out.Bytes(), want) {
			t.Fatalf("Assemble wrote %d bytes, the entries describe %d (first difference at %d)", out.Len(), len(want), firstDiff(out.Bytes(), want))
		}
	})
}

func indexOf(fs []File, f File) int {
	for i, g := range fs {
		if g == f {
			return i
		}
	}
	return -1
}

func zstdBytes(t *testing.T, b []byte) []byte {
	var buf bytes.Buffer
	zw, err := zstd.NewWriter(&buf, zstd.WithEncoderConcurrency(1))
	if err != nil {
		t.Fatal(err)
	}
	zw.Write(b)
	if err := zw.Close(); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

func unzstd(b []byte) ([]byte, error) {
	zr, err := zstd.NewReader(bytes.NewReader(b), zstd.WithDecoderConcurrency(1))
	if err != nil {
		return nil, err
	}
	defer zr.Close()
	return io.ReadAll(zr) // what decoded before an error, too
}

// describedTar is the oracle for FuzzAssemble: the bytes a JSON-lines
// tar-split entry stream describes, written out plainly.
func describedTar(plain []byte, files []File, fs *memStore) ([]byte, error) {
	dec := json.NewDecoder(bufio.NewReader(bytes.NewReader(plain)))
	var out bytes.Buffer
	next := 0
	for {
		var e storage.Entry
		if err := dec.Decode(&e); err == io.EOF {
			break
		} else if err != nil {
			return nil, err
		}
		switch e.Type {
		case storage.SegmentType:
			out.Write(e.Payload)
		case storage.FileType:
			if e.Size == 0 {
				continue
			}
			if next >= len(files) {
				return nil, errors.New("more members with bodies than payloads")
			}
			b := fs.files[files[next].Digest]
			next++
			if int64(len(b)) != e.Size && len(b) != 0 {
				return nil, errors.New("payload is not as long as its member says")
			}
			out.Write(b)
		}
	}
	if next != len(files) {
		return nil, errors.New("payloads left over")
	}
	return out.Bytes(), nil
}
