// Package testsuite is the conformance suite every storage driver runs. It
// asserts the driver.Driver contract through the interface only, so the same
// tests run against the filesystem and inmemory drivers and against real
// object stores (MinIO, fake-gcs-server, Azurite).
//
// Each subtest gets a fresh driver from newDriver and a scratch directory
// that is deleted when it ends; afterwards Walk("/") must find nothing, so a
// test, or a Delete, that leaves files behind fails.
package testsuite

import (
	"bytes"
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/cairn-registry/cairn/internal/storage/driver"
)

// Run runs the whole suite. newDriver returns a driver whose "/" is a test
// root that is empty and not shared with other tests running at the same
// time; it may register cleanups on t.
func Run(t *testing.T, newDriver func(t *testing.T) driver.Driver) {
	tests := []struct {
		name string
		fn   func(t *testing.T, d driver.Driver, base string)
	}{
		{"PutGetContent", testPutGetContent},
		{"EmptyFiles", testEmptyFiles},
		{"InvalidPaths", testInvalidPaths},
		{"RootIsNotAFile", testRootIsNotAFile},
		{"ManySegments", testManySegments},
		{"Stat", testStat},
		{"StatFile", testStatFile},
		{"ReaderOffsets", testReaderOffsets},
		{"ReadRange", testReadRange},
		{"ReadRangeLarge", testReadRangeLarge},
		{"ReadRangeConcurrent", testReadRangeConcurrent},
		{"Writer", testWriter},
		{"WriterAppend", testWriterAppend},
		{"WriterCancel", testWriterCancel},
		{"LargeFile", testLargeFile},
		{"List", testList},
		{"WalkOrder", testWalkOrder},
		{"WalkSkipDir", testWalkSkipDir},
		{"WalkStop", testWalkStop},
		{"Move", testMove},
		{"MoveOverwrite", testMoveOverwrite},
		{"MoveMissingSource", testMoveMissingSource},
		{"Delete", testDelete},
		{"ConcurrentWriters", testConcurrentWriters},
		{"ConcurrentPutContent", testConcurrentPutContent},
		{"PutContentWhileDeleting", testPutContentWhileDeleting},
		{"DeleteFilesMixed", testDeleteFilesMixed},
		{"DeleteFilesDirectory", testDeleteFilesDirectory},
		{"DeleteFilesMany", testDeleteFilesMany},
		{"DeleteFilesCancelled", testDeleteFilesCancelled},
		{"DeleteFilesWhileWriting", testDeleteFilesWhileWriting},
		{"SignedURL", testSignedURL},
		{"Concat", testConcat},
		{"StageWriter", testStageWriter},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			d := newDriver(t)
			// Cleanups run last-registered first: the scratch directory
			// is deleted before the check that nothing is left.
			t.Cleanup(func() { assertEmpty(t, d) })
			base := "/suite-" + strings.ToLower(tc.name)
			t.Cleanup(func() {
				if err := d.Delete(context.Background(), base); err != nil && !errors.Is(err, driver.ErrNotFound) {
					t.Errorf("cleanup: Delete(%s): %v", base, err)
				}
			})
			tc.fn(t, d, base)
		})
	}
}

// assertEmpty fails t if the driver's root holds anything.
func assertEmpty(t *testing.T, d driver.Driver) {
	t.Helper()
	var left []string
	err := d.Walk(context.Background(), "/", func(fi driver.FileInfo) error {
		left = append(left, fi.Path)
		return nil
	})
	if err != nil && !errors.Is(err, driver.ErrNotFound) {
		t.Errorf("teardown: Walk(/): %v", err)
	}
	if len(left) > 0 {
		t.Errorf("teardown: %d entries left behind, first: %q", len(left), left[:min(len(left), 10)])
	}
}

