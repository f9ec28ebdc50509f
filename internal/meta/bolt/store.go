// Package bolt is the embedded meta.Store: one bbolt file on the node's disk,
// fsync on every commit, checked at open and compacted when half of it is
// free. It implements the contract and lifecycles package meta describes;
// metatest checks it against the Redis store.
package bolt

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/opencontainers/go-digest"
	"go.etcd.io/bbolt"

	"github.com/cairn-registry/cairn/internal/meta"
)

// Bucket names: one per kind of record.
var (
	bktFiles      = []byte("files")      // file key -> flags(1) refs ordinal [location] (see files.go)
	bktZero       = []byte("zero")       // file key -> nil, for files with refs == 0
	bktOrdinals   = []byte("ordinals")   // file ordinal(8) -> file key (see schema.go)
	bktLayerFiles = []byte("layerfiles") // layer key -> its files' ordinals (see schema.go)
	bktRecipes    = []byte("recipes")    // layer key -> state(1) recipe
	bktByState    = []byte("bystate")    // state(1) layer key -> nil
	bktLayerCount = []byte("layercount") // state(1) -> count(8)
	bktImages     = []byte("images")     // manifest key -> layer digests, "\n"-joined
	bktClients    = []byte("clients")    // 'c' client -> bucket (see pulls.go)
	bktPop        = []byte("pop")        // layer key -> ring of (slot(8) count(8))
	bktStats      = []byte("stats")      // name -> int64
	bktLeases     = []byte("leases")     // name -> expiry unix ms(8) holder
	bktPacks      = []byte("packs")      // pack id -> its record (see packs.go)
	bktIdentity   = []byte("identity")   // "store" -> the storage's id (Identity); "schema" -> version (schema.go)
)

var keyStoreID = []byte("store")

var allBuckets = [][]byte{bktFiles, bktZero, bktOrdinals, bktLayerFiles, bktRecipes, bktByState, bktLayerCount, bktImages, bktClients, bktPop, bktStats, bktLeases, bktPacks, bktIdentity}

// Options tunes the bolt store; zero fields take the defaults.
type Options struct {
	// MaxLayersPerClient, PopularityBucket and PopularityBuckets are the
	// meta.PullLimits (see there for the defaults).
	MaxLayersPerClient int
	PopularityBucket   time.Duration
	PopularityBuckets  int
	// LockTimeout is how long Open waits for another process holding the
	// file (default 5s); then it fails with ErrLocked.
	LockTimeout time.Duration
}

func (o Options) limits() meta.PullLimits {
	return meta.PullLimits{MaxLayersPerClient: o.MaxLayersPerClient, PopularityBucket: o.PopularityBucket, PopularityBuckets: o.PopularityBuckets}
}

func (o Options) withDefaults() Options {
	l := o.limits().WithDefaults()
	o.MaxLayersPerClient, o.PopularityBucket, o.PopularityBuckets = l.MaxLayersPerClient, l.PopularityBucket, l.PopularityBuckets
	if o.LockTimeout <= 0 {
		o.LockTimeout = 5 * time.Second
	}
	return o
}

// Store is the embedded metadata store: one bbolt file, fsync on every commit.
type Store struct {
	// mu guards db, which Compact replaces: every transaction runs under
	// RLock, so Compact's Lock waits for those in flight and holds new
	// ones off while it copies the file and swaps the copy in.
	mu   sync.RWMutex
	db   *bbolt.DB
	opts Options
	path string // for errors
}

var _ meta.Store = (*Store)(nil)

// Open opens or creates the bolt file at path with default options.
func Open(path string) (*Store, error) { return OpenWith(path, Options{}) }

