// Package filesystem is cairn's local-disk storage driver: driver paths map to
// files under one root directory. It is the default backend of `cairn serve`
// and reads a distribution registry's directory as it is.
package filesystem

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/cairn-registry/cairn/internal/parallel"
	"github.com/cairn-registry/cairn/internal/storage/driver"
)

const (
	driverName = "filesystem"
	// Permissions before the umask, as distribution creates them.
	dirPerm  = 0o777
	filePerm = 0o666
	// mkdirAttempts bounds how often an operation recreates parent
	// directories that a concurrent DeleteFiles (in this process or another,
	// such as `cairn gc`) pruned while they were empty, between our MkdirAll
	// and our create. Each extra round needs yet another pruner to hit that
	// window, so the bound is never reached in practice; it only rules out
	// livelock.
	mkdirAttempts = 16
	// tempSep starts the suffix of PutContent's temporary files. It is not a
	// valid path byte, so List and Walk never show a temporary file.
	tempSep = "~"
	// deleteWorkers is how many files DeleteFiles removes at once. Unlink and
	// rmdir wait on the disk's journal (on NFS, on the server); on an ext4
	// volume eight in flight deleted about five times faster than one.
	deleteWorkers = 8
)

var (
	_ driver.Driver          = (*Driver)(nil)
	_ driver.TempSweeper     = (*Driver)(nil)
	_ driver.InPlaceAppender = (*Driver)(nil)
)

// Driver stores files under a root directory. Its zero value is not usable;
// call New.
type Driver struct {
	// root is the absolute root without a trailing separator ("" for "/"),
	// so that root+path is the file's name on disk.
	root string
	// epoch is the machine's boot id ("" where unknown).
	epoch string
}

// New returns a driver rooted at rootDir, creating the directory if needed.
func New(rootDir string) (*Driver, error) {
	if rootDir == "" {
		return nil, errors.New("filesystem: empty root directory")
	}
	abs, err := filepath.Abs(rootDir)
	if err != nil {
		return nil, fmt.Errorf("filesystem: root %q: %w", rootDir, err)
	}
	if err := os.MkdirAll(abs, dirPerm); err != nil {
		return nil, fmt.Errorf("filesystem: root: %w", err)
	}
	return &Driver{root: strings.TrimSuffix(abs, string(filepath.Separator)), epoch: bootID()}, nil
}

// Name implements driver.Driver.
func (d *Driver) Name() string { return driverName }

// fullPath maps a valid driver path to its name on disk. The result has the
// same length as root+p, which prune relies on.
func (d *Driver) fullPath(p string) string {
	if p == "/" {
		if d.root == "" {
			return string(filepath.Separator)
		}
		return d.root
	}
	return d.root + filepath.FromSlash(p)
}

// GetContent implements driver.Driver.
func (d *Driver) GetContent(_ context.Context, p string) ([]byte, error) {
	if !driver.ValidPath(p) {
		return nil, invalidPath(p)
	}
	b, err := os.ReadFile(d.fullPath(p))
	if err != nil {
		if notExist(err) || errors.Is(err, syscall.EISDIR) {
			return nil, notFound(p)
		}
		return nil, wrap(err)
	}
	return b, nil
}

// PutContent implements driver.Driver: the content goes to a temporary file in
// the target's directory, is synced, and renamed over the target. A Delete
// of the directory running at the same time (a manifest DELETE racing a
// tag PUT) removes the temporary file with it; the write then starts over,
// as a PUT that came after the DELETE would.
func (d *Driver) PutContent(_ context.Context, p string, content []byte) error {
	return d.put(p, content, true)
}

// PutCached implements driver.InPlaceAppender: PutContent without the
// sync. On ext4 (data=ordered) an fsync commits the journal, which first
// writes out the data of every file whose blocks it allocates: a chunk's
// unsynced megabytes, for the sake of a head of 200 bytes.
func (d *Driver) PutCached(_ context.Context, p string, content []byte) error {
	return d.put(p, content, false)
}

