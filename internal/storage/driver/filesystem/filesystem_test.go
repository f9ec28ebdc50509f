package filesystem_test

import (
	"context"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/cairn-registry/cairn/internal/storage/driver"
	"github.com/cairn-registry/cairn/internal/storage/driver/filesystem"
	"github.com/cairn-registry/cairn/internal/storage/driver/testsuite"
)

func TestSuite(t *testing.T) {
	testsuite.Run(t, func(t *testing.T) driver.Driver { return newDriver(t, t.TempDir()) })
}

func newDriver(tb testing.TB, root string) *filesystem.Driver {
	tb.Helper()
	d, err := filesystem.New(root)
	if err != nil {
		tb.Fatalf("New(%s): %v", root, err)
	}
	return d
}

func TestNew(t *testing.T) {
	tmp := t.TempDir()
	root := filepath.Join(tmp, "missing", "root")
	d := newDriver(t, root)
	if fi, err := os.Stat(root); err != nil || !fi.IsDir() {
		t.Fatalf("New did not create its root: %v", err)
	}
	if err := d.PutContent(context.Background(), "/a/b", []byte("x")); err != nil {
		t.Fatalf("PutContent: %v", err)
	}
	if b, err := os.ReadFile(filepath.Join(root, "a", "b")); err != nil || string(b) != "x" {
		t.Fatalf("file on disk = %q, %v; want %q under the root", b, err, "x")
	}
	file := filepath.Join(tmp, "file")
	if err := os.WriteFile(file, nil, 0o666); err != nil {
		t.Fatal(err)
	}
	if _, err := filesystem.New(file); err == nil {
		t.Errorf("New(a regular file) succeeded")
	}
	if _, err := filesystem.New(""); err == nil {
		t.Errorf(`New("") succeeded`)
	}
}

// TestDeleteFilesPrunes checks that DeleteFiles removes the directories it
// empties, up to the first non-empty one, and never the root.
func TestDeleteFilesPrunes(t *testing.T) {
	ctx := context.Background()
	root := t.TempDir()
	d := newDriver(t, root)
	const blobs = "/docker/registry/v2/blobs/sha256/ab"
	b1 := blobs + "/ab" + strings.Repeat("1", 62) + "/data"
	b2 := blobs + "/ab" + strings.Repeat("2", 62) + "/data"
	link := "/docker/registry/v2/repositories/r/_layers/sha256/x/link"
	for _, p := range []string{b1, b2, link} {
		if err := d.PutContent(ctx, p, []byte(p)); err != nil {
			t.Fatal(err)
		}
	}
	exists := func(p string) bool {
		_, err := os.Stat(filepath.Join(root, filepath.FromSlash(p)))
		if err != nil && !errors.Is(err, os.ErrNotExist) {
			t.Fatal(err)
		}
		return err == nil
	}
	deleteFiles := func(paths ...string) {
		t.Helper()
		if n, err := d.DeleteFiles(ctx, paths); n != len(paths) || err != nil {
			t.Fatalf("DeleteFiles(%q) = %d, %v", paths, n, err)
		}
	}

	deleteFiles(b1)
	if exists(filepath.Dir(b1)) || !exists(b2) {
		t.Fatalf("after deleting %s: its directory exists %v, sibling %s exists %v; want false, true",
			b1, exists(filepath.Dir(b1)), b2, exists(b2))
	}
	deleteFiles(b2)
	for _, gone := range []string{blobs, "/docker/registry/v2/blobs"} {
		if exists(gone) {
			t.Errorf("%s survived the deletion of its last file", gone)
		}
	}
	if !exists(link) {
		t.Fatalf("%s was removed", link)
	}
	deleteFiles(link)
	if entries, err := os.ReadDir(root); err != nil || len(entries) != 0 {
		t.Fatalf("root after deleting every file: %v, %v; want it empty and present", entries, err)
	}
	// Missing files count as deleted, also below missing directories.
	deleteFiles(b1, link)
	if !exists("/") {
		t.Fatalf("root was removed")
	}
}

func TestDeleteFilesDirectoryIsError(t *testing.T) {
	ctx := context.Background()
	root := t.TempDir()
	d := newDriver(t, root)
	if err := d.PutContent(ctx, "/full/file", []byte("x")); err != nil {
		t.Fatal(err)
	}
	if err := os.Mkdir(filepath.Join(root, "empty"), 0o777); err != nil {
		t.Fatal(err)
	}
	n, err := d.DeleteFiles(ctx, []string{"/full", "/empty"})
	if n != 0 || err == nil || !strings.Contains(err.Error(), "/full") || !strings.Contains(err.Error(), "/empty") {
		t.Fatalf("DeleteFiles(two directories) = %d, %v; want 0 and an error naming both", n, err)
	}
	for _, dir := range []string{"full", "empty"} {
		if fi, err := os.Stat(filepath.Join(root, dir)); err != nil || !fi.IsDir() {
			t.Errorf("directory %s removed by DeleteFiles: %v", dir, err)
		}
	}
}

// TestReaderIsFile checks that reads hand net/http an *os.File, which it
// serves with sendfile.
func TestReaderIsFile(t *testing.T) {
	ctx := context.Background()
	d := newDriver(t, t.TempDir())
	if err := d.PutContent(ctx, "/f", []byte("0123456789")); err != nil {
		t.Fatal(err)
	}
	for _, off := range []int64{0, 4, 10} {
		r, err := d.Reader(ctx, "/f", off)
		if err != nil {
			t.Fatal(err)
		}
		f, ok := r.(*os.File)
		if !ok {
			t.Fatalf("Reader(%d) is a %T, want *os.File", off, r)
		}
		if pos, err := f.Seek(0, 1); err != nil || pos != off {
			t.Errorf("Reader(%d) positioned at %d, %v", off, pos, err)
		}
		f.Close()
	}
}

