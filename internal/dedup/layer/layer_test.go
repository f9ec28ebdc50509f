package layer

import (
	"archive/tar"
	"bytes"
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"strings"
	"testing"
	"time"

	"github.com/opencontainers/go-digest"
)

// member is one tar entry for buildTar; body is written for regular files.
type member struct {
	hdr  tar.Header
	body string
}

func reg(name, body string) member {
	return member{hdr: tar.Header{Typeflag: tar.TypeReg, Name: name, Size: int64(len(body)), Mode: 0o644}, body: body}
}

var mtime = time.Unix(1700000000, 0)

func buildTar(t testing.TB, format tar.Format, ms []member, trailer []byte) []byte {
	t.Helper()
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for _, m := range ms {
		h := m.hdr
		h.Format = format
		if h.ModTime.IsZero() {
			h.ModTime = mtime
		}
		if err := tw.WriteHeader(&h); err != nil {
			t.Fatalf("header %q: %v", h.Name, err)
		}
		if _, err := io.WriteString(tw, m.body); err != nil {
			t.Fatalf("body %q: %v", h.Name, err)
		}
	}
	if err := tw.Close(); err != nil {
		t.Fatal(err)
	}
	return append(buf.Bytes(), trailer...)
}

// roundTrip disassembles tarBytes into fs, checks the recipe's digest, and
// checks that Assemble and Verify reproduce the input exactly.
func roundTrip(t *testing.T, tarBytes []byte, fs FileStore) *Recipe {
	t.Helper()
	ctx := context.Background()
	r, err := Disassemble(ctx, bytes.NewReader(tarBytes), fs)
	if err != nil {
		t.Fatalf("Disassemble: %v", err)
	}
	if r.TarDigest != digest.FromBytes(tarBytes) || r.TarSize != int64(len(tarBytes)) {
		t.Fatalf("recipe describes %s/%d, input is %s/%d", r.TarDigest, r.TarSize, digest.FromBytes(tarBytes), len(tarBytes))
	}
	wantRebuilt(t, r, fs, tarBytes)
	return r
}

func firstDiff(a, b []byte) int {
	for i := range min(len(a), len(b)) {
		if a[i] != b[i] {
			return i
		}
	}
	return min(len(a), len(b))
}

// etcMembers are a directory, a file, an empty file, a symlink and a hard
// link: what every test tar starts with.
func etcMembers() []member {
	return []member{
		{hdr: tar.Header{Typeflag: tar.TypeDir, Name: "etc/", Mode: 0o755}},
		reg("etc/hosts", "127.0.0.1 localhost\n"),
		reg("etc/empty", ""),
		{hdr: tar.Header{Typeflag: tar.TypeSymlink, Name: "etc/link", Linkname: "hosts"}},
		{hdr: tar.Header{Typeflag: tar.TypeLink, Name: "etc/hard", Linkname: "etc/hosts"}},
	}
}

func TestRoundTripArchiveTar(t *testing.T) {
	long := strings.Repeat("very-long-directory-name/", 12) + "file.txt"
	base := append(etcMembers(),
		reg("bin/big", strings.Repeat("0123456789abcdef", 1<<16)+"tail"), // > spoolMax
	)
	cases := []struct {
		name    string
		format  tar.Format
		members []member
		trailer []byte
	}{
		{name: "ustar", format: tar.FormatUSTAR, members: base},
		{name: "pax long names and xattrs", format: tar.FormatPAX, members: append(base,
			reg(long, "long"),
			member{hdr: tar.Header{Typeflag: tar.TypeReg, Name: "x/attr", Size: 3, PAXRecords: map[string]string{
				"SCHILY.xattr.user.comment":        "hello",
				"SCHILY.xattr.security.capability": "\x01\x00\x00\x02\x00\x20",
			}}, body: "abc"},
			member{hdr: tar.Header{Typeflag: tar.TypeSymlink, Name: "x/longlink", Linkname: long}},
		)},
		{name: "gnu long names", format: tar.FormatGNU, members: append(base,
			reg(long, "gnu long"),
			member{hdr: tar.Header{Typeflag: tar.TypeSymlink, Name: long + ".lnk", Linkname: long}},
		)},
		{name: "duplicate paths", format: tar.FormatPAX, members: []member{
			reg("a/file", "first version"),
			reg("b/other", "other"),
			reg("a/file", "second version, longer"),
			reg("./a/file", "third, by another spelling"),
			reg("a/file", "first version"),
		}},
		{name: "zero padding beyond EOF blocks", format: tar.FormatPAX, members: base, trailer: make([]byte, 10240+17)},
		{name: "junk after EOF blocks", format: tar.FormatPAX, members: base, trailer: []byte("not a tar, but kept")},
		{name: "no members", format: tar.FormatPAX},
		{name: "non-utf8 name", format: tar.FormatGNU, members: []member{reg("caf\xe9/\xff", "latin1")}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			roundTrip(t, buildTar(t, c.format, c.members, c.trailer), newMemStore())
		})
	}
}

