package gc

import (
	"context"
	"io"
	"sync/atomic"

	"github.com/cairn-registry/cairn/internal/storage/driver"
)

// Kinds of driver calls a run counts.
const (
	reqGet = iota
	reqPut
	reqStat
	reqList
	reqWalk
	reqWalkEntries
	reqDelete
	reqDeleteFiles
	reqDeleteFilesPaths
	reqOther
	nReqKinds
)

var reqNames = [nReqKinds]string{"get", "put", "stat", "list", "walk", "walk_entries", "delete", "delete_files", "delete_files_paths", "other"}

// countingDriver counts the calls a run makes, for its report.
type countingDriver struct {
	driver.Driver
	n [nReqKinds]atomic.Int64
}

func newCountingDriver(d driver.Driver) *countingDriver { return &countingDriver{Driver: d} }

// Unwrap exposes the wrapped driver's optional interfaces (driver.As).
func (d *countingDriver) Unwrap() driver.Driver { return d.Driver }

func (d *countingDriver) counts() map[string]int64 {
	m := make(map[string]int64)
	for i := range d.n {
		if v := d.n[i].Load(); v != 0 {
			m[reqNames[i]] = v
		}
	}
	return m
}

func (d *countingDriver) GetContent(ctx context.Context, p string) ([]byte, error) {
	d.n[reqGet].Add(1)
	return d.Driver.GetContent(ctx, p)
}

func (d *countingDriver) PutContent(ctx context.Context, p string, b []byte) error {
	d.n[reqPut].Add(1)
	return d.Driver.PutContent(ctx, p, b)
}

func (d *countingDriver) Stat(ctx context.Context, p string) (driver.FileInfo, error) {
	d.n[reqStat].Add(1)
	return d.Driver.Stat(ctx, p)
}

func (d *countingDriver) List(ctx context.Context, p string) ([]string, error) {
	d.n[reqList].Add(1)
	return d.Driver.List(ctx, p)
}

func (d *countingDriver) Walk(ctx context.Context, p string, fn driver.WalkFn) error {
	d.n[reqWalk].Add(1)
	return d.Driver.Walk(ctx, p, func(fi driver.FileInfo) error {
		d.n[reqWalkEntries].Add(1)
		return fn(fi)
	})
}

func (d *countingDriver) Delete(ctx context.Context, p string) error {
	d.n[reqDelete].Add(1)
	return d.Driver.Delete(ctx, p)
}

func (d *countingDriver) DeleteFiles(ctx context.Context, paths []string) (int, error) {
	d.n[reqDeleteFiles].Add(1)
	d.n[reqDeleteFilesPaths].Add(int64(len(paths)))
	return d.Driver.DeleteFiles(ctx, paths)
}

func (d *countingDriver) Reader(ctx context.Context, p string, off int64) (io.ReadCloser, error) {
	d.n[reqOther].Add(1)
	return d.Driver.Reader(ctx, p, off)
}

func (d *countingDriver) Move(ctx context.Context, src, dst string) error {
	d.n[reqOther].Add(1)
	return d.Driver.Move(ctx, src, dst)
}

func (d *countingDriver) RedirectURL(ctx context.Context, method, p string) (string, error) {
	return d.Driver.RedirectURL(ctx, method, p)
}
