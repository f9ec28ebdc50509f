package meta

import (
	"bytes"
	"context"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/opencontainers/go-digest"
	bolt "go.etcd.io/bbolt"
)

// Bucket names: one per kind of record.
var (
	bktFiles      = []byte("files")      // file key -> flags(1) refs ordinal [location] (see bolt_files.go)
	bktZero       = []byte("zero")       // file key -> nil, for files with refs == 0
	bktOrdinals   = []byte("ordinals")   // file ordinal(8) -> file key (see bolt_schema.go)
	bktLayerFiles = []byte("layerfiles") // layer key -> its files' ordinals (see bolt_schema.go)
	bktRecipes    = []byte("recipes")    // layer key -> state(1) recipe
	bktByState    = []byte("bystate")    // state(1) layer key -> nil
	bktLayerCount = []byte("layercount") // state(1) -> count(8)
	bktImages     = []byte("images")     // manifest key -> layer digests, "\n"-joined
	bktClients    = []byte("clients")    // 'c' client -> bucket (see bolt_pulls.go)
	bktPop        = []byte("pop")        // layer key -> ring of (slot(8) count(8))
	bktStats      = []byte("stats")      // name -> int64
	bktLeases     = []byte("leases")     // name -> expiry unix ms(8) holder
	bktPacks      = []byte("packs")      // pack id -> its record (see bolt_packs.go)
	bktIdentity   = []byte("identity")   // "store" -> the storage's id (Identity); "schema" -> version (bolt_schema.go)
)

var keyStoreID = []byte("store")

var allBuckets = [][]byte{bktFiles, bktZero, bktOrdinals, bktLayerFiles, bktRecipes, bktByState, bktLayerCount, bktImages, bktClients, bktPop, bktStats, bktLeases, bktPacks, bktIdentity}

// Options tunes the bolt store; zero fields take the defaults.
type Options struct {
	// MaxLayersPerClient caps ULmap entries per client (default 4096).
	MaxLayersPerClient int
	// PopularityBucket is the width of one popularity counter (default 1h).
	PopularityBucket time.Duration
	// PopularityBuckets is how many counters each layer keeps (default 48), so
	// LayerPulls sees back PopularityBucket*PopularityBuckets.
	PopularityBuckets int
	// LockTimeout is how long Open waits for another process holding the
	// file (default 5s); then it fails with ErrLocked.
	LockTimeout time.Duration
}

func (o Options) withDefaults() Options {
	if o.MaxLayersPerClient <= 0 {
		o.MaxLayersPerClient = 4096
	}
	if o.PopularityBucket <= 0 {
		o.PopularityBucket = time.Hour
	}
	if o.PopularityBuckets <= 0 {
		o.PopularityBuckets = 48
	}
	if o.LockTimeout <= 0 {
		o.LockTimeout = 5 * time.Second
	}
	return o
}

// Bolt is the embedded metadata store: one bbolt file, fsync on every commit.
type Bolt struct {
	// mu guards db, which Compact replaces: every transaction runs under
	// RLock, so Compact's Lock waits for those in flight and holds new
	// ones off while it copies the file and swaps the copy in.
	mu   sync.RWMutex
	db   *bolt.DB
	opts Options
	path string // for errors
}

var _ Store = (*Bolt)(nil)

// Open opens or creates the bolt file at path with default options.
func Open(path string) (*Bolt, error) { return OpenWith(path, Options{}) }

// OpenWith opens or creates the bolt file at path.
func OpenWith(path string, opts Options) (*Bolt, error) {
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
		err := db.Update(func(tx *bolt.Tx) error {
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
		if errors.Is(err, ErrCorrupt) {
			return nil, err
		}
		return nil, fmt.Errorf("meta: init %s: %w", path, err)
	}
	// After the conversion, which frees many pages. A failed copy leaves
	// the file as it was, and in use: compaction only saves space.
	db, _ = maybeCompact(db, path, opts.LockTimeout)
	return &Bolt{db: db, opts: opts, path: path}, nil
}

// StoreID implements Identity.
func (s *Bolt) StoreID(ctx context.Context) (string, error) {
	var id string
	err := s.view(ctx, func(tx *bolt.Tx) error {
		id = string(tx.Bucket(bktIdentity).Get(keyStoreID))
		return nil
	})
	return id, err
}

// SetStoreID implements Identity.
func (s *Bolt) SetStoreID(ctx context.Context, id string) error {
	return s.update(ctx, func(tx *bolt.Tx) error {
		if id == "" {
			return tx.Bucket(bktIdentity).Delete(keyStoreID)
		}
		return tx.Bucket(bktIdentity).Put(keyStoreID, []byte(id))
	})
}

// FileSize is the bolt file's size: what the metadata occupies on disk
// (bolt reuses freed pages, never shrinks the file).
func (s *Bolt) FileSize() (int64, error) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	var n int64
	err := s.db.View(func(tx *bolt.Tx) error { n = tx.Size(); return nil })
	return n, err
}

