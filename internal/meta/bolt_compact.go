package meta

import (
	"fmt"
	"os"
	"path/filepath"
	"time"

	bolt "go.etcd.io/bbolt"
)

// bbolt never gives disk space back: pages freed by deletes and by its
// copy-on-write commits are reused, but the file keeps its largest size,
// and pages split by random inserts stay half full. A store that released
// most of what it once held (GC), or grew by many small commits, is copied
// at open into a new file of full pages (bbolt's Compact), which replaces
// it. Only at open: the process holds the file's lock, nobody else writes.
const (
	// compactMinSize: smaller files are not worth a copy.
	compactMinSize = 16 << 20
	// compactFree: the share of the file its free pages must reach.
	compactFree = 0.5
	// compactTxSize bounds one copy transaction's writes.
	compactTxSize = 64 << 20
)

// maybeCompact copies db, open at path, into a compact file when enough
// of it is free, and returns the database open on the result: db itself
// when nothing was done or the copy failed (the error then says why), nil
// only when the compacted file could not be opened.
func maybeCompact(db *bolt.DB, path string, lockTimeout time.Duration) (*bolt.DB, error) {
	fi, err := os.Stat(path)
	if err != nil || fi.Size() < compactMinSize {
		return db, nil
	}
	st := db.Stats()
	free := int64(st.FreePageN+st.PendingPageN) * int64(db.Info().PageSize)
	if float64(free) < compactFree*float64(fi.Size()) {
		return db, nil
	}
	tmp := path + ".compact"
	os.Remove(tmp) // a copy a crash left
	dst, err := bolt.Open(tmp, 0o600, &bolt.Options{Timeout: lockTimeout, NoSync: true})
	if err != nil {
		return db, fmt.Errorf("meta: compact %s: %w", path, err)
	}
	err = guard(path, func() error { return bolt.Compact(dst, db, compactTxSize) })
	if err == nil {
		err = dst.Sync()
	}
	if cerr := dst.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		os.Remove(tmp)
		return db, fmt.Errorf("meta: compact %s: %w", path, err)
	}
	// The copy replaces the file while its lock is still held, then the
	// copy is opened (and locked) in its place.
	if err := os.Rename(tmp, path); err != nil {
		os.Remove(tmp)
		return db, fmt.Errorf("meta: compact %s: %w", path, err)
	}
	if d, err := os.Open(filepath.Dir(path)); err == nil {
		d.Sync()
		d.Close()
	}
	db.Close()
	c, err := openBolt(path, lockTimeout)
	if err != nil {
		return nil, err
	}
	return c, nil
}