func testPutGetContent(t *testing.T, d driver.Driver, base string) {
	ctx := context.Background()
	p := base + "/dir/file"
	want := randomBytes(1, 4096+17)
	put(t, d, p, want)
	if got := get(t, d, p); !bytes.Equal(got, want) {
		t.Fatalf("GetContent: got %d bytes, want the %d written", len(got), len(want))
	}
	// An overwrite with shorter content must not keep old bytes.
	put(t, d, p, []byte("short"))
	if got := get(t, d, p); string(got) != "short" {
		t.Fatalf("GetContent after overwrite = %q, want %q", got, "short")
	}
	_, err := d.GetContent(ctx, base+"/dir/missing")
	wantNotFound(t, d, err, base+"/dir/missing")
	_, err = d.GetContent(ctx, base+"/nodir/missing")
	wantNotFound(t, d, err, base+"/nodir/missing")
	_, err = d.GetContent(ctx, base+"/dir")
	wantNotFound(t, d, err, base+"/dir")
	// A parent that is a file makes the child missing, not an I/O error.
	_, err = d.GetContent(ctx, p+"/child")
	wantNotFound(t, d, err, p+"/child")
}

func testEmptyFiles(t *testing.T, d driver.Driver, base string) {
	ctx := context.Background()
	put(t, d, base+"/put", nil)
	w, err := d.Writer(ctx, base+"/writer", false)
	if err != nil {
		t.Fatalf("Writer: %v", err)
	}
	if err := w.Commit(ctx); err != nil {
		t.Fatalf("Commit: %v", err)
	}
	for _, p := range []string{base + "/put", base + "/writer"} {
		if got := get(t, d, p); len(got) != 0 {
			t.Errorf("GetContent(%s) = %d bytes, want 0", p, len(got))
		}
		fi := stat(t, d, p)
		if fi.Size != 0 || fi.IsDir {
			t.Errorf("Stat(%s) = %+v, want an empty file", p, fi)
		}
		if got := readAll(t, d, p, 0); len(got) != 0 {
			t.Errorf("Reader(%s, 0) read %d bytes, want 0", p, len(got))
		}
	}
}

// invalidPaths break the path rules of driver.ValidPath.
var invalidPaths = []string{
	"", "relative", "/trailing/", "//double", "/a//b", "/a/./b", "/a/../b", "/..", "/.",
	"/sp ace", "/tab\tx", "/nul\x00", "/caf\u00e9", `/back\slash`, "/q?x", "/h#x", "/p%20", "/t~x",
}

func testInvalidPaths(t *testing.T, d driver.Driver, base string) {
	ctx := context.Background()
	valid := base + "/valid"
	put(t, d, valid, []byte("v"))
	for _, p := range invalidPaths {
		_, err := d.GetContent(ctx, p)
		wantInvalid(t, err, "GetContent", p)
		wantInvalid(t, d.PutContent(ctx, p, []byte("x")), "PutContent", p)
		_, err = d.Reader(ctx, p, 0)
		wantInvalid(t, err, "Reader", p)
		_, err = d.ReadRange(ctx, p, 0, 1)
		wantInvalid(t, err, "ReadRange", p)
		for _, app := range []bool{false, true} {
			w, err := d.Writer(ctx, p, app)
			if err == nil {
				_ = w.Cancel(ctx)
			}
			wantInvalid(t, err, fmt.Sprintf("Writer(append=%v)", app), p)
		}
		_, err = d.Stat(ctx, p)
		wantInvalid(t, err, "Stat", p)
		_, err = d.List(ctx, p)
		wantInvalid(t, err, "List", p)
		wantInvalid(t, d.Move(ctx, valid, p), "Move to", p)
		wantInvalid(t, d.Move(ctx, p, valid), "Move from", p)
		wantInvalid(t, d.Delete(ctx, p), "Delete", p)
		wantInvalid(t, d.Walk(ctx, p, func(driver.FileInfo) error { return nil }), "Walk", p)
	}
	if got := walkPaths(t, d, base); !slices.Equal(got, []string{valid}) {
		t.Fatalf("after the rejected calls Walk(%s) = %q, want only %q", base, got, valid)
	}
	if got := get(t, d, valid); string(got) != "v" {
		t.Fatalf("GetContent(%s) = %q, want %q", valid, got, "v")
	}
}

