package bolt

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"go.etcd.io/bbolt"
)

// bbolt never gives disk space back: pages freed by deletes and by its
// copy-on-write commits are reused, but the file keeps its largest size,
// and pages split by random inserts stay half full. A store that released
// most of what it once held (GC), or grew by many small commits, is copied
// into a new file of full pages (bbolt's Compact), which replaces it: at
// open, and while it runs (Store.Compact), both by compactWorth's test and
// compactCopy's copy. Copying a few MiB takes milliseconds, so small
// stores are compacted too.
const (
	// compactMinSize: smaller files are not worth a copy.
	compactMinSize = 1 << 20
	// compactFree: the share of the file a copy would save (free pages,
	// the unused part of pages, the tail bbolt allocated ahead) that calls
	// for one.
	compactFree = 0.5
	// compactTxSize bounds one copy transaction's writes.
	compactTxSize = 64 << 20
)

// usedBytes is what the keys and values of db take in its pages: about
// what a compact copy needs. Free pages, half-empty pages and the tail
// bbolt allocated ahead are the rest of the file.
func usedBytes(db *bbolt.DB, path string) (int64, error) {
	var used int64
	err := guard(path, func() error {
		return db.View(func(tx *bbolt.Tx) error {
			return tx.ForEach(func(_ []byte, b *bbolt.Bucket) error {
				st := b.Stats()
				used += int64(st.BranchInuse + st.LeafInuse)
				return nil
			})
		})
	})
	return used, err
}

// compactWorth reports the size of the file at path, where db is open,
// and whether a compact copy of it is worth making: the file is at least
// compactMinSize and a copy would save compactFree of it.
func compactWorth(db *bbolt.DB, path string) (size int64, worth bool, err error) {
	fi, err := os.Stat(path)
	if err != nil {
		return 0, false, fmt.Errorf("meta: compact %s: %w", path, err)
	}
	if fi.Size() < compactMinSize {
		return fi.Size(), false, nil
	}
	used, err := usedBytes(db, path)
	if err != nil {
		return fi.Size(), false, fmt.Errorf("meta: compact %s: %w", path, err)
	}
	return fi.Size(), float64(fi.Size()-used) >= compactFree*float64(fi.Size()), nil
}

// compactCopy copies db, open at path, into path.compact, opens the copy
// and renames it over path. Nobody may write db meanwhile (the caller
// holds its lock: at open, or Store.mu). It returns the copy, open, and the
// file's size before and after; the caller closes db then. The copy is
// nil when it did not replace the file: db is intact and still the store,
// and the error says why.
//
// The copy is opened before the rename, not after, so the store is never
// without an open database: once the rename is done nothing is left that
// could fail but the directory's sync, and the copy goes on being used
// then. It also keeps the file at path locked throughout (the lock
// follows the inode), so another process can never open it in between.
func compactCopy(db *bbolt.DB, path string, lockTimeout time.Duration) (c *bbolt.DB, before, after int64, err error) {
	fi, err := os.Stat(path)
	if err != nil {
		return nil, 0, 0, fmt.Errorf("meta: compact %s: %w", path, err)
	}
	before = fi.Size()
	tmp := path + ".compact"
	os.Remove(tmp) // a copy a crash left
	dst, err := bbolt.Open(tmp, 0o600, &bbolt.Options{Timeout: lockTimeout, NoSync: true})
	if err != nil {
		return nil, before, before, fmt.Errorf("meta: compact %s: %w", path, err)
	}
	// bbolt's Compact fills every page (FillPercent 1.0).
	dst.AllocSize = allocSize
	err = guard(path, func() error { return bbolt.Compact(dst, db, compactTxSize) })
	if err == nil {
		// The file ends at the copy's last page, not at what bbolt
		// allocated ahead; it grows again when a commit needs more.
		err = dst.View(func(tx *bbolt.Tx) error { after = tx.Size(); return nil })
	}
	if cerr := dst.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = truncateSync(tmp, after)
	}
	if err == nil {
		c, err = openBolt(tmp, lockTimeout)
	}
	if err == nil {
		if err = os.Rename(tmp, path); err != nil {
			c.Close()
		}
	}
	if err != nil {
		os.Remove(tmp)
		return nil, before, before, fmt.Errorf("meta: compact %s: %w", path, err)
	}
	if err := syncDir(filepath.Dir(path)); err != nil {
		// The rename may not survive a crash, and with it the commits
		// made to the copy: said, but the copy is the store now.
		return c, before, after, fmt.Errorf("meta: compact %s: the file was replaced, but: %w", path, err)
	}
	return c, before, after, nil
}

// maybeCompact is compaction at open: db when nothing was done or the
// copy failed (the error then says why), else the copy, open, db closed.
func maybeCompact(db *bbolt.DB, path string, lockTimeout time.Duration) (*bbolt.DB, error) {
	_, worth, err := compactWorth(db, path)
	if err != nil || !worth {
		return db, err
	}
	c, _, _, err := compactCopy(db, path, lockTimeout)
	if c == nil {
		return db, err
	}
	db.Close()
	return c, err
}

// Compact copies the store into a compact file and swaps it in under the
// running store, when compactWorth says so (the test at open). Calls wait
// during the copy (about 10 ms per MiB of file, measured with -race). before and
// after are the file's sizes on disk, equal when nothing was done. When
// the copy fails, the store goes on with its file as it was. ctx is heeded
// until the copy starts: stopping one half-way would only waste it.
func (s *Store) Compact(ctx context.Context) (before, after int64, err error) {
	if err := ctx.Err(); err != nil {
		return 0, 0, err
	}
	// The test reads every bucket's pages: under RLock, not to hold
	// calls up when nothing is to be done.
	s.mu.RLock()
	size, worth, err := compactWorth(s.db, s.path)
	s.mu.RUnlock()
	if err != nil || !worth {
		return size, size, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := ctx.Err(); err != nil {
		return size, size, err
	}
	c, before, after, err := compactCopy(s.db, s.path, s.opts.LockTimeout)
	if c == nil {
		return before, after, err
	}
	// Every commit to the old file was synced before the swap, and it
	// has no name any more: failing to close it loses nothing.
	s.db.Close()
	s.db = c
	return before, after, err
}

// syncDir makes a rename in dir durable.
func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	err = d.Sync()
	if cerr := d.Close(); err == nil {
		err = cerr
	}
	return err
}

// truncateSync cuts the file at path to size and makes it durable.
func truncateSync(path string, size int64) error {
	f, err := os.OpenFile(path, os.O_RDWR, 0)
	if err != nil {
		return err
	}
	err = f.Truncate(size)
	if serr := f.Sync(); err == nil {
		err = serr
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	return err
}