// Close closes the bolt file; later calls fail with bbolt's "database not
// open", Compact included.
func (s *Bolt) Close() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.db.Close()
}

// update, batch and view run under guard: a page damaged after the check
// at open fails the one call with ErrCorrupt instead of ending the process.
// They hold s.mu's read lock, which is not reentrant once Compact waits
// for it: fn must not call another method of s.
func (s *Bolt) update(ctx context.Context, fn func(tx *bolt.Tx) error) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	s.mu.RLock()
	defer s.mu.RUnlock()
	return guard(s.path, func() error { return s.db.Update(fn) })
}

// batch is update for calls that arrive concurrently and often (pull
// records): bolt coalesces them into one commit. fn may run more than once.
func (s *Bolt) batch(ctx context.Context, fn func(tx *bolt.Tx) error) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	// Held while bbolt waits for company and commits, so Compact never
	// swaps the file under a pending batch.
	s.mu.RLock()
	defer s.mu.RUnlock()
	return guard(s.path, func() error { return s.db.Batch(guardTx(fn)) })
}

func (s *Bolt) view(ctx context.Context, fn func(tx *bolt.Tx) error) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	s.mu.RLock()
	defer s.mu.RUnlock()
	return guard(s.path, func() error { return s.db.View(fn) })
}

// keyOf encodes a digest as a key: the 32 raw bytes for sha256 (the common case,
// fixed-size), else the digest string, which is longer than 32 bytes so the two
// forms never collide.
func keyOf(d digest.Digest) ([]byte, error) { return appendKey(nil, d) }

// appendKey appends the key of d to dst, so many keys can share one allocation.
func appendKey(dst []byte, d digest.Digest) ([]byte, error) {
	// Fast path for canonical sha256: digest.Validate runs a regexp, which is a
	// fifth of the cost of a 50k-file AddLayerRefs.
	if enc, ok := strings.CutPrefix(string(d), "sha256:"); ok && len(enc) == 64 && isLowerHex(enc) {
		return hex.AppendDecode(dst, []byte(enc))
	}
	if err := d.Validate(); err != nil {
		return dst, fmt.Errorf("%w: %q: %w", ErrInvalidDigest, d, err)
	}
	if d.Algorithm() == digest.SHA256 {
		return hex.AppendDecode(dst, []byte(d.Encoded()))
	}
	return append(dst, d...), nil
}

func isLowerHex(s string) bool {
	for i := 0; i < len(s); i++ {
		if c := s[i]; (c < '0' || c > '9') && (c < 'a' || c > 'f') {
			return false
		}
	}
	return true
}

func digestOf(k []byte) digest.Digest {
	if len(k) == 32 {
		return digest.NewDigestFromBytes(digest.SHA256, k)
	}
	return digest.Digest(k)
}

func putInt(b *bolt.Bucket, k []byte, v int64) error {
	var buf [8]byte
	binary.BigEndian.PutUint64(buf[:], uint64(v))
	return b.Put(k, buf[:])
}

func getInt(b *bolt.Bucket, k []byte) int64 {
	v := b.Get(k)
	if len(v) < 8 {
		return 0
	}
	return int64(binary.BigEndian.Uint64(v))
}

// page lists up to limit keys under prefix, strictly after the digest `after`.
func page(c *bolt.Cursor, prefix []byte, after digest.Digest, limit int) ([]digest.Digest, error) {
	if limit <= 0 {
		return nil, nil
	}
	start := prefix
	var afterKey []byte
	if after != "" {
		k, err := keyOf(after)
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
		out = append(out, digestOf(k[len(prefix):]))
	}
	return out, nil
}

func keysOf(digests []digest.Digest) ([][]byte, error) {
	keys := make([][]byte, len(digests))
	for i, d := range digests {
		k, err := keyOf(d)
		if err != nil {
			return nil, err
		}
		keys[i] = k
	}
	return keys, nil
}