func (d *Driver) put(p string, content []byte, sync bool) error {
	if err := driver.CheckFiles(driverName, p); err != nil {
		return err
	}
	full := d.fullPath(p)
	var err error
	for range mkdirAttempts {
		if err = putFile(full, content, sync); !notExist(err) {
			break
		}
	}
	return err
}

// putFile writes content to a temporary file next to full, synced unless
// told not to, and renames it over full.
func putFile(full string, content []byte, sync bool) error {
	var f *os.File
	err := inDir(filepath.Dir(full), func() (err error) {
		f, err = createTemp(full)
		return err
	})
	if err != nil {
		return wrap(err)
	}
	_, err = f.Write(content)
	if err == nil && sync {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		// The temporary file keeps the directory non-empty, so no pruner
		// can remove it before this rename (a recursive Delete can).
		err = os.Rename(f.Name(), full)
	}
	if err != nil {
		_ = os.Remove(f.Name())
		return wrap(err)
	}
	return nil
}

// createTemp creates a new file next to full whose name no driver path has.
func createTemp(full string) (*os.File, error) {
	for range 10 {
		name := full + tempSep + strconv.FormatUint(rand.Uint64(), 36)
		f, err := os.OpenFile(name, os.O_RDWR|os.O_CREATE|os.O_EXCL, filePerm)
		if errors.Is(err, fs.ErrExist) {
			continue
		}
		return f, err
	}
	return nil, fmt.Errorf("no unused temporary name next to %s", full)
}

// Reader implements driver.Driver. The reader is the *os.File itself, so
// net/http can serve it with sendfile.
func (d *Driver) Reader(_ context.Context, p string, offset int64) (io.ReadCloser, error) {
	if !driver.ValidPath(p) {
		return nil, invalidPath(p)
	}
	f, fi, err := d.openFile(p)
	if err != nil {
		return nil, err
	}
	if offset < 0 || offset > fi.Size() {
		f.Close()
		return nil, driver.InvalidOffsetError{Path: p, Offset: offset, Driver: driverName}
	}
	if offset > 0 {
		if _, err := f.Seek(offset, io.SeekStart); err != nil {
			f.Close()
			return nil, wrap(err)
		}
	}
	return f, nil
}

// openFile opens the regular file at p for reading; a directory is not
// found.
func (d *Driver) openFile(p string) (*os.File, os.FileInfo, error) {
	f, err := os.Open(d.fullPath(p))
	if err != nil {
		if notExist(err) {
			return nil, nil, notFound(p)
		}
		return nil, nil, wrap(err)
	}
	fi, err := f.Stat()
	if err != nil {
		f.Close()
		return nil, nil, wrap(err)
	}
	if fi.IsDir() {
		f.Close()
		return nil, nil, notFound(p)
	}
	return f, fi, nil
}

// ReadRange implements driver.Driver with positioned reads (pread) on a file
// of its own, so that any number of ranges of one pack read at once without
// sharing a file offset.
func (d *Driver) ReadRange(_ context.Context, p string, offset, length int64) (io.ReadCloser, error) {
	if !driver.ValidPath(p) {
		return nil, invalidPath(p)
	}
	end, err := driver.RangeEnd(driverName, p, offset, length)
	if err != nil {
		return nil, err
	}
	f, fi, err := d.openFile(p)
	if err != nil {
		return nil, err
	}
	if offset >= fi.Size() {
		f.Close()
		return nil, driver.InvalidOffsetError{Path: p, Offset: offset, Driver: driverName}
	}
	return &sectionFile{SectionReader: io.NewSectionReader(f, offset, end-offset), f: f}, nil
}

// sectionFile is a range of an open file that closes the file with it.
type sectionFile struct {
	*io.SectionReader
	f *os.File
}

func (s *sectionFile) Close() error { return s.f.Close() }