func testRootIsNotAFile(t *testing.T, d driver.Driver, base string) {
	ctx := context.Background()
	src := base + "/src"
	put(t, d, src, []byte("s"))
	wantInvalid(t, d.PutContent(ctx, "/", []byte("x")), "PutContent", "/")
	for _, app := range []bool{false, true} {
		w, err := d.Writer(ctx, "/", app)
		if err == nil {
			_ = w.Close()
		}
		wantInvalid(t, err, fmt.Sprintf("Writer(append=%v)", app), "/")
	}
	wantInvalid(t, d.Move(ctx, src, "/"), "Move to", "/")
	wantInvalid(t, d.Move(ctx, "/", src), "Move from", "/")
	if fi := stat(t, d, "/"); !fi.IsDir {
		t.Fatalf("Stat(/) = %+v, want a directory", fi)
	}
	if got := get(t, d, src); string(got) != "s" {
		t.Fatalf("GetContent(%s) = %q, want %q", src, got, "s")
	}
}

func testManySegments(t *testing.T, d driver.Driver, base string) {
	ctx := context.Background()
	var sb strings.Builder
	sb.WriteString(base)
	for i := range 40 {
		fmt.Fprintf(&sb, "/s%02d", i)
	}
	dir := sb.String()
	long := "/sha256:" + strings.Repeat("0123456789abcdef", 4) + "@v1.0_x+y=z-w"
	p := dir + long
	put(t, d, p, []byte("deep"))
	if got := get(t, d, p); string(got) != "deep" {
		t.Fatalf("GetContent = %q, want %q", got, "deep")
	}
	if got, err := d.List(ctx, dir); err != nil || !slices.Equal(got, []string{p}) {
		t.Fatalf("List(%s) = %q, %v; want [%q]", dir, got, err, p)
	}
	got := walkPaths(t, d, base)
	if len(got) != 41 || got[40] != p || got[39] != dir {
		t.Fatalf("Walk found %d entries ending %q, want 40 directories then %q", len(got), got[max(0, len(got)-2):], p)
	}
}

func testStat(t *testing.T, d driver.Driver, base string) {
	ctx := context.Background()
	start := time.Now()
	p := base + "/dir/file"
	put(t, d, p, []byte("12345"))
	fi := stat(t, d, p)
	if fi.Path != p || fi.Size != 5 || fi.IsDir {
		t.Errorf("Stat(file) = %+v, want path %s, size 5, not a directory", fi, p)
	}
	// Generous bounds: object stores stamp with their own, second-granular clock.
	if fi.ModTime.Before(start.Add(-time.Minute)) || fi.ModTime.After(time.Now().Add(time.Minute)) {
		t.Errorf("Stat(file).ModTime = %v, want about %v", fi.ModTime, start)
	}
	put(t, d, p, []byte("123"))
	if fi := stat(t, d, p); fi.Size != 3 {
		t.Errorf("Stat after overwrite: size %d, want 3", fi.Size)
	}
	if fi := stat(t, d, base+"/dir"); fi.Path != base+"/dir" || !fi.IsDir {
		t.Errorf("Stat(dir) = %+v, want directory %s", fi, base+"/dir")
	}
	for _, missing := range []string{base + "/dir/fil", base + "/di", base + "/dir/file/x", base + "/nodir/x"} {
		_, err := d.Stat(ctx, missing)
		wantNotFound(t, d, err, missing)
	}
}

// testStatFile checks the driver's FileStater when it has one, and
// driver.StatFile, which falls back to Stat otherwise: a file is described,
// anything else (missing, a directory, the root) is not found.
func testStatFile(t *testing.T, d driver.Driver, base string) {
	ctx := context.Background()
	p := base + "/dir/file"
	put(t, d, p, []byte("12345"))
	statFiles := map[string]func(context.Context, string) (driver.FileInfo, error){
		"driver.StatFile": func(ctx context.Context, p string) (driver.FileInfo, error) { return driver.StatFile(ctx, d, p) },
	}
	if fs, ok := d.(driver.FileStater); ok {
		statFiles["StatFile"] = fs.StatFile
	}
	for name, statFile := range statFiles {
		fi, err := statFile(ctx, p)
		if err != nil || fi.Path != p || fi.Size != 5 || fi.IsDir || fi.ModTime.IsZero() {
			t.Errorf("%s(file) = %+v, %v; want path %s, size 5, a modification time, not a directory", name, fi, err, p)
		}
		for _, missing := range []string{base + "/dir/fil", base + "/dir", base, base + "/dir/file/x", base + "/nodir/x", "/"} {
			_, err := statFile(ctx, missing)
			wantNotFound(t, d, err, missing)
		}
		for _, bad := range []string{"", "relative", "/trailing/", "/a//b", "/a/../b"} {
			_, err := statFile(ctx, bad)
			wantInvalid(t, err, name, bad)
		}
	}
}

