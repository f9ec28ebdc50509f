package testsuite

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"

	"github.com/cairn-registry/cairn/internal/storage/driver"
)

// BlobDataPath returns the distribution layout's data path of a blob whose
// sha256 hex is derived from i, below base.
func BlobDataPath(base string, i int) string {
	sum := sha256.Sum256(fmt.Appendf(nil, "blob %d", i))
	h := hex.EncodeToString(sum[:])
	return base + "/blobs/sha256/" + h[:2] + "/" + h + "/data"
}

func testDeleteFilesMixed(t *testing.T, d driver.Driver, base string) {
	ctx := context.Background()
	present := []string{base + "/a/1", base + "/a/2", base + "/b/c/3"}
	for _, p := range present {
		put(t, d, p, []byte(p))
	}
	keep := base + "/a/keep"
	put(t, d, keep, []byte("keep"))
	paths := []string{
		present[0],
		base + "/a/missing", // missing in an existing directory
		"bad path",          // invalid
		present[1],
		base + "/nodir/x/missing", // missing with missing parents
		base + "/a/../b/c/3",      // invalid, though it resolves to a file
		present[2],
	}
	n, err := d.DeleteFiles(ctx, paths)
	if n != 5 {
		t.Errorf("DeleteFiles counted %d paths gone, want 5 (3 present, 2 missing)", n)
	}
	if got := invalidPathsIn(err); !slices.Equal(got, []string{"bad path", base + "/a/../b/c/3"}) {
		t.Errorf("DeleteFiles error %v reports invalid paths %q, want both invalid paths", err, got)
	}
	if err := d.Walk(ctx, base, func(fi driver.FileInfo) error {
		if !fi.IsDir && fi.Path != keep {
			t.Errorf("after DeleteFiles %s is still there", fi.Path)
		}
		return nil
	}); err != nil {
		t.Fatalf("Walk: %v", err)
	}
	if got := get(t, d, keep); string(got) != "keep" {
		t.Fatalf("sibling not in the list: %q, want %q", got, "keep")
	}
	if n, err := d.DeleteFiles(ctx, nil); n != 0 || err != nil {
		t.Errorf("DeleteFiles(nil) = %d, %v; want 0, nil", n, err)
	}
}

// testDeleteFilesDirectory checks that a directory in the list never costs
// the files below it. Whether it is an error (filesystem) or a key that does
// not exist (object stores) is left to each driver's own tests.
func testDeleteFilesDirectory(t *testing.T, d driver.Driver, base string) {
	ctx := context.Background()
	p := base + "/dir/file"
	put(t, d, p, []byte("x"))
	_, _ = d.DeleteFiles(ctx, []string{base + "/dir"})
	if got := get(t, d, p); string(got) != "x" {
		t.Fatalf("file below a directory passed to DeleteFiles: %q, want %q", got, "x")
	}
}

// testDeleteFilesMany deletes more files than one S3 (1000) or Azure (256)
// batch holds, in the registry's blob layout.
func testDeleteFilesMany(t *testing.T, d driver.Driver, base string) {
	ctx := context.Background()
	const files = 2100
	paths := make([]string, files, files+10)
	for i := range paths {
		paths[i] = BlobDataPath(base, i)
	}
	PutParallel(t, d, paths)
	for i := range 10 {
		paths = append(paths, BlobDataPath(base, files+i))
	}
	n, err := d.DeleteFiles(ctx, paths)
	if n != len(paths) || err != nil {
		t.Fatalf("DeleteFiles(%d paths) = %d, %v; want %d, nil", len(paths), n, err, len(paths))
	}
	var left []string
	err = d.Walk(ctx, base, func(fi driver.FileInfo) error {
		if !fi.IsDir {
			left = append(left, fi.Path)
		}
		return nil
	})
	if err != nil && !errors.Is(err, driver.ErrNotFound) {
		t.Fatalf("Walk: %v", err)
	}
	if len(left) > 0 {
		t.Fatalf("%d files left after DeleteFiles, first %s", len(left), left[0])
	}
}

func testDeleteFilesCancelled(t *testing.T, d driver.Driver, base string) {
	paths := []string{base + "/x", base + "/y"}
	for _, p := range paths {
		put(t, d, p, []byte("x"))
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	n, err := d.DeleteFiles(ctx, paths)
	if n != 0 || !errors.Is(err, context.Canceled) {
		t.Errorf("DeleteFiles with a cancelled context = %d, %v; want 0 and context.Canceled", n, err)
	}
	for _, p := range paths {
		stat(t, d, p)
	}
}

// testDeleteFilesWhileWriting runs pushes into a directory while its files
// are deleted: a driver that prunes emptied directories must not fail a
// write whose directory vanished under it.
func testDeleteFilesWhileWriting(t *testing.T, d driver.Driver, base string) {
	ctx := context.Background()
	dir := base + "/blobs/sha256/ab/abcdef"
	const rounds = 300
	var wg sync.WaitGroup
	for g := range 4 {
		wg.Go(func() {
			p := fmt.Sprintf("%s/f%d", dir, g)
			upload := fmt.Sprintf("%s/_uploads/%d/data", base, g)
			for i := range rounds {
				want := fmt.Sprintf("%d/%d", g, i)
				var err error
				switch i % 3 {
				case 0:
					err = d.PutContent(ctx, p, []byte(want))
				case 1:
					var w driver.FileWriter
					if w, err = d.Writer(ctx, p, false); err == nil {
						if _, err = w.Write([]byte(want)); err == nil {
							err = w.Commit(ctx)
						}
					}
				case 2:
					if err = d.PutContent(ctx, upload, []byte(want)); err == nil {
						err = d.Move(ctx, upload, p)
					}
				}
				if err != nil {
					t.Errorf("write %d of %s: %v", i, p, err)
					return
				}
				if got, err := d.GetContent(ctx, p); err != nil || string(got) != want {
					t.Errorf("read %d of %s = %q, %v; want %q", i, p, got, err, want)
					return
				}
				if n, err := d.DeleteFiles(ctx, []string{p}); n != 1 || err != nil {
					t.Errorf("DeleteFiles(%s) = %d, %v", p, n, err)
					return
				}
			}
		})
	}
	wg.Wait()
}

// PutParallel writes each path's own name as its content, a few at a time
// (drivers' own tests use it to fill a store fast).
func PutParallel(t *testing.T, d driver.Driver, paths []string) {
	t.Helper()
	ctx := context.Background()
	next := make(chan string)
	var wg sync.WaitGroup
	for range 16 {
		wg.Go(func() {
			for p := range next {
				if err := d.PutContent(ctx, p, []byte(p)); err != nil {
					t.Errorf("PutContent(%s): %v", p, err)
				}
			}
		})
	}
	for _, p := range paths {
		next <- p
	}
	close(next)
	wg.Wait()
	if t.Failed() {
		t.FailNow()
	}
}

// invalidPathsIn returns the paths of every InvalidPathError in err's tree.
func invalidPathsIn(err error) []string {
	var out []string
	var visit func(error)
	visit = func(err error) {
		var ie driver.InvalidPathError
		switch e := err.(type) {
		case nil:
		case interface{ Unwrap() []error }:
			for _, c := range e.Unwrap() {
				visit(c)
			}
		case interface{ Unwrap() error }:
			visit(e.Unwrap())
		default:
			if errors.As(err, &ie) {
				out = append(out, ie.Path)
			}
		}
	}
	visit(err)
	return out
}
