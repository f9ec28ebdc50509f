// Package inmemory is a storage driver that keeps files in process memory,
// for tests. It follows the filesystem driver's semantics, including writers
// that write in place and can be appended to; nothing survives the process.
package inmemory

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"maps"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/cairn-registry/cairn/internal/storage/driver"
)

const driverName = "inmemory"

var (
	errIsDir  = errors.New("is a directory")
	errNotDir = errors.New("not a directory")
)

var _ driver.Driver = (*Driver)(nil)

// Driver keeps files in a map. Directories are implied by the files below
// them; "/" always exists.
type Driver struct {
	mu    sync.RWMutex
	files map[string]*file
	dirs  map[string]int // directory path -> number of files below it
}

// file is one stored file. data only ever grows in place (writers append) or
// is replaced, so a reader may keep a slice of it without holding mu.
type file struct {
	data    []byte
	modTime time.Time
}

// New returns an empty driver.
func New() *Driver {
	return &Driver{files: make(map[string]*file), dirs: make(map[string]int)}
}

// Name implements driver.Driver.
func (d *Driver) Name() string { return driverName }

// GetContent implements driver.Driver.
func (d *Driver) GetContent(_ context.Context, p string) ([]byte, error) {
	if !driver.ValidPath(p) {
		return nil, invalidPath(p)
	}
	d.mu.RLock()
	defer d.mu.RUnlock()
	f := d.files[p]
	if f == nil {
		return nil, notFound(p)
	}
	return append([]byte{}, f.data...), nil
}

// PutContent implements driver.Driver.
func (d *Driver) PutContent(_ context.Context, p string, content []byte) error {
	if err := driver.CheckFiles(driverName, p); err != nil {
		return err
	}
	f := &file{data: bytes.Clone(content), modTime: time.Now()}
	d.mu.Lock()
	defer d.mu.Unlock()
	if err := d.checkCreate(p); err != nil {
		return err
	}
	d.put(p, f)
	return nil
}

// Reader implements driver.Driver.
func (d *Driver) Reader(_ context.Context, p string, offset int64) (io.ReadCloser, error) {
	if !driver.ValidPath(p) {
		return nil, invalidPath(p)
	}
	data, ok := d.data(p)
	if !ok {
		return nil, notFound(p)
	}
	if offset < 0 || offset > int64(len(data)) {
		return nil, driver.InvalidOffsetError{Path: p, Offset: offset, Driver: driverName}
	}
	return io.NopCloser(bytes.NewReader(data[offset:])), nil
}

// data returns the content of the file at p (shared: not to be modified).
func (d *Driver) data(p string) ([]byte, bool) {
	d.mu.RLock()
	defer d.mu.RUnlock()
	f := d.files[p]
	if f == nil {
		return nil, false
	}
	return f.data, true
}

// ReadRange implements driver.Driver.
func (d *Driver) ReadRange(_ context.Context, p string, offset, length int64) (io.ReadCloser, error) {
	if !driver.ValidPath(p) {
		return nil, invalidPath(p)
	}
	end, err := driver.RangeEnd(driverName, p, offset, length)
	if err != nil {
		return nil, err
	}
	data, ok := d.data(p)
	if !ok {
		return nil, notFound(p)
	}
	if offset >= int64(len(data)) {
		return nil, driver.InvalidOffsetError{Path: p, Offset: offset, Driver: driverName}
	}
	return io.NopCloser(bytes.NewReader(data[offset:min(end, int64(len(data)))])), nil
}

