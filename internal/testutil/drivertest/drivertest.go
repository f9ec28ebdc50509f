// Package drivertest runs tests over the storage drivers that need no
// server, and looks at a store the way tests check it.
package drivertest

import (
	"context"
	"errors"
	"testing"

	"github.com/cairn-registry/cairn/internal/storage/driver"
	"github.com/cairn-registry/cairn/internal/storage/driver/filesystem"
	"github.com/cairn-registry/cairn/internal/storage/driver/inmemory"
)

// ForEach runs fn as a subtest over a fresh inmemory and a fresh
// filesystem driver.
func ForEach(t *testing.T, fn func(t *testing.T, d driver.Driver)) {
	t.Run("inmemory", func(t *testing.T) { fn(t, inmemory.New()) })
	t.Run("filesystem", func(t *testing.T) {
		d, err := filesystem.New(t.TempDir())
		if err != nil {
			t.Fatal(err)
		}
		fn(t, d)
	})
}

// Statter is the part of a driver Exists reads through.
type Statter interface {
	Stat(ctx context.Context, path string) (driver.FileInfo, error)
}

// Exists reports whether p is stored; a Stat failing otherwise than with
// not-found fails the test.
func Exists(t testing.TB, d Statter, p string) bool {
	t.Helper()
	_, err := d.Stat(context.Background(), p)
	if err != nil && !errors.Is(err, driver.ErrNotFound) {
		t.Fatal(err)
	}
	return err == nil
}