// TestForeignNamesHidden checks that names no driver path can have, such as
// a temporary file left by a crash, stay out of List and Walk.
func TestForeignNamesHidden(t *testing.T) {
	ctx := context.Background()
	root := t.TempDir()
	d := newDriver(t, root)
	if err := d.PutContent(ctx, "/dir/link", []byte("x")); err != nil {
		t.Fatal(err)
	}
	entries, err := os.ReadDir(filepath.Join(root, "dir"))
	if err != nil || len(entries) != 1 || entries[0].Name() != "link" {
		t.Fatalf("directory after PutContent holds %v, %v; want only link", entries, err)
	}
	for _, name := range []string{"dir/link~12ab", "with space"} {
		if err := os.WriteFile(filepath.Join(root, filepath.FromSlash(name)), nil, 0o666); err != nil {
			t.Fatal(err)
		}
	}
	if got, err := d.List(ctx, "/dir"); err != nil || !slices.Equal(got, []string{"/dir/link"}) {
		t.Errorf("List(/dir) = %q, %v", got, err)
	}
	var walked []string
	if err := d.Walk(ctx, "/", func(fi driver.FileInfo) error {
		walked = append(walked, fi.Path)
		return nil
	}); err != nil || !slices.Equal(walked, []string{"/dir", "/dir/link"}) {
		t.Errorf("Walk(/) = %q, %v", walked, err)
	}
}

// BenchmarkDeleteFiles deletes 10,000 blobs in the registry layout per
// operation, pruning their directories, and reports files per second.
func BenchmarkDeleteFiles(b *testing.B) {
	const files = 10000
	ctx := context.Background()
	root := b.TempDir()
	d := newDriver(b, root)
	paths := make([]string, files)
	for i := range paths {
		paths[i] = testsuite.BlobDataPath("/docker/registry/v2", i)
	}
	total := 0
	for b.Loop() {
		b.StopTimer()
		for _, p := range paths {
			full := filepath.Join(root, filepath.FromSlash(p))
			if err := os.MkdirAll(filepath.Dir(full), 0o777); err != nil {
				b.Fatal(err)
			}
			if err := os.WriteFile(full, []byte("x"), 0o666); err != nil {
				b.Fatal(err)
			}
		}
		b.StartTimer()
		n, err := d.DeleteFiles(ctx, paths)
		if n != files || err != nil {
			b.Fatalf("DeleteFiles = %d, %v", n, err)
		}
		total += n
	}
	b.ReportMetric(float64(total)/b.Elapsed().Seconds(), "files/s")
}

// TestWillRead: the read-ahead hint succeeds for a file and reports a
// missing one as not found.
func TestWillRead(t *testing.T) {
	d := newDriver(t, t.TempDir())
	ctx := t.Context()
	if err := d.PutContent(ctx, "/a/b", []byte("layer")); err != nil {
		t.Fatal(err)
	}
	if err := d.WillRead(ctx, "/a/b"); err != nil {
		t.Fatal(err)
	}
	if err := d.WillRead(ctx, "/a/missing"); !errors.Is(err, driver.ErrNotFound) {
		t.Fatalf("WillRead of a missing file: %v, want ErrNotFound", err)
	}
	if err := d.WillRead(ctx, "/a"); !errors.Is(err, driver.ErrNotFound) {
		t.Fatalf("WillRead of a directory: %v, want ErrNotFound", err)
	}
}

// TestMoveNewAndSync: MoveNew renames onto a free name only, leaving both
// files as they were otherwise; Sync reports a missing file as not found.
func TestMoveNewAndSync(t *testing.T) {
	ctx := context.Background()
	d, err := filesystem.New(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	for p, b := range map[string]string{"/a/src": "new", "/b/dst": "old", "/a/other": "x"} {
		if err := d.PutContent(ctx, p, []byte(b)); err != nil {
			t.Fatal(err)
		}
	}
	if err := d.MoveNew(ctx, "/a/src", "/b/dst"); !errors.Is(err, fs.ErrExist) {
		t.Fatalf("MoveNew onto an existing file = %v, want fs.ErrExist", err)
	}
	for p, want := range map[string]string{"/a/src": "new", "/b/dst": "old"} {
		if got, err := d.GetContent(ctx, p); err != nil || string(got) != want {
			t.Errorf("%s after a refused MoveNew = %q, %v; want %q", p, got, err, want)
		}
	}
	if err := d.MoveNew(ctx, "/a/src", "/c/d/new"); err != nil {
		t.Fatal(err)
	}
	if got, err := d.GetContent(ctx, "/c/d/new"); err != nil || string(got) != "new" {
		t.Errorf("/c/d/new = %q, %v", got, err)
	}
	if _, err := d.Stat(ctx, "/a/src"); !errors.Is(err, driver.ErrNotFound) {
		t.Errorf("source after MoveNew: %v", err)
	}
	if err := d.MoveNew(ctx, "/a/gone", "/c/x"); !errors.Is(err, driver.ErrNotFound) {
		t.Errorf("MoveNew of a missing file = %v, want not found", err)
	}
	if err := d.Sync(ctx, "/c/d/new"); err != nil {
		t.Errorf("Sync: %v", err)
	}
	if err := d.Sync(ctx, "/c/d/gone"); !errors.Is(err, driver.ErrNotFound) {
		t.Errorf("Sync of a missing file = %v, want not found", err)
	}
	if err := d.PutCached(ctx, "/c/cached", []byte("c")); err != nil {
		t.Fatal(err)
	}
	if got, err := d.GetContent(ctx, "/c/cached"); err != nil || string(got) != "c" {
		t.Errorf("PutCached then GetContent = %q, %v", got, err)
	}
}