// Writer implements driver.Driver. It writes straight to the file at p:
// writers are used for uploads, which no client reads before they are moved
// into place.
func (d *Driver) Writer(_ context.Context, p string, append bool) (driver.FileWriter, error) {
	if err := driver.CheckFiles(driverName, p); err != nil {
		return nil, err
	}
	full := d.fullPath(p)
	var (
		f    *os.File
		size int64
		err  error
	)
	if append {
		// An existing file keeps its directory alive: no mkdir, no retry.
		if f, err = os.OpenFile(full, os.O_WRONLY, 0); err != nil {
			if notExist(err) {
				return nil, notFound(p)
			}
			return nil, wrap(err)
		}
		if size, err = f.Seek(0, io.SeekEnd); err != nil {
			f.Close()
			return nil, wrap(err)
		}
	} else {
		err = inDir(filepath.Dir(full), func() (err error) {
			f, err = os.OpenFile(full, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, filePerm)
			return err
		})
		if err != nil {
			return nil, wrap(err)
		}
	}
	return newFileWriter(p, full, f, size), nil
}

// Sync implements driver.InPlaceAppender: an fsync of the file, then of its
// directory, whose entry for it a rename or create may have changed. The
// directories above were created before and reach the disk with the
// journal commit either fsync makes (ext4, XFS).
func (d *Driver) Sync(_ context.Context, p string) error {
	if err := driver.CheckFiles(driverName, p); err != nil {
		return err
	}
	full := d.fullPath(p)
	for _, name := range []string{full, filepath.Dir(full)} {
		f, err := os.Open(name)
		if err != nil {
			if notExist(err) {
				return notFound(p)
			}
			return wrap(err)
		}
		err = f.Sync()
		if cerr := f.Close(); err == nil {
			err = cerr
		}
		if err != nil {
			return wrap(fmt.Errorf("sync %s: %w", p, err))
		}
	}
	return nil
}

// MoveNew implements driver.InPlaceAppender with link(2), which refuses an
// existing name, then the removal of src; where hard links are not
// supported it renames, after a check for dst that a second writer can
// slip past.
func (d *Driver) MoveNew(_ context.Context, src, dst string) error {
	err := d.rename(src, dst, func(s, t string) error {
		err := os.Link(s, t)
		if errors.Is(err, syscall.EPERM) || errors.Is(err, syscall.ENOTSUP) || errors.Is(err, syscall.EXDEV) {
			if _, serr := os.Lstat(t); serr == nil {
				return fs.ErrExist
			}
			return os.Rename(s, t)
		}
		return err
	})
	if err != nil {
		return err
	}
	if err := os.Remove(d.fullPath(src)); err != nil && !notExist(err) {
		return wrap(err)
	}
	return nil
}

// CacheEpoch implements driver.InPlaceAppender (an appending Writer opens
// the file and writes at its end): bytes closed without a sync live in the
// page cache until the machine restarts, so the epoch is the boot id.
func (d *Driver) CacheEpoch() string { return d.epoch }

// Stat implements driver.Driver. Directories report size 0, as object stores
// have no directory sizes.
func (d *Driver) Stat(_ context.Context, p string) (driver.FileInfo, error) {
	if !driver.ValidPath(p) {
		return driver.FileInfo{}, invalidPath(p)
	}
	fi, err := os.Stat(d.fullPath(p))
	if err != nil {
		if notExist(err) {
			return driver.FileInfo{}, notFound(p)
		}
		return driver.FileInfo{}, wrap(err)
	}
	info := driver.FileInfo{Path: p, ModTime: fi.ModTime(), IsDir: fi.IsDir()}
	if !info.IsDir {
		info.Size = fi.Size()
	}
	return info, nil
}

// List implements driver.Driver. Entries whose names are not valid path
// segments (such as temporary files) are not part of the namespace.
func (d *Driver) List(_ context.Context, p string) ([]string, error) {
	if !driver.ValidPath(p) {
		return nil, invalidPath(p)
	}
	entries, err := os.ReadDir(d.fullPath(p))
	if err != nil {
		if notExist(err) {
			return nil, notFound(p)
		}
		return nil, wrap(err)
	}
	prefix := childPrefix(p)
	out := make([]string, 0, len(entries))
	for _, e := range entries { // ReadDir sorts by name, so out is sorted
		if c := prefix + e.Name(); driver.ValidPath(c) {
			out = append(out, c)
		}
	}
	return out, nil
}

