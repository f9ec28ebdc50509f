package retention

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"sync"
	"time"

	"github.com/cairn-registry/cairn/internal/storage/driver"
)

// ErrPreviewWrite is what a Preview answers every write: a dry run writes
// nothing.
var ErrPreviewWrite = errors.New("retention: a dry run writes nothing")

// Preview is a view of a driver for dry runs: a delete is recorded, never
// applied, and hides what it deleted from every later read and listing
// through the view; a write is refused (ErrPreviewWrite). A dry run of
// retention over a Preview evicts as the real run would (see Options.DryRun),
// so that the GC dry run that follows, reading the same Preview, marks and
// counts what the real run would find after retention: the manifests and
// blobs that only the deleted tags and manifests kept.
//
// It deliberately has no Unwrap: nothing may reach the driver underneath
// for a write (driver.As would find the filesystem's InPlaceAppender).
type Preview struct {
	d    driver.Driver
	mu   sync.RWMutex
	gone map[string]struct{} // deleted paths (files or whole directories)
}

var (
	_ driver.Driver      = (*Preview)(nil)
	_ driver.TempSweeper = (*Preview)(nil)
)

// NewPreview returns a Preview of d with nothing deleted yet.
func NewPreview(d driver.Driver) *Preview {
	return &Preview{d: d, gone: make(map[string]struct{})}
}

// hidden reports whether p, or a directory above it, was deleted.
func (p *Preview) hidden(path string) bool {
	p.mu.RLock()
	defer p.mu.RUnlock()
	if len(p.gone) == 0 {
		return false
	}
	for q := path; q != "" && q != "/"; {
		if _, ok := p.gone[q]; ok {
			return true
		}
		i := strings.LastIndexByte(q, '/')
		if i < 0 {
			break
		}
		q = q[:i]
	}
	return false
}

func (p *Preview) notFound(path string) error {
	return driver.PathNotFoundError{Path: path, Driver: p.d.Name()}
}

// Name implements driver.Driver.
func (p *Preview) Name() string { return p.d.Name() }

// GetContent implements driver.Driver.
func (p *Preview) GetContent(ctx context.Context, path string) ([]byte, error) {
	if p.hidden(path) {
		return nil, p.notFound(path)
	}
	return p.d.GetContent(ctx, path)
}

// PutContent refuses: a dry run writes nothing.
func (p *Preview) PutContent(context.Context, string, []byte) error { return ErrPreviewWrite }

// Reader implements driver.Driver.
func (p *Preview) Reader(ctx context.Context, path string, offset int64) (io.ReadCloser, error) {
	if p.hidden(path) {
		return nil, p.notFound(path)
	}
	return p.d.Reader(ctx, path, offset)
}

// ReadRange implements driver.Driver.
func (p *Preview) ReadRange(ctx context.Context, path string, offset, length int64) (io.ReadCloser, error) {
	if p.hidden(path) {
		return nil, p.notFound(path)
	}
	return p.d.ReadRange(ctx, path, offset, length)
}

// Writer refuses: a dry run writes nothing.
func (p *Preview) Writer(context.Context, string, bool) (driver.FileWriter, error) {
	return nil, ErrPreviewWrite
}

// Stat implements driver.Driver.
func (p *Preview) Stat(ctx context.Context, path string) (driver.FileInfo, error) {
	if p.hidden(path) {
		return driver.FileInfo{}, p.notFound(path)
	}
	return p.d.Stat(ctx, path)
}

// List implements driver.Driver, without what was deleted.
func (p *Preview) List(ctx context.Context, path string) ([]string, error) {
	if p.hidden(path) {
		return nil, p.notFound(path)
	}
	names, err := p.d.List(ctx, path)
	if err != nil {
		return nil, err
	}
	out := names[:0]
	for _, n := range names {
		if !p.hidden(n) {
			out = append(out, n)
		}
	}
	return out, nil
}

// Move refuses: a dry run writes nothing.
func (p *Preview) Move(context.Context, string, string) error { return ErrPreviewWrite }

// Delete records path as deleted; like a driver's, it fails with a
// PathNotFoundError when there is nothing at path.
func (p *Preview) Delete(ctx context.Context, path string) error {
	if p.hidden(path) {
		return p.notFound(path)
	}
	if _, err := p.d.Stat(ctx, path); err != nil {
		return err
	}
	p.mu.Lock()
	p.gone[path] = struct{}{}
	p.mu.Unlock()
	return nil
}

// Walk implements driver.Driver, without what was deleted.
func (p *Preview) Walk(ctx context.Context, path string, fn driver.WalkFn) error {
	if p.hidden(path) {
		return p.notFound(path)
	}
	return p.d.Walk(ctx, path, func(fi driver.FileInfo) error {
		if p.hidden(fi.Path) {
			if fi.IsDir {
				return driver.ErrSkipDir
			}
			return nil
		}
		return fn(fi)
	})
}

// DeleteFiles records the paths as deleted.
func (p *Preview) DeleteFiles(_ context.Context, paths []string) (int, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, path := range paths {
		p.gone[path] = struct{}{}
	}
	return len(paths), nil
}

// SweepTemp counts, never deletes, the driver's leftovers (when it has
// any: driver.TempSweeper).
func (p *Preview) SweepTemp(ctx context.Context, path string, olderThan time.Time, _ bool) (int, error) {
	ts, ok := driver.As[driver.TempSweeper](p.d)
	if !ok {
		return 0, nil
	}
	n, err := ts.SweepTemp(ctx, path, olderThan, true)
	if err != nil {
		return n, fmt.Errorf("preview: %w", err)
	}
	return n, nil
}