func testReaderOffsets(t *testing.T, d driver.Driver, base string) {
	ctx := context.Background()
	p := base + "/file"
	content := randomBytes(2, 1000)
	put(t, d, p, content)
	for _, off := range []int64{0, 1, 500, 999, 1000} {
		if got := readAll(t, d, p, off); !bytes.Equal(got, content[off:]) {
			t.Errorf("Reader(offset %d): got %d bytes, want the last %d of the file", off, len(got), len(content)-int(off))
		}
	}
	for _, off := range []int64{1001, 1 << 40, -1} {
		r, err := d.Reader(ctx, p, off)
		if err == nil {
			r.Close()
		}
		var oe driver.InvalidOffsetError
		if !errors.As(err, &oe) || oe.Offset != off || oe.Path != p {
			t.Errorf("Reader(offset %d) error = %v, want InvalidOffsetError for %s at %d", off, err, p, off)
		}
	}
	_, err := d.Reader(ctx, base+"/missing", 0)
	wantNotFound(t, d, err, base+"/missing")
	put(t, d, base+"/dir/f", []byte("x"))
	_, err = d.Reader(ctx, base+"/dir", 0)
	wantNotFound(t, d, err, base+"/dir")
}

func testWriter(t *testing.T, d driver.Driver, base string) {
	ctx := context.Background()
	p := base + "/up/data"
	w, err := d.Writer(ctx, p, false)
	if err != nil {
		t.Fatalf("Writer: %v", err)
	}
	var want []byte
	for i, n := range []int{1, 0, 7, 4096, 65537, 3} {
		chunk := randomBytes(uint64(10+i), n)
		if k, err := w.Write(chunk); err != nil || k != n {
			t.Fatalf("Write(%d bytes) = %d, %v", n, k, err)
		}
		want = append(want, chunk...)
		if w.Size() != int64(len(want)) {
			t.Fatalf("Size() = %d after writing %d bytes", w.Size(), len(want))
		}
	}
	if err := w.Commit(ctx); err != nil {
		t.Fatalf("Commit: %v", err)
	}
	if _, err := w.Write([]byte("late")); err == nil {
		t.Errorf("Write after Commit succeeded")
	}
	if err := w.Commit(ctx); err == nil {
		t.Errorf("second Commit succeeded")
	}
	if err := w.Close(); err != nil {
		t.Errorf("Close after Commit: %v", err)
	}
	if got := get(t, d, p); !bytes.Equal(got, want) {
		t.Fatalf("content: got %d bytes, want the %d written", len(got), len(want))
	}
	// A new, non-appending writer replaces the content.
	w, err = d.Writer(ctx, p, false)
	if err != nil {
		t.Fatalf("Writer over existing file: %v", err)
	}
	if w.Size() != 0 {
		t.Errorf("non-appending Writer over a file: Size() = %d, want 0", w.Size())
	}
	writeAll(t, w, []byte("new"))
	if err := w.Commit(ctx); err != nil {
		t.Fatalf("Commit: %v", err)
	}
	if got := get(t, d, p); string(got) != "new" {
		t.Fatalf("content after rewrite = %q, want %q", got, "new")
	}
}