// Move implements driver.Driver with one rename, creating dst's parent
// directories only when the rename needs them.
func (d *Driver) Move(_ context.Context, src, dst string) error {
	return d.rename(src, dst, os.Rename)
}

// rename gives file src the name dst with op (on their names on disk),
// creating dst's parent directories only when op needs them. A missing src
// is a PathNotFoundError; an existing dst that op refuses, fs.ErrExist.
func (d *Driver) rename(src, dst string, op func(s, t string) error) error {
	if err := driver.CheckFiles(driverName, src, dst); err != nil {
		return err
	}
	s, t := d.fullPath(src), d.fullPath(dst)
	err := inDir(filepath.Dir(t), func() error {
		err := op(s, t)
		if errors.Is(err, fs.ErrNotExist) {
			// Either src or dst's directory is missing; only the latter
			// is worth a mkdir.
			if _, serr := os.Lstat(s); notExist(serr) {
				return notFound(src)
			}
		}
		return err
	})
	switch {
	case err == nil, errors.Is(err, driver.ErrNotFound), errors.Is(err, fs.ErrExist):
		return err
	}
	return wrap(err)
}

// Delete implements driver.Driver. Delete("/") empties the root but keeps it.
func (d *Driver) Delete(_ context.Context, p string) error {
	if !driver.ValidPath(p) {
		return invalidPath(p)
	}
	full := d.fullPath(p)
	if p == "/" {
		entries, err := os.ReadDir(full)
		if err != nil {
			return wrap(err)
		}
		var errs []error
		for _, e := range entries {
			if err := os.RemoveAll(filepath.Join(full, e.Name())); err != nil {
				errs = append(errs, wrap(err))
			}
		}
		return errors.Join(errs...)
	}
	if _, err := os.Lstat(full); err != nil {
		if notExist(err) {
			return notFound(p)
		}
		return wrap(err)
	}
	// A file created in the tree while RemoveAll runs (a tag PUT racing a
	// manifest DELETE) fails it with ENOTEMPTY; removing again takes it
	// too, as a Delete that came after the write would.
	err := os.RemoveAll(full)
	for i := 1; i < mkdirAttempts && errors.Is(err, syscall.ENOTEMPTY); i++ {
		err = os.RemoveAll(full)
	}
	if err != nil {
		return wrap(err)
	}
	return nil
}

// Walk implements driver.Driver. Siblings are visited in the order of their
// paths with a directory compared as "dir/", which is the order of an object
// store's flat key listing: files in lexical order, each directory just
// before its first entry. Entries that vanish during the walk (GC runs while
// the registry serves) are skipped.
func (d *Driver) Walk(ctx context.Context, p string, fn driver.WalkFn) error {
	if !driver.ValidPath(p) {
		return invalidPath(p)
	}
	return d.walkDir(ctx, d.fullPath(p), p, fn, true)
}

func (d *Driver) walkDir(ctx context.Context, full, p string, fn driver.WalkFn, top bool) error {
	entries, err := os.ReadDir(full)
	if err != nil {
		if notExist(err) {
			if top {
				return notFound(p)
			}
			return nil
		}
		return wrap(err)
	}
	slices.SortFunc(entries, compareEntries)
	prefix := childPrefix(p)
	for _, e := range entries {
		if err := ctx.Err(); err != nil {
			return err
		}
		child := prefix + e.Name()
		if !driver.ValidPath(child) {
			continue
		}
		childFull := full + string(filepath.Separator) + e.Name()
		fi, err := e.Info()
		if err == nil && fi.Mode()&fs.ModeSymlink != 0 {
			fi, err = os.Stat(childFull)
		}
		if err != nil {
			if notExist(err) {
				continue
			}
			return wrap(err)
		}
		info := driver.FileInfo{Path: child, ModTime: fi.ModTime(), IsDir: fi.IsDir()}
		if !info.IsDir {
			info.Size = fi.Size()
		}
		err = fn(info)
		if errors.Is(err, driver.ErrSkipDir) {
			if info.IsDir {
				continue
			}
			return nil // a file's ErrSkipDir skips the rest of its directory
		}
		if err != nil {
			return err
		}
		if info.IsDir {
			if err := d.walkDir(ctx, childFull, child, fn, false); err != nil {
				return err
			}
		}
	}
	return nil
}

