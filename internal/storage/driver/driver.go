// Package driver defines cairn's storage contract: a flat namespace of files
// addressed by slash-separated paths, with distribution's method set plus a bulk
// delete. The registry and the garbage collector see storage only through it.
//
// Paths are absolute ("/docker/registry/v2/..."), use '/' as separator, and
// contain no "." or ".." segments and no empty segments. Drivers reject
// anything else with an InvalidPathError.
package driver

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"time"
)

// Driver is the storage contract. Every method is safe for concurrent use.
type Driver interface {
	// Name identifies the driver in logs and metrics ("filesystem", "s3", ...).
	Name() string
	// GetContent returns the whole content of the file at path.
	GetContent(ctx context.Context, path string) ([]byte, error)
	// PutContent stores content at path atomically: readers see the old
	// content or the new, never a part.
	PutContent(ctx context.Context, path string, content []byte) error
	// Reader streams the file at path from byte offset. An offset past the end
	// yields an InvalidOffsetError.
	Reader(ctx context.Context, path string, offset int64) (io.ReadCloser, error)
	// ReadRange streams length bytes of the file at path from byte offset,
	// in one request on an object store (an HTTP Range), with a positioned
	// read on a filesystem: dedup's packs are read this way. A range that
	// runs past the end yields the bytes up to the end (so a huge length
	// reads the rest). A negative offset, or one at or past the end, yields
	// an InvalidOffsetError: unlike Reader's, an offset equal to the size
	// is refused too, because an object store answers 416 to a range that
	// starts there (an empty file's included) and every driver agrees with
	// it. A length <= 0 yields an InvalidLengthError.
	ReadRange(ctx context.Context, path string, offset, length int64) (io.ReadCloser, error)
	// Writer returns a FileWriter for path; with append it continues a file
	// written earlier (by a Writer that was closed without Commit or Cancel).
	Writer(ctx context.Context, path string, append bool) (FileWriter, error)
	// Stat describes the file or directory at path.
	Stat(ctx context.Context, path string) (FileInfo, error)
	// List returns the direct children of the directory at path, as full paths.
	List(ctx context.Context, path string) ([]string, error)
	// Move renames src to dst, replacing dst; readers of dst see the old file
	// or the new one, never a part.
	Move(ctx context.Context, src, dst string) error
	// Delete recursively deletes all files stored at path and below it.
	Delete(ctx context.Context, path string) error
	// Walk calls fn for every file and directory below path: files in lexical
	// order of their paths, each directory just before its first entry (a
	// directory sorts as path+"/"), which is the order of a flat object-store
	// listing. ErrSkipDir from a directory skips its contents; from a file,
	// the rest of its directory.
	Walk(ctx context.Context, path string, fn WalkFn) error
	// DeleteFiles deletes the given regular files without listing or stat'ing
	// them first. A missing file counts as deleted. It returns how many paths
	// are gone and every per-path failure joined (errors.Join), none dropped.
	DeleteFiles(ctx context.Context, paths []string) (int, error)
}

// TempSweeper is implemented by drivers whose writes go through temporary
// files outside the namespace (filesystem: PutContent writes path~<suffix>
// and renames it). A process killed mid-write leaves such files behind, and
// nothing names them, so only the driver can find them; the garbage
// collector calls SweepTemp after its sweep.
type TempSweeper interface {
	// SweepTemp deletes the temporary files below path last modified
	// before olderThan (with dryRun, only counts them) and returns how
	// many.
	SweepTemp(ctx context.Context, path string, olderThan time.Time, dryRun bool) (int, error)
}

