package registry

import (
	"bytes"
	"crypto/rand"
	"crypto/sha256"
	"errors"
	"io"
	"testing"

	"github.com/opencontainers/go-digest"
)

func TestValidateName(t *testing.T) {
	good := []string{"a", "library/alpine", "a-b/c_d/e__f/g.h", "a--b", "0/1/2"}
	bad := []string{"", "A", "a/", "/a", "a//b", "a/../b", "..", "a/.", "a.", "-a", "a_", "a___b", "a/B", "a b", "a%2fb"}
	for _, n := range good {
		if err := ValidateName(n); err != nil {
			t.Errorf("ValidateName(%q) = %v, want nil", n, err)
		}
	}
	for _, n := range bad {
		if err := ValidateName(n); !errors.Is(err, ErrNameInvalid) {
			t.Errorf("ValidateName(%q) = %v, want ErrNameInvalid", n, err)
		}
	}
	long := bytes.Repeat([]byte("a"), maxNameLength+1)
	if ValidateName(string(long)) == nil {
		t.Error("a name longer than 255 characters was accepted")
	}
}

func TestParseReference(t *testing.T) {
	d := digest.FromString("x")
	if tag, dg, err := ParseReference(string(d)); err != nil || tag != "" || dg != d {
		t.Errorf("digest reference: %q %q %v", tag, dg, err)
	}
	if tag, _, err := ParseReference("v1.0_rc-1"); err != nil || tag != "v1.0_rc-1" {
		t.Errorf("tag reference: %q %v", tag, err)
	}
	for _, ref := range []string{"sha256:abc", "md5:" + string(make([]byte, 0)), ".tag", "-tag", string(bytes.Repeat([]byte("a"), 129))} {
		if _, _, err := ParseReference(ref); err == nil {
			t.Errorf("ParseReference(%q) accepted", ref)
		}
	}
}

func TestPage(t *testing.T) {
	all := []string{"a", "b", "c", "d"}
	check := func(n int, last string, want []string, wantMore bool) {
		t.Helper()
		got, more := Page(all, n, last)
		if !slicesEqual(got, want) || more != wantMore {
			t.Errorf("Page(%d, %q) = %v,%v want %v,%v", n, last, got, more, want, wantMore)
		}
	}
	check(-1, "", all, false)
	check(2, "", []string{"a", "b"}, true)
	check(2, "b", []string{"c", "d"}, false)
	check(2, "bb", []string{"c", "d"}, false)
	check(0, "", []string{}, false)
	check(10, "d", []string{}, false)
}

func slicesEqual(a, b []string) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

// shortWriter fails after n bytes, like a full disk.
type shortWriter struct{ n int }

func (w *shortWriter) Write(p []byte) (int, error) {
	if len(p) > w.n {
		w.n = 0
		return 0, io.ErrShortWrite
	}
	w.n -= len(p)
	return len(p), nil
}

func TestCopyHashing(t *testing.T) {
	for _, size := range []int{0, 1, copyBufSize - 1, copyBufSize, 3*copyBufSize + 17, 11 * copyBufSize} {
		data := make([]byte, size)
		rand.Read(data)
		var dst bytes.Buffer
		h := sha256.New()
		n, err := copyHashing(&dst, h, io.MultiReader(bytes.NewReader(data[:size/3]), bytes.NewReader(data[size/3:])))
		if err != nil || n != int64(size) || !bytes.Equal(dst.Bytes(), data) {
			t.Fatalf("size %d: n=%d err=%v equal=%v", size, n, err, bytes.Equal(dst.Bytes(), data))
		}
		if want := sha256.Sum256(data); !bytes.Equal(h.Sum(nil), want[:]) {
			t.Fatalf("size %d: hash differs", size)
		}
	}
	// A failing writer stops the copy with its error, without deadlock.
	data := make([]byte, 10*copyBufSize)
	_, err := copyHashing(&shortWriter{n: 2 * copyBufSize}, sha256.New(), bytes.NewReader(data))
	if !errors.Is(err, io.ErrShortWrite) {
		t.Fatalf("err = %v, want ErrShortWrite", err)
	}
	// A body cut short is an error, not the end of the data.
	_, err = copyHashing(io.Discard, sha256.New(), io.MultiReader(bytes.NewReader(data[:100]), errReader{io.ErrUnexpectedEOF}))
	if !errors.Is(err, io.ErrUnexpectedEOF) {
		t.Fatalf("err = %v, want ErrUnexpectedEOF", err)
	}
}

type errReader struct{ err error }

func (r errReader) Read([]byte) (int, error) { return 0, r.err }
