package driver

import (
	"context"
	"io"
	"sync/atomic"
)

// Kinds of calls Counting counts, as Counts names them.
const (
	countGet = iota
	countReader
	countReadRange
	countPut
	countWriter
	countMove
	countStat
	countList
	countWalk
	countWalkEntries
	countDelete
	countDeleteFiles
	countDeleteFilesPaths
	nCountKinds
)

var countNames = [nCountKinds]string{"get", "reader", "read_range", "put", "writer", "move", "stat", "list",
	"walk", "walk_entries", "delete", "delete_files", "delete_files_paths"}

// Counting wraps a driver and counts the calls made through it, for the
// reports of long runs (GC, scrub): on an object store, requests are what an
// operator pays and plans by. It is safe for concurrent use.
type Counting struct {
	Driver
	n [nCountKinds]atomic.Int64
}

// NewCounting returns d wrapped in a Counting.
func NewCounting(d Driver) *Counting { return &Counting{Driver: d} }

// Unwrap returns the wrapped driver (see As).
func (c *Counting) Unwrap() Driver { return c.Driver }

// Counts returns the calls made so far by kind ("get", "reader",
// "read_range", "put", "writer", "move", "stat", "list", "walk",
// "walk_entries" (entries a walk visited), "delete", "delete_files",
// "delete_files_paths" (paths handed to DeleteFiles)); kinds never called
// are absent.
func (c *Counting) Counts() map[string]int64 {
	m := make(map[string]int64)
	for i := range c.n {
		if v := c.n[i].Load(); v != 0 {
			m[countNames[i]] = v
		}
	}
	return m
}

// GetContent implements Driver.
func (c *Counting) GetContent(ctx context.Context, p string) ([]byte, error) {
	c.n[countGet].Add(1)
	return c.Driver.GetContent(ctx, p)
}

// Reader implements Driver.
func (c *Counting) Reader(ctx context.Context, p string, off int64) (io.ReadCloser, error) {
	c.n[countReader].Add(1)
	return c.Driver.Reader(ctx, p, off)
}

// ReadRange implements Driver.
func (c *Counting) ReadRange(ctx context.Context, p string, off, n int64) (io.ReadCloser, error) {
	c.n[countReadRange].Add(1)
	return c.Driver.ReadRange(ctx, p, off, n)
}

// PutContent implements Driver.
func (c *Counting) PutContent(ctx context.Context, p string, b []byte) error {
	c.n[countPut].Add(1)
	return c.Driver.PutContent(ctx, p, b)
}

// Writer implements Driver.
func (c *Counting) Writer(ctx context.Context, p string, app bool) (FileWriter, error) {
	c.n[countWriter].Add(1)
	return c.Driver.Writer(ctx, p, app)
}

// Move implements Driver.
func (c *Counting) Move(ctx context.Context, src, dst string) error {
	c.n[countMove].Add(1)
	return c.Driver.Move(ctx, src, dst)
}

// Stat implements Driver.
func (c *Counting) Stat(ctx context.Context, p string) (FileInfo, error) {
	c.n[countStat].Add(1)
	return c.Driver.Stat(ctx, p)
}

// StatFile implements FileStater, counted as a stat, so that StatFile (see
// As) does not go round the count to the wrapped driver.
func (c *Counting) StatFile(ctx context.Context, p string) (FileInfo, error) {
	c.n[countStat].Add(1)
	return StatFile(ctx, c.Driver, p)
}

// List implements Driver.
func (c *Counting) List(ctx context.Context, p string) ([]string, error) {
	c.n[countList].Add(1)
	return c.Driver.List(ctx, p)
}

// Walk implements Driver; each entry visited counts too.
func (c *Counting) Walk(ctx context.Context, p string, fn WalkFn) error {
	c.n[countWalk].Add(1)
	return c.Driver.Walk(ctx, p, func(fi FileInfo) error {
		c.n[countWalkEntries].Add(1)
		return fn(fi)
	})
}

// Delete implements Driver.
func (c *Counting) Delete(ctx context.Context, p string) error {
	c.n[countDelete].Add(1)
	return c.Driver.Delete(ctx, p)
}

// DeleteFiles implements Driver; the paths count too.
func (c *Counting) DeleteFiles(ctx context.Context, paths []string) (int, error) {
	c.n[countDeleteFiles].Add(1)
	c.n[countDeleteFilesPaths].Add(int64(len(paths)))
	return c.Driver.DeleteFiles(ctx, paths)
}