// InPlaceAppender is implemented by drivers whose Writer(path, true)
// continues any file, committed or not, by writing only the new bytes
// (filesystem). Uploads on such a driver grow one file per session instead
// of writing an object per chunk and joining them at commit. Object stores,
// whose objects are immutable, do not implement it: an append there copies
// the object.
type InPlaceAppender interface {
	// CacheEpoch names the cache that holds what a FileWriter wrote and
	// closed without Commit: such bytes are readable at once and last as
	// long as the epoch does (filesystem: the page cache, until the
	// machine restarts; the kernel's boot id). "" when the driver cannot
	// tell: then only committed bytes may be counted on.
	CacheEpoch() string
	// PutCached stores content at path as PutContent does (atomically),
	// but without making it durable: it lasts as long as the cache epoch.
	// For records about bytes that are themselves not synced, whose loss
	// with those bytes is expected (an upload session's head): a sync
	// there is not only wasted, on a journaling filesystem it also waits
	// for the unsynced data of other files written before it.
	PutCached(ctx context.Context, path string, content []byte) error
	// Sync makes the file at path durable, its bytes and its name, as a
	// Commit of its writer would have (a file written with PutCached, or
	// closed without Commit). A missing file is a PathNotFoundError.
	Sync(ctx context.Context, path string) error
	// MoveNew renames src to dst unless dst exists, which fails with an
	// error matching fs.ErrExist and leaves both as they were.
	MoveNew(ctx context.Context, src, dst string) error
}

// As returns the first driver in the chain d, d.Unwrap(), ... that
// implements T: wrappers (metrics, request counting) hide the optional
// interfaces of the driver they wrap and expose it with Unwrap.
func As[T any](d Driver) (T, bool) {
	for {
		if t, ok := d.(T); ok {
			return t, true
		}
		u, ok := d.(interface{ Unwrap() Driver })
		if !ok {
			var zero T
			return zero, false
		}
		d = u.Unwrap()
	}
}

// FileWriter writes one file. Close without Commit or Cancel keeps what was
// written so a later Writer(path, append=true) continues it (appending to a
// missing file is a PathNotFoundError). Commit makes the content durable;
// Cancel removes the file, even after Close. Close may be called again, or
// after Commit or Cancel; any write after one of them is an error.
type FileWriter interface {
	io.WriteCloser
	// Size is the number of bytes written so far, including those of earlier
	// writers this one appended to.
	Size() int64
	// Cancel removes what was written.
	Cancel(ctx context.Context) error
	// Commit flushes everything written and makes it durable.
	Commit(ctx context.Context) error
}

// FileInfo describes a file or directory.
type FileInfo struct {
	Path    string
	Size    int64
	ModTime time.Time
	IsDir   bool
}

// WalkFn is called by Walk for each entry.
type WalkFn func(fi FileInfo) error

// ErrSkipDir, returned by a WalkFn for a directory, skips that directory's
// contents.
var ErrSkipDir = errors.New("skip this directory")

// ErrNotFound is matched (errors.Is) by every PathNotFoundError.
var ErrNotFound = errors.New("path not found")

// Refusals of a write that the storage itself makes, whatever the request:
// a full disk or quota, a read-only mount, missing permissions. Each driver
// marks the errors it recognises with Refused, so that they match these
// with errors.Is through every layer above, and the server answers them
// with a status and message naming the cause rather than as an internal
// error.
var (
	ErrNoSpace    = errors.New("no space left on the storage")
	ErrReadOnly   = errors.New("the storage is read-only")
	ErrPermission = errors.New("permission denied by the storage")
)

// Refused marks err as the refusal kind (ErrNoSpace, ErrReadOnly or
// ErrPermission): errors.Is matches kind as well as everything err wraps,
// and the message stays err's, which names the path.
func Refused(kind, err error) error { return refusedError{kind: kind, err: err} }

type refusedError struct{ kind, err error }

func (e refusedError) Error() string   { return e.err.Error() }
func (e refusedError) Unwrap() []error { return []error{e.kind, e.err} }

// PathNotFoundError reports a path that does not exist.
type PathNotFoundError struct {
	Path   string
	Driver string
}

func (e PathNotFoundError) Error() string {
	return fmt.Sprintf("%s: path not found: %s", e.Driver, e.Path)
}

// Is makes errors.Is(err, ErrNotFound) true.
func (e PathNotFoundError) Is(target error) bool { return target == ErrNotFound }

// InvalidPathError reports a path that breaks the path rules.
type InvalidPathError struct {
	Path   string
	Driver string
}

func (e InvalidPathError) Error() string {
	return fmt.Sprintf("%s: invalid path: %q", e.Driver, e.Path)
}