// Writer implements driver.Driver. Like the filesystem driver it writes in
// place: what is written is visible at p before Commit.
func (d *Driver) Writer(_ context.Context, p string, append bool) (driver.FileWriter, error) {
	if err := driver.CheckFiles(driverName, p); err != nil {
		return nil, err
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	f := d.files[p]
	if append {
		if f == nil {
			return nil, notFound(p)
		}
	} else {
		if err := d.checkCreate(p); err != nil {
			return nil, err
		}
		f = &file{modTime: time.Now()}
		d.put(p, f)
	}
	return &writer{d: d, path: p, f: f, size: int64(len(f.data))}, nil
}

// Stat implements driver.Driver.
func (d *Driver) Stat(_ context.Context, p string) (driver.FileInfo, error) {
	if !driver.ValidPath(p) {
		return driver.FileInfo{}, invalidPath(p)
	}
	d.mu.RLock()
	defer d.mu.RUnlock()
	if f := d.files[p]; f != nil {
		return driver.FileInfo{Path: p, Size: int64(len(f.data)), ModTime: f.modTime}, nil
	}
	if d.isDir(p) {
		return driver.FileInfo{Path: p, IsDir: true}, nil
	}
	return driver.FileInfo{}, notFound(p)
}

// List implements driver.Driver.
func (d *Driver) List(_ context.Context, p string) ([]string, error) {
	if !driver.ValidPath(p) {
		return nil, invalidPath(p)
	}
	d.mu.RLock()
	defer d.mu.RUnlock()
	if !d.isDir(p) {
		return nil, notFound(p)
	}
	prefix := childPrefix(p)
	seen := make(map[string]struct{})
	for k := range d.files {
		if !strings.HasPrefix(k, prefix) {
			continue
		}
		if i := strings.IndexByte(k[len(prefix):], '/'); i >= 0 {
			k = k[:len(prefix)+i]
		}
		seen[k] = struct{}{}
	}
	out := slices.Sorted(maps.Keys(seen))
	return out, nil
}

// Move implements driver.Driver for files; moving a directory is an error.
func (d *Driver) Move(_ context.Context, src, dst string) error {
	if err := driver.CheckFiles(driverName, src, dst); err != nil {
		return err
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	f := d.files[src]
	if f == nil {
		if d.isDir(src) {
			return fmt.Errorf("%s: move %s: %w", driverName, src, errIsDir)
		}
		return notFound(src)
	}
	if src == dst {
		return nil
	}
	if err := d.checkCreate(dst); err != nil {
		return err
	}
	d.remove(src)
	d.put(dst, f)
	return nil
}

// Delete implements driver.Driver.
func (d *Driver) Delete(_ context.Context, p string) error {
	if !driver.ValidPath(p) {
		return invalidPath(p)
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.remove(p) {
		return nil
	}
	if !d.isDir(p) {
		return notFound(p)
	}
	prefix := childPrefix(p)
	for k := range d.files {
		if strings.HasPrefix(k, prefix) {
			d.remove(k)
		}
	}
	return nil
}

// Walk implements driver.Driver on a snapshot taken when it starts, so fn
// may call the driver. The order is the flat listing's: files in lexical
// order of their paths, each directory just before its first entry.
func (d *Driver) Walk(ctx context.Context, p string, fn driver.WalkFn) error {
	if !driver.ValidPath(p) {
		return invalidPath(p)
	}
	prefix := childPrefix(p)
	d.mu.RLock()
	if !d.isDir(p) {
		d.mu.RUnlock()
		return notFound(p)
	}
	var files []driver.FileInfo
	for k, f := range d.files {
		if strings.HasPrefix(k, prefix) {
			files = append(files, driver.FileInfo{Path: k, Size: int64(len(f.data)), ModTime: f.modTime})
		}
	}
	d.mu.RUnlock()
	slices.SortFunc(files, func(a, b driver.FileInfo) int { return strings.Compare(a.Path, b.Path) })

	// last is the path of the deepest entry handled so far; with files in
	// sorted order, a directory has been visited iff it is last's ancestor.
	// skip is the prefix of entries to pass over after an ErrSkipDir.
	last, skip := "", ""
files:
	for _, fi := range files {
		if err := ctx.Err(); err != nil {
			return err
		}
		if skip != "" && strings.HasPrefix(fi.Path, skip) {
			continue
		}
		skip = ""
		for i := len(prefix); i < len(fi.Path); i++ {
			if fi.Path[i] != '/' {
				continue
			}
			dir := fi.Path[:i]
			if strings.HasPrefix(last, dir) && len(last) > len(dir) && last[len(dir)] == '/' {
				continue
			}
			last = fi.Path[:i+1]
			err := fn(driver.FileInfo{Path: dir, IsDir: true})
			if errors.Is(err, driver.ErrSkipDir) {
				skip = last
				continue files
			}
			if err != nil {
				return err
			}
		}
		last = fi.Path
		err := fn(fi)
		if errors.Is(err, driver.ErrSkipDir) {
			// Skip the rest of the file's directory.
			dir := fi.Path[:strings.LastIndexByte(fi.Path, '/')+1]
			if dir == prefix {
				return nil
			}
			skip = dir
			continue
		}
		if err != nil {
			return err
		}
	}
	return nil
}

// DeleteFiles implements driver.Driver. A directory is a per-path error.
func (d *Driver) DeleteFiles(ctx context.Context, paths []string) (int, error) {
	var (
		deleted int
		errs    []error
	)
	for i, p := range paths {
		if err := ctx.Err(); err != nil {
			errs = append(errs, fmt.Errorf("%s: delete files: %d of %d paths not attempted: %w",
				driverName, len(paths)-i, len(paths), err))
			break
		}
		if !driver.ValidPath(p) {
			errs = append(errs, invalidPath(p))
			continue
		}
		d.mu.Lock()
		if d.isDir(p) {
			errs = append(errs, fmt.Errorf("%s: delete %s: %w", driverName, p, errIsDir))
		} else {
			// The caller may reuse p's bytes once we return (GC does);
			// remove may keep p as a map key.
			d.remove(strings.Clone(p))
			deleted++
		}
		d.mu.Unlock()
	}
	return deleted, errors.Join(errs...)
}

// isDir reports whether p is a directory. The caller holds mu.
func (d *Driver) isDir(p string) bool { return p == "/" || d.dirs[p] > 0 }

// checkCreate reports why a file cannot be created at p: p is a directory or
// one of its parents is a file. The caller holds mu.
func (d *Driver) checkCreate(p string) error {
	if d.isDir(p) {
		return fmt.Errorf("%s: %s: %w", driverName, p, errIsDir)
	}
	for i := strings.LastIndexByte(p, '/'); i > 0; i = strings.LastIndexByte(p[:i], '/') {
		if d.files[p[:i]] != nil {
			return fmt.Errorf("%s: %s: %w", driverName, p[:i], errNotDir)
		}
	}
	return nil
}

// put stores f at p, which checkCreate accepted. The caller holds mu.
func (d *Driver) put(p string, f *file) {
	if d.files[p] == nil {
		d.countParents(p, 1)
	}
	d.files[p] = f
}

// remove deletes the file at p and reports whether there was one. The caller
// holds mu.
func (d *Driver) remove(p string) bool {
	if d.files[p] == nil {
		return false
	}
	delete(d.files, p)
	d.countParents(p, -1)
	return true
}

func (d *Driver) countParents(p string, delta int) {
	for i := strings.LastIndexByte(p, '/'); i > 0; i = strings.LastIndexByte(p[:i], '/') {
		if n := d.dirs[p[:i]] + delta; n > 0 {
			d.dirs[p[:i]] = n
		} else {
			delete(d.dirs, p[:i])
		}
	}
}

// writer appends to one stored file under the driver's lock. It is used by
// one goroutine at a time.
type writer struct {
	d     *Driver
	path  string
	f     *file
	size  int64
	state string // "" while open, else "closed", "committed" or "cancelled"
}

func (w *writer) Write(p []byte) (int, error) {
	if w.state != "" {
		return 0, w.stateError()
	}
	w.d.mu.Lock()
	w.f.data = append(w.f.data, p...)
	w.f.modTime = time.Now()
	w.d.mu.Unlock()
	w.size += int64(len(p))
	return len(p), nil
}

func (w *writer) Size() int64 { return w.size }

// Close keeps what was written for a later appending writer. Closing again,
// or after Commit or Cancel, does nothing.
func (w *writer) Close() error {
	if w.state == "" {
		w.state = "closed"
	}
	return nil
}

func (w *writer) Commit(context.Context) error {
	if w.state != "" {
		return w.stateError()
	}
	w.state = "committed"
	return nil
}

// Cancel removes the file at the writer's path, on an open or closed writer.
func (w *writer) Cancel(context.Context) error {
	if w.state == "committed" || w.state == "cancelled" {
		return w.stateError()
	}
	w.state = "cancelled"
	w.d.mu.Lock()
	w.d.remove(w.path)
	w.d.mu.Unlock()
	return nil
}

func (w *writer) stateError() error {
	return fmt.Errorf("%s: writer for %s is %s", driverName, w.path, w.state)
}

// StageWriter implements driver.Stager: the bytes are kept aside and stored
// at Commit.
func (d *Driver) StageWriter(_ context.Context, p string) (driver.FileWriter, error) {
	if err := driver.CheckFiles(driverName, p); err != nil {
		return nil, err
	}
	return &stagedWriter{d: d, path: p}, nil
}

// stagedWriter is a StageWriter's writer.
type stagedWriter struct {
	d     *Driver
	path  string
	buf   []byte
	state driver.WriterState
}

func (w *stagedWriter) Write(p []byte) (int, error) {
	if w.state != driver.WriterOpen {
		return 0, fmt.Errorf("%s: staged writer for %s is %s", driverName, w.path, w.state)
	}
	w.buf = append(w.buf, p...)
	return len(p), nil
}

func (w *stagedWriter) Size() int64 { return int64(len(w.buf)) }

// Close drops what was staged, as Cancel.
func (w *stagedWriter) Close() error {
	if w.state == driver.WriterOpen {
		w.state, w.buf = driver.WriterCancelled, nil
	}
	return nil
}

func (w *stagedWriter) Commit(ctx context.Context) error {
	if w.state != driver.WriterOpen {
		return fmt.Errorf("%s: staged writer for %s is %s", driverName, w.path, w.state)
	}
	w.state = driver.WriterCommitted
	return w.d.PutContent(ctx, w.path, w.buf)
}

func (w *stagedWriter) Cancel(context.Context) error {
	if w.state == driver.WriterCommitted {
		return fmt.Errorf("%s: staged writer for %s is committed", driverName, w.path)
	}
	w.state, w.buf = driver.WriterCancelled, nil
	return nil
}

func childPrefix(p string) string {
	if p == "/" {
		return p
	}
	return p + "/"
}

func notFound(p string) error { return driver.PathNotFoundError{Path: p, Driver: driverName} }

func invalidPath(p string) error { return driver.InvalidPathError{Path: p, Driver: driverName} }
