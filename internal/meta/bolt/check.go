package bolt

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"runtime/debug"
	"strings"
	"time"

	"go.etcd.io/bbolt"
	berrors "go.etcd.io/bbolt/errors"

	"github.com/cairn-registry/cairn/internal/meta"
)

// bbolt trusts its file: a damaged page makes its cursor panic (slice
// bounds out of range) or fault on the mapping, which would take the whole
// process down. Everything that reads the file here runs under
// guard, which turns either into an error wrapping ErrCorrupt.

// guard runs fn with memory faults turned into panics (debug.SetPanicOnFault
// is per goroutine) and any panic into an error wrapping ErrCorrupt.
func guard(path string, fn func() error) (err error) {
	defer func() {
		if p := recover(); p != nil {
			err = fmt.Errorf("%w: %s: panic reading it: %v", meta.ErrCorrupt, path, p)
		}
	}()
	defer debug.SetPanicOnFault(debug.SetPanicOnFault(true))
	return fn()
}

// guardTx is fn with memory faults turned into panics, for bbolt's batch,
// which may run fn on its own goroutine: bbolt recovers a panic there and
// reruns fn on the caller's, under guard.
func guardTx(fn func(*bbolt.Tx) error) func(*bbolt.Tx) error {
	return func(tx *bbolt.Tx) error {
		defer debug.SetPanicOnFault(debug.SetPanicOnFault(true))
		return fn(tx)
	}
}

// openBolt opens the store's file with the options every copy of it gets,
// at open and after Compact swapped in a new file.
//
// Compaction (here or in another process) renames a new file over path
// while the old one's lock is held. An open that waited for that lock
// gets it on the old file, now nameless, once its holder closes it:
// whatever it wrote there would be lost, so it opens path again.
func openBolt(path string, lockTimeout time.Duration) (*bbolt.DB, error) {
	for range 3 {
		db, f, err := openBoltOnce(path, lockTimeout)
		if err != nil {
			return nil, err
		}
		fi, ferr := f.Stat()
		pi, perr := os.Stat(path)
		if ferr == nil && perr == nil && os.SameFile(fi, pi) {
			db.AllocSize = allocSize
			// Batched pull records wait at most this long for company.
			db.MaxBatchDelay = 2 * time.Millisecond
			return db, nil
		}
		db.Close()
	}
	return nil, fmt.Errorf("%w: %s: replaced while waiting for its lock, again and again", meta.ErrLocked, path)
}

// openBoltOnce is bbolt.Open under guard, and the file it opened. A panic
// inside Open leaves the file open and locked, so it is closed then.
func openBoltOnce(path string, lockTimeout time.Duration) (*bbolt.DB, *os.File, error) {
	// Shorter than bbolt's two meta pages: bbolt says only "file size too
	// small"; every file it writes has at least four pages.
	if fi, err := os.Stat(path); err == nil && fi.Size() > 0 && fi.Size() < 2*4096 {
		return nil, nil, fmt.Errorf("%w: %s: %d bytes, shorter than its meta pages", meta.ErrCorrupt, path, fi.Size())
	}
	var f *os.File
	var db *bbolt.DB
	err := guard(path, func() error {
		var err error
		db, err = bbolt.Open(path, 0o600, &bbolt.Options{
			Timeout: lockTimeout,
			OpenFile: func(name string, flag int, perm os.FileMode) (*os.File, error) {
				var err error
				f, err = os.OpenFile(name, flag, perm)
				return f, err
			},
		})
		return err
	})
	switch {
	case errors.Is(err, meta.ErrCorrupt):
		if f != nil {
			f.Close()
		}
		return nil, nil, err
	case errors.Is(err, berrors.ErrTimeout):
		return nil, nil, fmt.Errorf("%w: %s", meta.ErrLocked, path)
	case errors.Is(err, berrors.ErrInvalid), errors.Is(err, berrors.ErrChecksum), errors.Is(err, berrors.ErrVersionMismatch):
		// Both meta pages are damaged (or not bbolt's).
		return nil, nil, fmt.Errorf("%w: %s: %w", meta.ErrCorrupt, path, err)
	case err != nil:
		return nil, nil, fmt.Errorf("meta: open %s: %w", path, err)
	}
	return db, f, nil
}