// InvalidOffsetError reports a read or write offset outside the file.
type InvalidOffsetError struct {
	Path   string
	Offset int64
	Driver string
}

func (e InvalidOffsetError) Error() string {
	return fmt.Sprintf("%s: invalid offset %d for %s", e.Driver, e.Offset, e.Path)
}

// InvalidLengthError reports a ReadRange length that is not positive.
type InvalidLengthError struct {
	Path   string
	Length int64
	Driver string
}

func (e InvalidLengthError) Error() string {
	return fmt.Sprintf("%s: invalid length %d for %s", e.Driver, e.Length, e.Path)
}

// RangeEnd checks ReadRange's offset and length, which no driver needs a
// request for, and returns the end of the range (exclusive). The end is
// capped at math.MaxInt64, so that a caller may ask for "the rest" with a
// huge length without overflowing a driver's arithmetic.
func RangeEnd(driverName, path string, offset, length int64) (int64, error) {
	if offset < 0 {
		return 0, InvalidOffsetError{Path: path, Offset: offset, Driver: driverName}
	}
	if length <= 0 {
		return 0, InvalidLengthError{Path: path, Length: length, Driver: driverName}
	}
	if length > math.MaxInt64-offset {
		return math.MaxInt64, nil
	}
	return offset + length, nil
}

// CheckFiles returns an InvalidPathError (for driver name) for the first
// path that cannot name a file: an invalid path, or the root.
func CheckFiles(name string, paths ...string) error {
	for _, p := range paths {
		if p == "/" || !ValidPath(p) {
			return InvalidPathError{Path: p, Driver: name}
		}
	}
	return nil
}

// ValidPath reports whether p satisfies the path rules: "/" or one or more
// "/segment" parts of [A-Za-z0-9._:@+=-], none of them "." or "..". A byte
// loop rather than a regexp: GC validates hundreds of millions of paths.
func ValidPath(p string) bool {
	if p == "/" {
		return true
	}
	if len(p) < 2 || p[0] != '/' {
		return false
	}
	segStart := 1
	for i := 1; i <= len(p); i++ {
		if i == len(p) || p[i] == '/' {
			seg := p[segStart:i]
			if seg == "" || seg == "." || seg == ".." {
				return false
			}
			segStart = i + 1
			continue
		}
		if !validPathByte(p[i]) {
			return false
		}
	}
	return true
}

func validPathByte(c byte) bool {
	switch {
	case c >= 'a' && c <= 'z', c >= 'A' && c <= 'Z', c >= '0' && c <= '9':
		return true
	}
	switch c {
	case '.', '_', ':', '@', '+', '=', '-':
		return true
	}
	return false
}

// WriterState is where a FileWriter is in its life; the drivers share it so
// every writer reports misuse ("writer for X is committed") alike.
type WriterState int

// FileWriter states: open until Close, Commit or Cancel.
const (
	WriterOpen WriterState = iota
	WriterClosed
	WriterCommitted
	WriterCancelled
)

func (s WriterState) String() string {
	return [...]string{"open", "closed", "committed", "cancelled"}[s]
}

// Close is a FileWriter's Close: an open writer becomes closed and finish
// keeps what was written for a later appending writer; closing again, or
// after Commit or Cancel, does nothing.
func (s *WriterState) Close(finish func() error) error {
	if *s != WriterOpen {
		return nil
	}
	*s = WriterClosed
	return finish()
}

// CloseStaged is Close for a writer that may come from a Stager's
// StageWriter: an open staged writer is cancelled instead of finished, as
// what it staged must never show at its path without Commit.
func (s *WriterState) CloseStaged(staged bool, cancel, finish func() error) error {
	if staged && *s == WriterOpen {
		return cancel()
	}
	return s.Close(finish)
}

// Commit is a FileWriter's Commit: an open writer becomes committed and
// finish makes what was written the file; a writer no longer open gets
// misuse's error.
func (s *WriterState) Commit(misuse func() error, finish func() error) error {
	if *s != WriterOpen {
		return misuse()
	}
	*s = WriterCommitted
	return finish()
}