func TestRoundTripOddStreams(t *testing.T) {
	full := buildTar(t, tar.FormatPAX, []member{reg("a", "aaa"), reg("b", strings.Repeat("b", 700))}, nil)
	t.Run("empty input", func(t *testing.T) { roundTrip(t, nil, newMemStore()) })
	t.Run("without end-of-archive blocks", func(t *testing.T) {
		roundTrip(t, full[:len(full)-1024], newMemStore())
	})
	t.Run("hard link declaring a size", func(t *testing.T) {
		// A header-only member may carry a nonzero size field with no body.
		tb := buildTar(t, tar.FormatUSTAR, []member{reg("f", "data"),
			{hdr: tar.Header{Typeflag: tar.TypeLink, Name: "l", Linkname: "f", Size: 4}}}, nil)
		roundTrip(t, tb, newMemStore())
	})
	t.Run("truncated", func(t *testing.T) {
		_, err := Disassemble(context.Background(), bytes.NewReader(full[:700]), newMemStore())
		if err == nil {
			t.Fatal("truncated tar disassembled without error")
		}
	})
}

func TestDuplicatePathsKeepOrder(t *testing.T) {
	fs := newMemStore()
	r := roundTrip(t, buildTar(t, tar.FormatPAX, []member{reg("f", "one"), reg("f", "two"), reg("f", "one")}, nil), fs)
	want := []digest.Digest{digest.FromString("one"), digest.FromString("two"), digest.FromString("one")}
	if len(r.Files) != len(want) {
		t.Fatalf("recipe lists %d payloads, want %d", len(r.Files), len(want))
	}
	for i, f := range r.Files {
		if f.Digest != want[i] {
			t.Errorf("payload %d is %s, want %s", i, f.Digest, want[i])
		}
	}
	if fs.puts != 2 {
		t.Errorf("stored %d payloads, want 2", fs.puts)
	}
}

func TestSharedFileStoredOnce(t *testing.T) {
	fs := newMemStore()
	shared := strings.Repeat("shared library bytes ", 5000)
	roundTrip(t, buildTar(t, tar.FormatPAX, []member{reg("usr/lib/libc.so", shared), reg("etc/a", "a")}, nil), fs)
	if fs.puts != 2 {
		t.Fatalf("first layer stored %d payloads, want 2", fs.puts)
	}
	roundTrip(t, buildTar(t, tar.FormatGNU, []member{reg("opt/copy/libc.so", shared), reg("etc/b", "b")}, nil), fs)
	if fs.puts != 3 {
		t.Fatalf("after second layer %d payloads stored, want 3 (shared one once)", fs.puts)
	}
}

// wantFileError checks that err is a *FileError naming d and wrapping want.
func wantFileError(t *testing.T, err error, d digest.Digest, want error) {
	t.Helper()
	var fe *FileError
	if !errors.As(err, &fe) || fe.Digest != d || (want != nil && !errors.Is(err, want)) {
		t.Fatalf("error %v: want a FileError for %s wrapping %v", err, d.Encoded()[:12], want)
	}
}