func testWriterAppend(t *testing.T, d driver.Driver, base string) {
	ctx := context.Background()
	p := base + "/up/data"
	first, second := randomBytes(20, 70000), randomBytes(21, 3333)
	w, err := d.Writer(ctx, p, false)
	if err != nil {
		t.Fatalf("Writer: %v", err)
	}
	writeAll(t, w, first)
	if err := w.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	if _, err := w.Write([]byte("x")); err == nil {
		t.Errorf("Write after Close succeeded")
	}
	w, err = d.Writer(ctx, p, true)
	if err != nil {
		t.Fatalf("Writer(append): %v", err)
	}
	if w.Size() != int64(len(first)) {
		t.Fatalf("appending Writer: Size() = %d, want %d", w.Size(), len(first))
	}
	writeAll(t, w, second)
	if w.Size() != int64(len(first)+len(second)) {
		t.Fatalf("Size() = %d, want %d", w.Size(), len(first)+len(second))
	}
	if err := w.Commit(ctx); err != nil {
		t.Fatalf("Commit: %v", err)
	}
	if got := get(t, d, p); !bytes.Equal(got, append(first, second...)) {
		t.Fatalf("content: got %d bytes, want both writers' %d", len(got), len(first)+len(second))
	}
	_, err = d.Writer(ctx, base+"/up/missing", true)
	wantNotFound(t, d, err, base+"/up/missing")
}

func testWriterCancel(t *testing.T, d driver.Driver, base string) {
	ctx := context.Background()
	p := base + "/up/data"
	w, err := d.Writer(ctx, p, false)
	if err != nil {
		t.Fatalf("Writer: %v", err)
	}
	writeAll(t, w, []byte("discard me"))
	if err := w.Cancel(ctx); err != nil {
		t.Fatalf("Cancel: %v", err)
	}
	if _, err := w.Write([]byte("x")); err == nil {
		t.Errorf("Write after Cancel succeeded")
	}
	if err := w.Commit(ctx); err == nil {
		t.Errorf("Commit after Cancel succeeded")
	}
	_, err = d.Stat(ctx, p)
	wantNotFound(t, d, err, p)

	// Cancel of an appending writer discards the earlier writer's part too.
	w, err = d.Writer(ctx, p, false)
	if err != nil {
		t.Fatalf("Writer: %v", err)
	}
	writeAll(t, w, []byte("part one"))
	if err := w.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	w, err = d.Writer(ctx, p, true)
	if err != nil {
		t.Fatalf("Writer(append): %v", err)
	}
	writeAll(t, w, []byte("part two"))
	if err := w.Cancel(ctx); err != nil {
		t.Fatalf("Cancel: %v", err)
	}
	_, err = d.GetContent(ctx, p)
	wantNotFound(t, d, err, p)
}

// testLargeFile streams a file through Writer in odd-sized writes and reads
// it back in chunks, from the start and from the middle.
func testLargeFile(t *testing.T, d driver.Driver, base string) {
	ctx := context.Background()
	size := int64(64 << 20)
	if testing.Short() {
		size = 4 << 20
	}
	mid := size/2 + 12345
	p := base + "/large"
	w, err := d.Writer(ctx, p, false)
	if err != nil {
		t.Fatalf("Writer: %v", err)
	}
	src := rand.NewChaCha8([32]byte{3})
	whole, tail := sha256.New(), sha256.New()
	buf := make([]byte, 1<<20+7)
	sizes := []int{1, 4093, 65537, 1<<20 + 7, 333, 8191}
	for written, i := int64(0), 0; written < size; i++ {
		chunk := buf[:min(int64(sizes[i%len(sizes)]), size-written)]
		_, _ = src.Read(chunk)
		whole.Write(chunk)
		if end := written + int64(len(chunk)); end > mid {
			tail.Write(chunk[max(0, mid-written):])
		}
		if n, err := w.Write(chunk); err != nil || n != len(chunk) {
			t.Fatalf("Write(%d bytes) at %d = %d, %v", len(chunk), written, n, err)
		}
		written += int64(len(chunk))
	}
	if w.Size() != size {
		t.Fatalf("Size() = %d, want %d", w.Size(), size)
	}
	if err := w.Commit(ctx); err != nil {
		t.Fatalf("Commit: %v", err)
	}
	if fi := stat(t, d, p); fi.Size != size {
		t.Fatalf("Stat size = %d, want %d", fi.Size, size)
	}
	for _, c := range []struct {
		off  int64
		want []byte
	}{{0, whole.Sum(nil)}, {mid, tail.Sum(nil)}} {
		r, err := d.Reader(ctx, p, c.off)
		if err != nil {
			t.Fatalf("Reader(%d): %v", c.off, err)
		}
		h := sha256.New()
		var n int64
		chunk := make([]byte, 100003)
		for {
			k, err := r.Read(chunk)
			h.Write(chunk[:k])
			n += int64(k)
			if err == io.EOF {
				break
			}
			if err != nil {
				t.Fatalf("Read at %d: %v", c.off+n, err)
			}
		}
		r.Close()
		if n != size-c.off || !bytes.Equal(h.Sum(nil), c.want) {
			t.Fatalf("Reader(%d): read %d bytes with sha256 %x, want %d bytes with %x", c.off, n, h.Sum(nil), size-c.off, c.want)
		}
	}
}

