package driver_test

import (
	"context"
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
