package driver_test

import (
	"context"
	"errors"
	"io"
	"maps"
	"testing"

	"github.com/cairn-registry/cairn/internal/storage/driver"
	"github.com/cairn-registry/cairn/internal/storage/driver/inmemory"
)

func TestCounting(t *testing.T) {
	ctx := context.Background()
	c := driver.NewCounting(inmemory.New())
	if err := c.PutContent(ctx, "/a/b", []byte("hello")); err != nil {
		t.Fatal(err)
	}
	for range 2 {
		rc, err := c.ReadRange(ctx, "/a/b", 1, 3)
		if err != nil {
			t.Fatal(err)
		}
		if b, err := io.ReadAll(rc); err != nil || string(b) != "ell" {
			t.Fatalf("ReadRange read %q, %v; want %q", b, err, "ell")
		}
		rc.Close()
	}
	rc, err := c.Reader(ctx, "/a/b", 0)
	if err != nil {
		t.Fatal(err)
	}
	rc.Close()
	if _, err := c.DeleteFiles(ctx, []string{"/a/b", "/a/c"}); err != nil {
		t.Fatal(err)
	}
	want := map[string]int64{"put": 1, "read_range": 2, "reader": 1, "delete_files": 1, "delete_files_paths": 2}
	if got := c.Counts(); !maps.Equal(got, want) {
		t.Errorf("Counts() = %v, want %v", got, want)
	}
}

// fileStater is a driver with a StatFile of its own, which records that it
// was asked.
type fileStater struct {
	driver.Driver
	calls int
}

func (f *fileStater) StatFile(ctx context.Context, p string) (driver.FileInfo, error) {
	f.calls++
	return f.Driver.Stat(ctx, p)
}

// TestCountingStatFile: StatFile through Counting is counted as a stat and
// still reaches the wrapped driver's own StatFile.
func TestCountingStatFile(t *testing.T) {
	ctx := context.Background()
	inner := &fileStater{Driver: inmemory.New()}
	c := driver.NewCounting(inner)
	if err := c.PutContent(ctx, "/a/b", []byte("hello")); err != nil {
		t.Fatal(err)
	}
	if fi, err := driver.StatFile(ctx, c, "/a/b"); err != nil || fi.Size != 5 {
		t.Fatalf("StatFile = %+v, %v; want a 5-byte file", fi, err)
	}
	if inner.calls != 1 {
		t.Errorf("the wrapped driver's StatFile ran %d times, want 1", inner.calls)
	}
	want := map[string]int64{"put": 1, "stat": 1}
	if got := c.Counts(); !maps.Equal(got, want) {
		t.Errorf("Counts() = %v, want %v", got, want)
	}
}

// TestStatFileFallback: without a FileStater, StatFile is Stat with a
// directory taken for a missing file.
func TestStatFileFallback(t *testing.T) {
	ctx := context.Background()
	d := driver.NewCounting(inmemory.New())
	if err := d.PutContent(ctx, "/a/b", []byte("hello")); err != nil {
		t.Fatal(err)
	}
	if fi, err := driver.StatFile(ctx, d, "/a/b"); err != nil || fi.Size != 5 || fi.IsDir {
		t.Fatalf("StatFile(file) = %+v, %v; want a 5-byte file", fi, err)
	}
	for _, p := range []string{"/a", "/", "/a/c"} {
		_, err := driver.StatFile(ctx, d, p)
		var pe driver.PathNotFoundError
		if !errors.As(err, &pe) || pe.Path != p || pe.Driver != "inmemory" {
			t.Errorf("StatFile(%s) = %v, want a PathNotFoundError for it", p, err)
		}
	}
	if got := d.Counts()["stat"]; got != 4 {
		t.Errorf("counted %d stats, want 4", got)
	}
}