// tree is a set of files whose paths sort differently per segment than as
// whole strings: '-' and '.' sort before '/'.
var tree = []string{"/a-b", "/a.c", "/a/x", "/a/y/z", "/b", "/c/d/e"}

func putTree(t *testing.T, d driver.Driver, base string) {
	t.Helper()
	for _, p := range tree {
		put(t, d, base+p, []byte(p))
	}
}

func testList(t *testing.T, d driver.Driver, base string) {
	ctx := context.Background()
	putTree(t, d, base)
	for dir, want := range map[string][]string{
		base:          {"/a", "/a-b", "/a.c", "/b", "/c"},
		base + "/a":   {"/a/x", "/a/y"},
		base + "/c/d": {"/c/d/e"},
	} {
		got, err := d.List(ctx, dir)
		if err != nil {
			t.Errorf("List(%s): %v", dir, err)
			continue
		}
		for i := range want {
			want[i] = base + want[i]
		}
		if !slices.Equal(got, want) {
			t.Errorf("List(%s) = %q, want %q", dir, got, want)
		}
	}
	if got, err := d.List(ctx, "/"); err != nil || !slices.Contains(got, base) {
		t.Errorf("List(/) = %q, %v; want it to contain %s", got, err, base)
	}
	for _, missing := range []string{base + "/missing", base + "/a-", base + "/b", base + "/b/c"} {
		_, err := d.List(ctx, missing)
		wantNotFound(t, d, err, missing)
	}
}

func testWalkOrder(t *testing.T, d driver.Driver, base string) {
	ctx := context.Background()
	putTree(t, d, base)
	var got []driver.FileInfo
	if err := d.Walk(ctx, base, func(fi driver.FileInfo) error {
		got = append(got, fi)
		return nil
	}); err != nil {
		t.Fatalf("Walk: %v", err)
	}
	want := []string{"/a-b", "/a.c", "/a", "/a/x", "/a/y", "/a/y/z", "/b", "/c", "/c/d", "/c/d/e"}
	if len(got) != len(want) {
		t.Fatalf("Walk visited %q, want %q under %s", infoPaths(got), want, base)
	}
	for i, fi := range got {
		rel := strings.TrimPrefix(fi.Path, base)
		isDir := !slices.Contains(tree, rel)
		if rel != want[i] || fi.IsDir != isDir || (!isDir && fi.Size != int64(len(rel))) {
			t.Fatalf("Walk entry %d = %+v, want %s%s (directory %v)", i, fi, base, want[i], isDir)
		}
	}
	if got := walkPaths(t, d, base+"/a"); !slices.Equal(got, []string{base + "/a/x", base + "/a/y", base + "/a/y/z"}) {
		t.Errorf("Walk(%s/a) = %q", base, got)
	}
	for _, missing := range []string{base + "/missing", base + "/b"} {
		wantNotFound(t, d, d.Walk(ctx, missing, func(driver.FileInfo) error { return nil }), missing)
	}
}