// allocSize is how far ahead of its last page bbolt grows the file.
// bbolt's default, 16 MiB, doubles the file of a store of a few MiB; a
// growth costs a truncate and an fsync, so a MiB at a time is cheap enough.
const allocSize = 1 << 20

// checkBolt reads every key and value of every bucket, then runs bbolt's
// consistency check (page reachability, freelist, key order), all under
// guard. The walk comes first because tx.Check runs on a goroutine of its
// own, where a panic could not be recovered: once every reachable page
// read cleanly, the check only compares them.
func checkBolt(db *bbolt.DB, path string) error {
	fi, err := os.Stat(path)
	if err != nil {
		return fmt.Errorf("meta: check %s: %w", path, err)
	}
	return guard(path, func() error {
		return db.View(func(tx *bbolt.Tx) error {
			// A truncated file: pages past its end would fault when read.
			if tx.Size() > fi.Size() {
				return fmt.Errorf("%w: %s: %d bytes, its pages need %d (truncated?)", meta.ErrCorrupt, path, fi.Size(), tx.Size())
			}
			if err := tx.ForEach(func(_ []byte, b *bbolt.Bucket) error { return walkBucket(b) }); err != nil {
				return err
			}
			var problems []string
			for err := range tx.Check() {
				// Drained to the end: the check's goroutine blocks until read.
				if len(problems) < 3 {
					problems = append(problems, err.Error())
				}
			}
			if len(problems) > 0 {
				return fmt.Errorf("%w: %s: %s", meta.ErrCorrupt, path, strings.Join(problems, "; "))
			}
			return nil
		})
	})
}

// walkBucket reads every key and value under b, nested buckets included.
// Touching the last byte of each is enough to fault on a page the mapping
// does not back.
func walkBucket(b *bbolt.Bucket) error {
	var sink byte
	c := b.Cursor()
	for k, v := c.First(); k != nil; k, v = c.Next() {
		sink ^= k[len(k)-1]
		if v == nil {
			if child := b.Bucket(k); child != nil {
				if err := walkBucket(child); err != nil {
					return err
				}
			}
			continue
		}
		if len(v) > 0 {
			sink ^= v[len(v)-1]
		}
	}
	_ = sink
	return nil
}

// OpenRecovering is OpenWith for a server's own metadata file: a file
// that is corrupt (ErrCorrupt) is renamed to path.corrupt-<UTC time>, kept
// for inspection, and a fresh, empty store is opened in its place. Its
// StoreID is "", which tells the caller to rebuild the metadata from
// storage. movedAside is where the file went ("" when it was sound); the
// caller logs it.
func OpenRecovering(path string, opts Options) (s *Store, movedAside string, err error) {
	s, err = OpenWith(path, opts)
	if !errors.Is(err, meta.ErrCorrupt) {
		return s, "", err
	}
	aside, merr := moveAside(path, "corrupt")
	if merr != nil {
		return nil, "", fmt.Errorf("%w (moving it aside: %w)", err, merr)
	}
	s, err = OpenWith(path, opts)
	if err != nil {
		return nil, aside, fmt.Errorf("meta: open a fresh %s after moving the corrupt one to %s: %w", path, aside, err)
	}
	return s, aside, nil
}

// moveAside renames the closed file at path to path.<why>-<UTC time>,
// never over an earlier one, and returns the new name.
func moveAside(path, why string) (string, error) {
	stamp := time.Now().UTC().Format("20060102T150405Z")
	aside := path + "." + why + "-" + stamp
	for i := 1; ; i++ {
		if _, err := os.Lstat(aside); errors.Is(err, os.ErrNotExist) {
			break
		}
		aside = fmt.Sprintf("%s.%s-%s.%d", path, why, stamp, i)
	}
	if err := os.Rename(path, aside); err != nil {
		return "", err
	}
	// The rename must be durable before a fresh file's first commit.
	if d, err := os.Open(filepath.Dir(path)); err == nil {
		d.Sync()
		d.Close()
	}
	return aside, nil
}
