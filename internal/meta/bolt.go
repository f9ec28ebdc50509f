package meta

import (
	"bytes"
	"context"
	"encoding/binary"
	"encoding/hex"
	"fmt"
	"time"

	"github.com/opencontainers/go-digest"
	bolt "go.etcd.io/bbolt"
)

// Bucket names: one per kind of record.
var (
	bktFiles      = []byte("files")      // file key -> refs(8) flags(1)
	bktZero       = []byte("zero")       // file key -> nil, for files with refs == 0
	bktRecipes    = []byte("recipes")    // layer key -> state(1) recipe
	bktByState    = []byte("bystate")    // state(1) layer key -> nil
	bktLayerCount = []byte("layercount") // state(1) -> count(8)
	bktImages     = []byte("images")     // manifest key -> layer digests, "\n"-joined
	bktClients    = []byte("clients")    // 'c' client -> bucket (see bolt_pulls.go)
	bktPop        = []byte("pop")        // layer key -> ring of (slot(8) count(8))
	bktStats      = []byte("stats")      // name -> int64
)

var allBuckets = [][]byte{bktFiles, bktZero, bktRecipes, bktByState, bktLayerCount, bktImages, bktClients, bktPop, bktStats}

// File entry flags.
const (
	flagTombstoned byte = 1 << iota
	flagRevived         // re-referenced while tombstoned; cleared by Tombstone/DeleteFile
	flagMissing         // revived while GC deleted: the object may be gone
)

// Options tunes the bolt store; zero fields take the defaults.
type Options struct {
	// MaxLayersPerClient caps ULmap entries per client (default 4096).
	MaxLayersPerClient int
	// PopularityBucket is the width of one popularity counter (default 1h).
	PopularityBucket time.Duration
	// PopularityBuckets is how many counters each layer keeps (default 48), so
	// LayerPulls sees back PopularityBucket*PopularityBuckets.
	PopularityBuckets int
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
	return o
}

// Bolt is the embedded metadata store: one bbolt file, fsync on every commit.
type Bolt struct {
	db   *bolt.DB
	opts Options
}

var _ Store = (*Bolt)(nil)

// Open opens or creates the bolt file at path with default options.
func Open(path string) (*Bolt, error) { return OpenWith(path, Options{}) }

// OpenWith opens or creates the bolt file at path.
func OpenWith(path string, opts Options) (*Bolt, error) {
	// A timeout turns a second process on the same file into an error, not a hang.
	db, err := bolt.Open(path, 0o600, &bolt.Options{Timeout: 5 * time.Second})
	if err != nil {
		return nil, fmt.Errorf("meta: open %s: %w", path, err)
	}
	err = db.Update(func(tx *bolt.Tx) error {
		for _, b := range allBuckets {
			if _, err := tx.CreateBucketIfNotExists(b); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		db.Close()
		return nil, fmt.Errorf("meta: init %s: %w", path, err)
	}
	return &Bolt{db: db, opts: opts.withDefaults()}, nil
}

// Close closes the bolt file.
func (s *Bolt) Close() error { return s.db.Close() }

func (s *Bolt) update(ctx context.Context, fn func(tx *bolt.Tx) error) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	return s.db.Update(fn)
}

func (s *Bolt) view(ctx context.Context, fn func(tx *bolt.Tx) error) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	return s.db.View(fn)
}