func testWalkSkipDir(t *testing.T, d driver.Driver, base string) {
	ctx := context.Background()
	putTree(t, d, base)
	for _, c := range []struct {
		skip string
		want []string
	}{
		{"/a", []string{"/a-b", "/a.c", "/a", "/b", "/c", "/c/d", "/c/d/e"}},
		{"/c/d", []string{"/a-b", "/a.c", "/a", "/a/x", "/a/y", "/a/y/z", "/b", "/c", "/c/d"}},
		// A file's ErrSkipDir skips the rest of its directory.
		{"/a/x", []string{"/a-b", "/a.c", "/a", "/a/x", "/b", "/c", "/c/d", "/c/d/e"}},
		{"/a.c", []string{"/a-b", "/a.c"}},
	} {
		var got []string
		err := d.Walk(ctx, base, func(fi driver.FileInfo) error {
			rel := strings.TrimPrefix(fi.Path, base)
			got = append(got, rel)
			if rel == c.skip {
				return driver.ErrSkipDir
			}
			return nil
		})
		if err != nil {
			t.Errorf("Walk skipping %s: %v", c.skip, err)
		}
		if !slices.Equal(got, c.want) {
			t.Errorf("Walk skipping %s visited %q, want %q", c.skip, got, c.want)
		}
	}
}

func testWalkStop(t *testing.T, d driver.Driver, base string) {
	ctx := context.Background()
	putTree(t, d, base)
	stop := errors.New("stop here")
	var got []string
	err := d.Walk(ctx, base, func(fi driver.FileInfo) error {
		got = append(got, strings.TrimPrefix(fi.Path, base))
		if fi.Path == base+"/a/x" {
			return stop
		}
		return nil
	})
	if !errors.Is(err, stop) {
		t.Errorf("Walk returned %v, want the callback's error", err)
	}
	if want := []string{"/a-b", "/a.c", "/a", "/a/x"}; !slices.Equal(got, want) {
		t.Errorf("Walk visited %q before stopping, want %q", got, want)
	}
	ctx2, cancel := context.WithCancel(ctx)
	n := 0
	err = d.Walk(ctx2, base, func(driver.FileInfo) error {
		n++
		cancel()
		return nil
	})
	if !errors.Is(err, context.Canceled) || n != 1 {
		t.Errorf("Walk with a cancelled context: %d calls, error %v; want 1 call and context.Canceled", n, err)
	}
}

func testMove(t *testing.T, d driver.Driver, base string) {
	ctx := context.Background()
	src, dst := base+"/_uploads/u1/data", base+"/blobs/sha256/ab/abcd/data"
	content := randomBytes(4, 10000)
	put(t, d, src, content)
	if err := d.Move(ctx, src, dst); err != nil {
		t.Fatalf("Move: %v", err)
	}
	if got := get(t, d, dst); !bytes.Equal(got, content) {
		t.Fatalf("moved content: got %d bytes, want %d", len(got), len(content))
	}
	_, err := d.GetContent(ctx, src)
	wantNotFound(t, d, err, src)
}

func testMoveOverwrite(t *testing.T, d driver.Driver, base string) {
	ctx := context.Background()
	src, dst := base+"/src", base+"/dir/dst"
	put(t, d, src, []byte("new content"))
	put(t, d, dst, []byte("old content that is longer"))
	if err := d.Move(ctx, src, dst); err != nil {
		t.Fatalf("Move: %v", err)
	}
	if got := get(t, d, dst); string(got) != "new content" {
		t.Fatalf("GetContent(dst) = %q, want %q", got, "new content")
	}
	_, err := d.Stat(ctx, src)
	wantNotFound(t, d, err, src)
}

func testMoveMissingSource(t *testing.T, d driver.Driver, base string) {
	ctx := context.Background()
	dst := base + "/dst"
	put(t, d, dst, []byte("keep"))
	wantNotFound(t, d, d.Move(ctx, base+"/missing", dst), base+"/missing")
	if got := get(t, d, dst); string(got) != "keep" {
		t.Fatalf("GetContent(dst) = %q after a failed Move, want %q", got, "keep")
	}
	// A failed Move creates nothing at its destination.
	wantNotFound(t, d, d.Move(ctx, base+"/missing", base+"/new/dir/dst"), base+"/missing")
	_, err := d.Stat(ctx, base+"/new")
	wantNotFound(t, d, err, base+"/new")
}

