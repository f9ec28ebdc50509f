package testsuite

import (
	"context"
	"errors"
	"io"
	"math/rand/v2"
	"testing"

	"github.com/cairn-registry/cairn/internal/storage/driver"
)

func put(t *testing.T, d driver.Driver, p string, b []byte) {
	t.Helper()
	if err := d.PutContent(context.Background(), p, b); err != nil {
		t.Fatalf("PutContent(%s): %v", p, err)
	}
}

func get(t *testing.T, d driver.Driver, p string) []byte {
	t.Helper()
	b, err := d.GetContent(context.Background(), p)
	if err != nil {
		t.Fatalf("GetContent(%s): %v", p, err)
	}
	return b
}

func stat(t *testing.T, d driver.Driver, p string) driver.FileInfo {
	t.Helper()
	fi, err := d.Stat(context.Background(), p)
	if err != nil {
		t.Fatalf("Stat(%s): %v", p, err)
	}
	return fi
}

func readAll(t *testing.T, d driver.Driver, p string, off int64) []byte {
	t.Helper()
	r, err := d.Reader(context.Background(), p, off)
	if err != nil {
		t.Fatalf("Reader(%s, %d): %v", p, off, err)
	}
	defer r.Close()
	b, err := io.ReadAll(r)
	if err != nil {
		t.Fatalf("reading %s from %d: %v", p, off, err)
	}
	return b
}

func writeAll(t *testing.T, w driver.FileWriter, b []byte) {
	t.Helper()
	if n, err := w.Write(b); err != nil || n != len(b) {
		t.Fatalf("Write(%d bytes) = %d, %v", len(b), n, err)
	}
}

// walkPaths returns the paths Walk visits below p.
func walkPaths(t *testing.T, d driver.Driver, p string) []string {
	t.Helper()
	var got []string
	if err := d.Walk(context.Background(), p, func(fi driver.FileInfo) error {
		got = append(got, fi.Path)
		return nil
	}); err != nil {
		t.Fatalf("Walk(%s): %v", p, err)
	}
	return got
}

func infoPaths(fis []driver.FileInfo) []string {
	out := make([]string, len(fis))
	for i, fi := range fis {
		out[i] = fi.Path
	}
	return out
}

func wantNotFound(t *testing.T, d driver.Driver, err error, p string) {
	t.Helper()
	var pe driver.PathNotFoundError
	if !errors.Is(err, driver.ErrNotFound) || !errors.As(err, &pe) {
		t.Errorf("%s: error %v, want a PathNotFoundError", p, err)
		return
	}
	if pe.Path != p || pe.Driver != d.Name() {
		t.Errorf("%s: PathNotFoundError names path %q of driver %q, want %q of %q", p, pe.Path, pe.Driver, p, d.Name())
	}
}

func wantInvalid(t *testing.T, err error, op, p string) {
	t.Helper()
	var ie driver.InvalidPathError
	if !errors.As(err, &ie) || ie.Path != p {
		t.Errorf("%s(%q): error %v, want an InvalidPathError for it", op, p, err)
	}
}

// randomBytes returns n bytes determined by seed.
func randomBytes(seed uint64, n int) []byte {
	b := make([]byte, n)
	_, _ = rand.NewChaCha8([32]byte{byte(seed), byte(seed >> 8), 0xca}).Read(b)
	return b
}

// capability returns d's optional interface T, skipping the test (saying
// the driver does not do what) when d has none: the optional-interface
// tests check only drivers that claim the feature.
func capability[T any](t *testing.T, d driver.Driver, what string) T {
	t.Helper()
	c, ok := driver.As[T](d)
	if !ok {
		t.Skip(d.Name() + " does not " + what)
	}
	return c
}

// refusesBadPaths checks that op refuses with an InvalidPathError each of
// a few paths that are not a driver path (root, relative, climbing out of
// base); name says which call, for messages.
func refusesBadPaths(t *testing.T, base, name string, op func(bad string) error) {
	t.Helper()
	for _, bad := range []string{"/", "relative", base + "/../x"} {
		if err := op(bad); !errors.As(err, new(driver.InvalidPathError)) {
			t.Errorf("%s %q = %v, want an InvalidPathError", name, bad, err)
		}
	}
}