// keyOf encodes a digest as a key: the 32 raw bytes for sha256 (the common case,
// fixed-size), else the digest string, which is longer than 32 bytes so the two
// forms never collide.
func keyOf(d digest.Digest) ([]byte, error) {
	if err := d.Validate(); err != nil {
		return nil, fmt.Errorf("%w: %q: %w", ErrInvalidDigest, d, err)
	}
	if d.Algorithm() == digest.SHA256 {
		return hex.DecodeString(d.Encoded())
	}
	return []byte(d), nil
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

type fileEntry struct {
	refs  int64
	flags byte
}

func getFile(b *bolt.Bucket, k []byte) (fileEntry, bool) {
	v := b.Get(k)
	if len(v) != 9 {
		return fileEntry{}, false
	}
	return fileEntry{refs: int64(binary.BigEndian.Uint64(v)), flags: v[8]}, true
}

func putFile(b *bolt.Bucket, k []byte, e fileEntry) error {
	var buf [9]byte
	binary.BigEndian.PutUint64(buf[:], uint64(e.refs))
	buf[8] = e.flags
	return b.Put(k, buf[:])
}

// AddFileRefs implements FileIndex.
func (s *Bolt) AddFileRefs(ctx context.Context, digests []digest.Digest) ([]FileRef, error) {
	keys, err := keysOf(digests)
	if err != nil {
		return nil, err
	}
	out := make([]FileRef, len(digests))
	err = s.update(ctx, func(tx *bolt.Tx) error {
		files, zero := tx.Bucket(bktFiles), tx.Bucket(bktZero)
		for i, k := range keys {
			e, ok := getFile(files, k)
			write := !ok || e.flags&(flagTombstoned|flagMissing) != 0
			if e.flags&flagTombstoned != 0 {
				e.flags |= flagRevived
			}
			e.flags &^= flagTombstoned | flagMissing
			if ok && e.refs == 0 {
				if err := zero.Delete(k); err != nil {
					return err
				}
			}
			e.refs++
			if err := putFile(files, k, e); err != nil {
				return err
			}
			out[i] = FileRef{Digest: digests[i], Refs: e.refs, Write: write}
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("meta: add file refs: %w", err)
	}
	return out, nil
}

// ReleaseFileRefs implements FileIndex.
func (s *Bolt) ReleaseFileRefs(ctx context.Context, digests []digest.Digest) ([]digest.Digest, error) {
	keys, err := keysOf(digests)
	if err != nil {
		return nil, err
	}
	var zeroed []digest.Digest
	err = s.update(ctx, func(tx *bolt.Tx) error {
		zeroed = zeroed[:0]
		files, zero := tx.Bucket(bktFiles), tx.Bucket(bktZero)
		for i, k := range keys {
			e, ok := getFile(files, k)
			if !ok || e.refs <= 0 {
				return fmt.Errorf("%w: %s", ErrInvalidRelease, digests[i])
			}
			e.refs--
			if err := putFile(files, k, e); err != nil {
				return err
			}
			if e.refs == 0 {
				if err := zero.Put(k, nil); err != nil {
					return err
				}
				zeroed = append(zeroed, digests[i])
			}
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("meta: release file refs: %w", err)
	}
	return zeroed, nil
}

// Tombstone implements FileIndex.
func (s *Bolt) Tombstone(ctx context.Context, d digest.Digest) (bool, error) {
	k, err := keyOf(d)
	if err != nil {
		return false, err
	}
	var ok bool
	err = s.update(ctx, func(tx *bolt.Tx) error {
		files := tx.Bucket(bktFiles)
		e, exists := getFile(files, k)
		if !exists || e.refs > 0 {
			ok = false
			return nil
		}
		ok = true
		if e.flags&flagTombstoned != 0 {
			return nil
		}
		// A fresh tombstone starts a new generation: an earlier revive is settled.
		e.flags = (e.flags | flagTombstoned) &^ flagRevived
		return putFile(files, k, e)
	})
	if err != nil {
		return false, fmt.Errorf("meta: tombstone %s: %w", d, err)
	}
	return ok, nil
}

// DeleteFile implements FileIndex.
func (s *Bolt) DeleteFile(ctx context.Context, d digest.Digest) (bool, error) {
	k, err := keyOf(d)
	if err != nil {
		return false, err
	}
	var revived bool
	err = s.update(ctx, func(tx *bolt.Tx) error {
		revived = false
		files := tx.Bucket(bktFiles)
		e, exists := getFile(files, k)
		switch {
		case !exists:
			return nil
		case e.flags&flagTombstoned != 0:
			if err := files.Delete(k); err != nil {
				return err
			}
			return tx.Bucket(bktZero).Delete(k)
		case e.flags&flagRevived != 0:
			revived = true
			e.flags = (e.flags | flagMissing) &^ flagRevived
			return putFile(files, k, e)
		default:
			return fmt.Errorf("%w: %s", ErrNotTombstoned, d)
		}
	})
	if err != nil {
		return false, fmt.Errorf("meta: delete file: %w", err)
	}
	return revived, nil
}

// Files implements FileIndex.
func (s *Bolt) Files(ctx context.Context, digests []digest.Digest) ([]FileInfo, error) {
	keys, err := keysOf(digests)
	if err != nil {
		return nil, err
	}
	out := make([]FileInfo, len(digests))
	err = s.view(ctx, func(tx *bolt.Tx) error {
		files := tx.Bucket(bktFiles)
		for i, k := range keys {
			e, ok := getFile(files, k)
			out[i] = FileInfo{
				Digest: digests[i], Exists: ok, Refs: e.refs,
				Tombstoned: e.flags&flagTombstoned != 0,
				Missing:    e.flags&flagMissing != 0,
			}
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("meta: files: %w", err)
	}
	return out, nil
}

// ZeroFiles implements FileIndex.
func (s *Bolt) ZeroFiles(ctx context.Context, after digest.Digest, limit int) ([]digest.Digest, error) {
	var out []digest.Digest
	err := s.view(ctx, func(tx *bolt.Tx) error {
		var err error
		out, err = page(tx.Bucket(bktZero).Cursor(), nil, after, limit)
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("meta: zero files: %w", err)
	}
	return out, nil
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