func testDelete(t *testing.T, d driver.Driver, base string) {
	ctx := context.Background()
	files := []string{"/d/x", "/d/sub/y", "/d/sub/deeper/z", "/d-sibling", "/dx", "/d2/w"}
	for _, p := range files {
		put(t, d, base+p, []byte(p))
	}
	if err := d.Delete(ctx, base+"/d"); err != nil {
		t.Fatalf("Delete(dir): %v", err)
	}
	for _, p := range []string{"/d", "/d/x", "/d/sub", "/d/sub/deeper/z"} {
		_, err := d.Stat(ctx, base+p)
		wantNotFound(t, d, err, base+p)
	}
	// Paths that merely start with the deleted one's name stay.
	if got := walkPaths(t, d, base); !slices.Equal(got, []string{base + "/d-sibling", base + "/d2", base + "/d2/w", base + "/dx"}) {
		t.Fatalf("after Delete(%s/d) Walk = %q", base, got)
	}
	if err := d.Delete(ctx, base+"/dx"); err != nil {
		t.Fatalf("Delete(file): %v", err)
	}
	_, err := d.Stat(ctx, base+"/dx")
	wantNotFound(t, d, err, base+"/dx")
	wantNotFound(t, d, d.Delete(ctx, base+"/missing"), base+"/missing")
	wantNotFound(t, d, d.Delete(ctx, base+"/d"), base+"/d")
}

func testConcurrentWriters(t *testing.T, d driver.Driver, base string) {
	ctx := context.Background()
	const writers = 16
	var wg sync.WaitGroup
	for i := range writers {
		wg.Go(func() {
			p := fmt.Sprintf("%s/w%02d/data", base, i)
			w, err := d.Writer(ctx, p, false)
			if err != nil {
				t.Errorf("Writer(%s): %v", p, err)
				return
			}
			content := randomBytes(uint64(100+i), 300000+i)
			for rest := content; len(rest) > 0; {
				n := min(len(rest), 4096+i*13)
				if _, err := w.Write(rest[:n]); err != nil {
					t.Errorf("Write(%s): %v", p, err)
					_ = w.Cancel(ctx)
					return
				}
				rest = rest[n:]
			}
			if err := w.Commit(ctx); err != nil {
				t.Errorf("Commit(%s): %v", p, err)
			}
		})
	}
	wg.Wait()
	for i := range writers {
		p := fmt.Sprintf("%s/w%02d/data", base, i)
		if got := get(t, d, p); !bytes.Equal(got, randomBytes(uint64(100+i), 300000+i)) {
			t.Errorf("%s: got %d bytes, not what its writer wrote", p, len(got))
		}
	}
}

// testConcurrentPutContent has writers replace one file while readers check
// that they always see one complete version.
func testConcurrentPutContent(t *testing.T, d driver.Driver, base string) {
	ctx := context.Background()
	const (
		writers = 8
		rounds  = 20
		size    = 128 << 10
	)
	p := base + "/link"
	put(t, d, p, bytes.Repeat([]byte{0xff}, size))
	var (
		writing sync.WaitGroup
		reading sync.WaitGroup
		done    = make(chan struct{})
	)
	check := func(b []byte, how string) {
		if len(b) != size || bytes.Count(b, b[:1]) != size {
			t.Errorf("%s saw a torn file: %d bytes, first %#x", how, len(b), b[:min(len(b), 1)])
		}
	}
	for range 2 {
		reading.Go(func() {
			for {
				select {
				case <-done:
					return
				default:
				}
				b, err := d.GetContent(ctx, p)
				if err != nil {
					t.Errorf("GetContent during writes: %v", err)
					return
				}
				check(b, "GetContent")
				r, err := d.Reader(ctx, p, 0)
				if err != nil {
					t.Errorf("Reader during writes: %v", err)
					return
				}
				b, err = io.ReadAll(r)
				r.Close()
				if err != nil {
					t.Errorf("reading during writes: %v", err)
					return
				}
				check(b, "Reader")
			}
		})
	}
	for i := range writers {
		writing.Go(func() {
			for j := range rounds {
				if err := d.PutContent(ctx, p, bytes.Repeat([]byte{byte(i*rounds + j)}, size)); err != nil {
					t.Errorf("PutContent: %v", err)
					return
				}
			}
		})
	}
	writing.Wait()
	close(done)
	reading.Wait()
	check(get(t, d, p), "final GetContent")
}