// compareEntries orders directory entries by name, with a directory's name
// compared as if it ended in '/': "a-b" < "a.c" < "a/" < "b".
func compareEntries(x, y os.DirEntry) int {
	a, b := x.Name(), y.Name()
	n := min(len(a), len(b))
	if c := strings.Compare(a[:n], b[:n]); c != 0 {
		return c
	}
	return nextByte(a, n, x.IsDir()) - nextByte(b, n, y.IsDir())
}

// nextByte is name[i], or '/' just past a directory's name, or -1 past a
// file's name.
func nextByte(name string, i int, dir bool) int {
	switch {
	case i < len(name):
		return int(name[i])
	case dir:
		return '/'
	}
	return -1
}

// SweepTemp implements driver.TempSweeper: it removes PutContent's
// temporary files (name~suffix) that a killed process left below p.
// Temporary files younger than olderThan may belong to a write in progress
// and stay.
func (d *Driver) SweepTemp(ctx context.Context, p string, olderThan time.Time, dryRun bool) (int, error) {
	if !driver.ValidPath(p) {
		return 0, invalidPath(p)
	}
	n := 0
	var errs []error
	err := filepath.WalkDir(d.fullPath(p), func(name string, e fs.DirEntry, err error) error {
		if err != nil {
			if notExist(err) {
				return nil
			}
			return err
		}
		if cerr := ctx.Err(); cerr != nil {
			return cerr
		}
		if e.IsDir() || !strings.Contains(e.Name(), tempSep) {
			return nil
		}
		fi, err := e.Info()
		if err != nil || !fi.ModTime().Before(olderThan) {
			return nil
		}
		if !dryRun {
			if err := os.Remove(name); err != nil && !errors.Is(err, fs.ErrNotExist) {
				errs = append(errs, wrap(err))
				return nil
			}
		}
		n++
		return nil
	})
	if err != nil && !notExist(err) {
		errs = append(errs, wrap(err))
	}
	return n, errors.Join(errs...)
}

// DeleteFiles implements driver.Driver. Each file is unlinked without a stat,
// then the directories its removal left empty are removed, upward until the
// first non-empty one, never the root. The registry layout has fixed depths,
// so this removes exactly the per-blob and per-revision directories, and
// their parents once the last child is gone. Several files are deleted at
// once; errors are joined in the order of paths.
func (d *Driver) DeleteFiles(ctx context.Context, paths []string) (int, error) {
	var (
		deleted atomic.Int64
		mu      sync.Mutex
		failed  []indexedError
	)
	attempted := parallel.For(ctx, len(paths), deleteWorkers, func(i int) {
		gone, err := d.deleteFile(paths[i])
		if gone {
			deleted.Add(1)
		}
		if err != nil {
			mu.Lock()
			failed = append(failed, indexedError{i, err})
			mu.Unlock()
		}
	})
	slices.SortFunc(failed, func(a, b indexedError) int { return a.i - b.i })
	errs := make([]error, 0, len(failed)+1)
	for _, f := range failed {
		errs = append(errs, f.err)
	}
	// Workers stop claiming paths once ctx is done, so every claimed path
	// was attempted.
	if attempted < len(paths) {
		errs = append(errs, fmt.Errorf("%s: delete files: %d of %d paths not attempted: %w",
			driverName, len(paths)-attempted, len(paths), ctx.Err()))
	}
	return int(deleted.Load()), errors.Join(errs...)
}

type indexedError struct {
	i   int
	err error
}