func TestCorruptionDetected(t *testing.T) {
	ctx := context.Background()
	large := strings.Repeat("a large payload, streamed, not read ahead ", prefetchMax/40)
	tb := buildTar(t, tar.FormatPAX, []member{reg("a", "payload a"), reg("b", "payload b"), reg("l", large)}, nil)
	b, l := digest.FromString("payload b"), digest.FromString(large)
	for _, tc := range []struct {
		name   string
		file   digest.Digest
		stored []byte
	}{
		{"payload altered in store", b, []byte("payload X")},
		{"payload shorter in store", b, []byte("payload")},
		{"payload longer in store", b, []byte("payload b, and more")},
		{"streamed payload altered", l, []byte(strings.Replace(large, "large", "LARGE", 1))},
		{"streamed payload shorter", l, []byte(large[:len(large)-1])},
		{"streamed payload longer", l, []byte(large + "!")},
	} {
		// Payloads read from a stream, and held whole by the store (a
		// Whole, checked in place).
		for _, whole := range []bool{false, true} {
			t.Run(fmt.Sprintf("%s/whole=%v", tc.name, whole), func(t *testing.T) {
				fs := newMemStore()
				r := roundTrip(t, tb, fs)
				fs.files[tc.file] = tc.stored
				fs.whole = whole
				err := Verify(ctx, r, fs)
				wantFileError(t, err, tc.file, ErrCorruptFile)
				// A payload read ahead is checked before any of its bytes
				// is written: what was written is a prefix of the tar.
				var out bytes.Buffer
				Assemble(ctx, &out, r, fs)
				if tc.file == b && !bytes.HasPrefix(tb, out.Bytes()) {
					t.Fatalf("assembly wrote bytes that are not the tar's (first difference at %d)", firstDiff(out.Bytes(), tb))
				}
			})
		}
	}
	t.Run("intact payloads held whole", func(t *testing.T) {
		fs := newMemStore()
		r := roundTrip(t, tb, fs)
		fs.whole = true
		if err := Verify(ctx, r, fs); err != nil {
			t.Fatal(err)
		}
	})
	t.Run("payload missing", func(t *testing.T) {
		fs := newMemStore()
		r := roundTrip(t, tb, fs)
		delete(fs.files, digest.FromString("payload a"))
		err := Assemble(ctx, io.Discard, r, fs)
		wantFileError(t, err, digest.FromString("payload a"), nil)
	})
	t.Run("recipe digest wrong", func(t *testing.T) {
		fs := newMemStore()
		r := roundTrip(t, tb, fs)
		r.TarDigest = digest.FromString("something else")
		if err := Verify(ctx, r, fs); !errors.Is(err, ErrMismatch) {
			t.Fatalf("Verify = %v, want ErrMismatch", err)
		}
	})
	t.Run("recipe files reordered", func(t *testing.T) {
		fs := newMemStore()
		r := roundTrip(t, tb, fs)
		// Each payload is intact. Of another size than the member's, the
		// metadata tells the order is wrong as the payload ends.
		r.Files[1], r.Files[2] = r.Files[2], r.Files[1]
		if err := Assemble(ctx, io.Discard, r, fs); !errors.Is(err, ErrMismatch) || errors.Is(err, ErrCorruptFile) {
			t.Fatalf("Assemble = %v, want ErrMismatch", err)
		}
		// Of the same size ("payload a", "payload b"), the result's
		// digest does.
		r = roundTrip(t, tb, fs)
		r.Files[0], r.Files[1] = r.Files[1], r.Files[0]
		if err := Verify(ctx, r, fs); !errors.Is(err, ErrMismatch) || errors.Is(err, ErrCorruptFile) {
			t.Fatalf("Verify = %v, want ErrMismatch", err)
		}
	})
	t.Run("recipe lists extra file", func(t *testing.T) {
		fs := newMemStore()
		r := roundTrip(t, tb, fs)
		r.Files = append(r.Files, r.Files[0])
		if err := Assemble(ctx, io.Discard, r, fs); !errors.Is(err, ErrMismatch) {
			t.Fatalf("Assemble = %v, want ErrMismatch", err)
		}
	})
}

func TestCanceled(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	tb := buildTar(t, tar.FormatPAX, []member{reg("a", "a")}, nil)
	if _, err := Disassemble(ctx, bytes.NewReader(tb), newMemStore()); !errors.Is(err, context.Canceled) {
		t.Fatalf("Disassemble = %v, want context.Canceled", err)
	}
	fs := newMemStore()
	r := roundTrip(t, tb, fs)
	if err := Assemble(ctx, io.Discard, r, fs); !errors.Is(err, context.Canceled) {
		t.Fatalf("Assemble = %v, want context.Canceled", err)
	}
}

// TestLargeFileStreamed builds a tar with a 64 MiB member on the fly, so the
// test never holds the tar itself, only the store's copy of the payload.
func TestLargeFileStreamed(t *testing.T) {
	if testing.Short() {
		t.Skip("64 MiB")
	}
	const size = 64 << 20
	pr, pw := io.Pipe()
	want := sha256.New()
	go func() {
		tw := tar.NewWriter(io.MultiWriter(pw, want))
		err := tw.WriteHeader(&tar.Header{Typeflag: tar.TypeReg, Name: "big.bin", Size: size, ModTime: mtime, Format: tar.FormatPAX})
		if err == nil {
			_, err = io.CopyN(tw, rand.NewChaCha8([32]byte{1}), size)
		}
		if err == nil {
			err = tw.Close()
		}
		pw.CloseWithError(err)
	}()
	ctx := context.Background()
	fs := newMemStore()
	r, err := Disassemble(ctx, pr, fs)
	if err != nil {
		t.Fatal(err)
	}
	if got := digest.NewDigest(digest.SHA256, want); r.TarDigest != got {
		t.Fatalf("recipe digest %s, tar was %s", r.TarDigest, got)
	}
	if len(r.Files) != 1 || r.Files[0].Size != size {
		t.Fatalf("recipe files %v, want one of %d bytes", r.Files, size)
	}
	if err := Verify(ctx, r, fs); err != nil {
		t.Fatal(err)
	}
}

// wantRebuilt checks that rec assembles from fs into exactly data, and
// verifies.
func wantRebuilt(t testing.TB, rec *Recipe, fs FileStore, data []byte) {
	t.Helper()
	ctx := context.Background()
	var out bytes.Buffer
	if err := Assemble(ctx, &out, rec, fs); err != nil {
		t.Fatalf("Assemble: %v", err)
	}
	if !bytes.Equal(out.Bytes(), data) {
		t.Fatalf("assembled %d bytes differ from the %d input bytes (first difference at %d)", out.Len(), len(data), firstDiff(out.Bytes(), data))
	}
	if err := Verify(ctx, rec, fs); err != nil {
		t.Fatalf("Verify: %v", err)
	}
}