// OpenWith opens or creates the bolt file at path.
func OpenWith(path string, opts Options) (*Store, error) {
	// A timeout turns a second process on the same file into an error, not a hang.
	opts = opts.withDefaults()
	db, err := openBolt(path, opts.LockTimeout)
	if err != nil {
		return nil, err
	}
	// A damaged page is found here, as ErrCorrupt, rather than by a panic
	// on the first pull that reads it.
	if err := checkBolt(db, path); err != nil {
		db.Close()
		return nil, err
	}
	err = guard(path, func() error {
		err := db.Update(func(tx *bbolt.Tx) error {
			for _, b := range allBuckets {
				if _, err := tx.CreateBucketIfNotExists(b); err != nil {
					return err
				}
			}
			return nil
		})
		if err != nil {
			return err
		}
		_, err = migrate(db, migrateBatch, 0)
		return err
	})
	if err != nil {
		db.Close()
		if errors.Is(err, meta.ErrCorrupt) {
			return nil, err
		}
		return nil, fmt.Errorf("meta: init %s: %w", path, err)
	}
	// After the conversion, which frees many pages. A failed copy leaves
	// the file as it was, and in use: compaction only saves space.
	db, _ = maybeCompact(db, path, opts.LockTimeout)
	return &Store{db: db, opts: opts, path: path}, nil
}

// StoreID implements Identity.
func (s *Store) StoreID(ctx context.Context) (string, error) {
	var id string
	err := s.view(ctx, func(tx *bbolt.Tx) error {
		id = string(tx.Bucket(bktIdentity).Get(keyStoreID))
		return nil
	})
	return id, err
}

// SetStoreID implements Identity.
func (s *Store) SetStoreID(ctx context.Context, id string) error {
	return s.update(ctx, func(tx *bbolt.Tx) error {
		if id == "" {
			return tx.Bucket(bktIdentity).Delete(keyStoreID)
		}
		return tx.Bucket(bktIdentity).Put(keyStoreID, []byte(id))
	})
}

// FileSize is the bolt file's size: what the metadata occupies on disk
// (bolt reuses freed pages, never shrinks the file).
func (s *Store) FileSize() (int64, error) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	var n int64
	err := s.db.View(func(tx *bbolt.Tx) error { n = tx.Size(); return nil })
	return n, err
}

// Close closes the bolt file; later calls fail with bbolt's "database not
// open", Compact included.
func (s *Store) Close() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.db.Close()
}

// update, batch and view run under guard: a page damaged after the check
// at open fails the one call with ErrCorrupt instead of ending the process.
// They hold s.mu's read lock, which is not reentrant once Compact waits
// for it: fn must not call another method of s.
func (s *Store) update(ctx context.Context, fn func(tx *bbolt.Tx) error) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	s.mu.RLock()
	defer s.mu.RUnlock()
	return guard(s.path, func() error { return s.db.Update(fn) })
}

// batch is update for calls that arrive concurrently and often (pull
// records): bolt coalesces them into one commit. fn may run more than once.
func (s *Store) batch(ctx context.Context, fn func(tx *bbolt.Tx) error) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	// Held while bbolt waits for company and commits, so Compact never
	// swaps the file under a pending batch.
	s.mu.RLock()
	defer s.mu.RUnlock()
	return guard(s.path, func() error { return s.db.Batch(guardTx(fn)) })
}

func (s *Store) view(ctx context.Context, fn func(tx *bbolt.Tx) error) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	s.mu.RLock()
	defer s.mu.RUnlock()
	return guard(s.path, func() error { return s.db.View(fn) })
}

func putInt(b *bbolt.Bucket, k []byte, v int64) error {
	var buf [8]byte
	binary.BigEndian.PutUint64(buf[:], uint64(v))
	return b.Put(k, buf[:])
}

func getInt(b *bbolt.Bucket, k []byte) int64 {
	v := b.Get(k)
	if len(v) < 8 {
		return 0
	}
	return int64(binary.BigEndian.Uint64(v))
}

// page lists up to limit keys under prefix, strictly after the digest `after`.
func page(c *bbolt.Cursor, prefix []byte, after digest.Digest, limit int) ([]digest.Digest, error) {
	if limit <= 0 {
		return nil, nil
	}
	start := prefix
	var afterKey []byte
	if after != "" {
		k, err := meta.KeyOf(after)
		if err != nil {
			return nil, err
		}
		afterKey = append(append([]byte{}, prefix...), k...)
		start = afterKey
	}
	var out []digest.Digest
	for k, _ := c.Seek(start); k != nil && bytes.HasPrefix(k, prefix) && len(out) < limit; k, _ = c.Next() {
		if afterKey != nil && bytes.Equal(k, afterKey) {
			continue
		}
		out = append(out, meta.DigestOf(k[len(prefix):]))
	}
	return out, nil
}