// deleteFile removes the file at p and prunes its emptied parents. gone
// reports whether p no longer exists; err may be set either way.
func (d *Driver) deleteFile(p string) (gone bool, err error) {
	if !driver.ValidPath(p) {
		return false, invalidPath(p)
	}
	full := d.fullPath(p)
	err = removeFile(full)
	switch {
	case err == nil || errors.Is(err, fs.ErrNotExist):
		// Prune also after ENOENT: a run that crashed between unlink and
		// rmdir left empty directories behind.
		return true, prune(full, p)
	case errors.Is(err, syscall.ENOTDIR):
		return true, nil // a parent is a file, so p cannot exist
	default:
		return false, fmt.Errorf("%s: delete %s: %w", driverName, p, err)
	}
}

// prune removes p's parent directories while they are empty, deepest first,
// stopping below the root. full is p's name on disk; p's parent at byte i of
// p is full's prefix at the same offset from full's end.
//
// A writer that creates a file in a directory pruned under it gets ENOENT
// and retries its MkdirAll (see inDir), so pruning never fails a push.
func prune(full, p string) error {
	off := len(full) - len(p)
	for i := strings.LastIndexByte(p, '/'); i > 0; i = strings.LastIndexByte(p[:i], '/') {
		err := removeDir(full[:off+i])
		switch {
		case err == nil:
			continue
		case errors.Is(err, syscall.ENOTEMPTY), errors.Is(err, syscall.EEXIST),
			errors.Is(err, fs.ErrNotExist), errors.Is(err, syscall.EBUSY):
			// Not empty, already pruned by someone else, or a mount point.
			return nil
		default:
			return fmt.Errorf("%s: prune %s: %w", driverName, p[:i], err)
		}
	}
	return nil
}

// inDir runs create, which makes an entry in dir, and when it fails because
// dir is missing creates dir and runs it again.
func inDir(dir string, create func() error) error {
	err := create()
	for i := 1; i < mkdirAttempts && errors.Is(err, fs.ErrNotExist); i++ {
		if err = mkdirAll(dir); err == nil {
			err = create()
		}
	}
	return err
}

// mkdirAll is os.MkdirAll, run again when it loses a race with pruning:
// it fails with ENOENT when a parent it just made is pruned before it makes
// the child, and with EEXIST when a directory someone else made is pruned
// between its mkdir and its check. A file in the way fails every round.
func mkdirAll(dir string) error {
	err := os.MkdirAll(dir, dirPerm)
	for i := 1; i < mkdirAttempts && (errors.Is(err, fs.ErrNotExist) || errors.Is(err, fs.ErrExist)); i++ {
		err = os.MkdirAll(dir, dirPerm)
	}
	return err
}

// childPrefix is what a child's name is appended to for its path.
func childPrefix(p string) string {
	if p == "/" {
		return p
	}
	return p + "/"
}

// notExist reports an error meaning the path is not there, including a
// parent that is a file.
func notExist(err error) bool {
	return errors.Is(err, fs.ErrNotExist) || errors.Is(err, syscall.ENOTDIR)
}

func notFound(p string) error { return driver.PathNotFoundError{Path: p, Driver: driverName} }

func invalidPath(p string) error { return driver.InvalidPathError{Path: p, Driver: driverName} }

// wrap prefixes err with the driver's name and marks the errnos that mean
// the storage refuses writes (see driver.Refused): a full disk or quota, a
// read-only mount, a permission missing on the root.
func wrap(err error) error {
	err = fmt.Errorf("%s: %w", driverName, err)
	switch {
	case errors.Is(err, syscall.ENOSPC), errors.Is(err, syscall.EDQUOT):
		return driver.Refused(driver.ErrNoSpace, err)
	case errors.Is(err, syscall.EROFS):
		return driver.Refused(driver.ErrReadOnly, err)
	case errors.Is(err, syscall.EACCES), errors.Is(err, syscall.EPERM):
		return driver.Refused(driver.ErrPermission, err)
	}
	return err
}
