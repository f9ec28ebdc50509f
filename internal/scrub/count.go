package scrub

import (
	"context"
	"io"
	"strings"
	"sync/atomic"

	"github.com/cairn-registry/cairn/internal/storage/driver"
)

// Kinds of driver calls a run counts, for its report: the request cost of
// a scrub on an object store is what an operator plans by.
const (
	reqGet = iota
	reqReader
	reqPut
	reqWriter
	reqMove
	reqStat
	reqList
	reqWalk
	reqWalkEntries
	reqDelete
	nReqKinds
)

var reqNames = [nReqKinds]string{"get", "reader", "put", "writer", "move", "stat", "list", "walk", "walk_entries", "delete"}

// countingDriver counts the calls made through it.
type countingDriver struct {
	driver.Driver
	n [nReqKinds]atomic.Int64
}

func newCountingDriver(d driver.Driver) *countingDriver { return &countingDriver{Driver: d} }

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

func (d *countingDriver) Reader(ctx context.Context, p string, off int64) (io.ReadCloser, error) {
	d.n[reqReader].Add(1)
	return d.Driver.Reader(ctx, p, off)
}

func (d *countingDriver) PutContent(ctx context.Context, p string, b []byte) error {
	d.n[reqPut].Add(1)
	return d.Driver.PutContent(ctx, p, b)
}

func (d *countingDriver) Writer(ctx context.Context, p string, app bool) (driver.FileWriter, error) {
	d.n[reqWriter].Add(1)
	return d.Driver.Writer(ctx, p, app)
}

func (d *countingDriver) Move(ctx context.Context, src, dst string) error {
	d.n[reqMove].Add(1)
	return d.Driver.Move(ctx, src, dst)
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

// Delete and DeleteFiles are counted together: scrub deletes only its own
// temporary files (a failed write's), and the count shows it.
func (d *countingDriver) Delete(ctx context.Context, p string) error {
	d.n[reqDelete].Add(1)
	return d.Driver.Delete(ctx, p)
}

func (d *countingDriver) DeleteFiles(ctx context.Context, paths []string) (int, error) {
	d.n[reqDelete].Add(1)
	return d.Driver.DeleteFiles(ctx, paths)
}

func oneLine(s string) string { return strings.Join(strings.Fields(s), " ") }
