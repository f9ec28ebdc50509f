package meta

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"slices"

	"github.com/opencontainers/go-digest"
	bolt "go.etcd.io/bbolt"
)

// File entry flags.
const (
	flagTombstoned byte = 1 << iota
	flagRevived         // re-referenced while tombstoned; adds report Revived until Tombstone/DropFileEntry
	flagMissing         // revived while GC deleted: the object may be gone
)

// fileSet is the distinct files of one AddLayerRefs call, sorted by key so bolt
// writes land in page order.
type fileSet struct {
	keys    [][]byte        // distinct, sorted; they share one buffer
	digests []digest.Digest // digests[j] is the digest of keys[j]
	pos     []int           // pos[i] is the index in keys of the call's files[i]
	first   []bool          // first[i]: files[i] is the first occurrence of its key
}

func newFileSet(files []digest.Digest) (fileSet, error) {
	buf := make([]byte, 0, 32*len(files))
	ends := make([]int, len(files))
	for i, d := range files {
		var err error
		if buf, err = appendKey(buf, d); err != nil {
			return fileSet{}, err
		}
		ends[i] = len(buf)
	}
	all := make([][]byte, len(files))
	for i, end := range ends {
		start := 0
		if i > 0 {
			start = ends[i-1]
		}
		all[i] = buf[start:end:end]
	}
	order := make([]int, len(files))
	for i := range order {
		order[i] = i
	}
	// Stable, so the first occurrence of a duplicate comes first.
	slices.SortStableFunc(order, func(a, b int) int { return bytes.Compare(all[a], all[b]) })
	fs := fileSet{pos: make([]int, len(files)), first: make([]bool, len(files))}
	for _, i := range order {
		if n := len(fs.keys); n == 0 || !bytes.Equal(fs.keys[n-1], all[i]) {
			fs.keys = append(fs.keys, all[i])
			fs.digests = append(fs.digests, files[i])
			fs.first[i] = true
		}
		fs.pos[i] = len(fs.keys) - 1
	}
	return fs, nil
}

// encode is the layerfiles value: each key prefixed by its length as a uvarint
// (33 bytes per sha256 file), in key order, so equal sets encode equally.
func (fs fileSet) encode() []byte {
	n := 0
	for _, k := range fs.keys {
		n += binary.MaxVarintLen64 + len(k)
	}
	out := make([]byte, 0, n)
	for _, k := range fs.keys {
		out = binary.AppendUvarint(out, uint64(len(k)))
		out = append(out, k...)
	}
	return out
}

// eachKey calls fn with each key of a layerfiles value.
func eachKey(v []byte, fn func(k []byte) error) error {
	for len(v) > 0 {
		n, w := binary.Uvarint(v)
		if w <= 0 || n > uint64(len(v)-w) {
			return fmt.Errorf("meta: corrupt layer file list")
		}
		if err := fn(v[w : w+int(n)]); err != nil {
			return err
		}
		v = v[w+int(n):]
	}
	return nil
}

// refOf is the outcome for an entry in state e. Revived covers the whole window
// from a revive to GC's DropFileEntry (flagRevived), not only the first reviver: GC's
// delete may land after any write in that window.
func refOf(d digest.Digest, e fileEntry, exists bool) FileRef {
	revived := e.flags&(flagTombstoned|flagRevived) != 0
	return FileRef{
		Digest:  d,
		Refs:    e.refs,
		Write:   !exists || revived || e.flags&flagMissing != 0,
		Revived: revived,
	}
}

// AddLayerRefs implements FileIndex.
func (s *Bolt) AddLayerRefs(ctx context.Context, layer digest.Digest, files []digest.Digest) ([]FileRef, error) {
	lk, err := keyOf(layer)
	if err != nil {
		return nil, err
	}
	fs, err := newFileSet(files)
	if err != nil {
		return nil, err
	}
	enc := fs.encode()
	refs := make([]FileRef, len(fs.keys))
	err = s.update(ctx, func(tx *bolt.Tx) error {
		layers, idx, zero := tx.Bucket(bktLayerFiles), tx.Bucket(bktFiles), tx.Bucket(bktZero)
		if held := layers.Get(lk); held != nil {
			if !bytes.Equal(held, enc) {
				return fmt.Errorf("%w: %s", ErrLayerFilesDiffer, layer)
			}
			for j, k := range fs.keys {
				e, ok := getFile(idx, k)
				refs[j] = refOf(fs.digests[j], e, ok)
			}
			return nil
		}
		if len(fs.keys) == 0 {
			return nil
		}
		for j, k := range fs.keys {
			e, ok := getFile(idx, k)
			refs[j] = refOf(fs.digests[j], e, ok)
			if e.flags&flagTombstoned != 0 {
				e.flags |= flagRevived
			}
			// A write is handed out, so Missing is settled (see the package doc).
			e.flags &^= flagTombstoned | flagMissing
			if ok && e.refs == 0 {
				if err := zero.Delete(k); err != nil {
					return err
				}
			}
			e.refs++
			refs[j].Refs = e.refs
			if err := putFile(idx, k, e); err != nil {
				return err
			}
		}
		return layers.Put(lk, enc)
	})
	if err != nil {
		return nil, fmt.Errorf("meta: add layer refs %s: %w", layer, err)
	}
	out := make([]FileRef, len(files))
	for i, d := range files {
		r := refs[fs.pos[i]]
		r.Digest = d
		if !fs.first[i] {
			r.Write, r.Revived = false, false
		}
		out[i] = r
	}
	return out, nil
}

// ReleaseLayerRefs implements FileIndex.
func (s *Bolt) ReleaseLayerRefs(ctx context.Context, layer digest.Digest) ([]digest.Digest, error) {
	lk, err := keyOf(layer)
	if err != nil {
		return nil, err
	}
	var zeroed []digest.Digest
	err = s.update(ctx, func(tx *bolt.Tx) error {
		var err error
		zeroed, _, err = releaseTx(tx, lk)
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("meta: release layer refs %s: %w", layer, err)
	}
	return zeroed, nil
}

// releaseTx drops the references layer key lk holds and returns the files whose
// count reached zero, and how many references it dropped. A recorded file without
// references fails with ErrInvalidRelease before anything changes, so ReleaseLayers
// can go on with other layers in the same transaction.
func releaseTx(tx *bolt.Tx, lk []byte) ([]digest.Digest, int, error) {
	layers, idx, zero := tx.Bucket(bktLayerFiles), tx.Bucket(bktFiles), tx.Bucket(bktZero)
	held := layers.Get(lk)
	if held == nil {
		return nil, 0, nil
	}
	// Copied: the keys are reused as Put keys while pages are rewritten.
	held = bytes.Clone(held)
	n := 0
	err := eachKey(held, func(k []byte) error {
		if e, ok := getFile(idx, k); !ok || e.refs <= 0 {
			return fmt.Errorf("%w: %s", ErrInvalidRelease, digestOf(k))
		}
		n++
		return nil
	})
	if err != nil {
		return nil, 0, err
	}
	var zeroed []digest.Digest
	err = eachKey(held, func(k []byte) error {
		e, _ := getFile(idx, k)
		e.refs--
		if err := putFile(idx, k, e); err != nil {
			return err
		}
		if e.refs == 0 {
			zeroed = append(zeroed, digestOf(k))
			return zero.Put(k, nil)
		}
		return nil
	})
	if err != nil {
		return nil, 0, err
	}
	return zeroed, n, layers.Delete(lk)
}

// LayerFiles implements FileIndex.
func (s *Bolt) LayerFiles(ctx context.Context, layer digest.Digest) ([]digest.Digest, error) {
	lk, err := keyOf(layer)
	if err != nil {
		return nil, err
	}
	var out []digest.Digest
	err = s.view(ctx, func(tx *bolt.Tx) error {
		held := tx.Bucket(bktLayerFiles).Get(lk)
		if held == nil {
			return ErrNotFound
		}
		return eachKey(held, func(k []byte) error {
			out = append(out, digestOf(k)) // digestOf copies out of the mmap
			return nil
		})
	})
	if err != nil {
		return nil, fmt.Errorf("meta: layer files %s: %w", layer, err)
	}
	return out, nil
}

// A file entry is refs(8) flags(1), then, for a file located in a pack, the
// offset and length as uvarints and the pack id. Entries written before packs
// end after the flags, and still read as files without a location.
type fileEntry struct {
	refs  int64
	flags byte
	loc   Location
}

func getFile(b *bolt.Bucket, k []byte) (fileEntry, bool) {
	v := b.Get(k)
	if len(v) < 9 {
		return fileEntry{}, false
	}
	e := fileEntry{refs: int64(binary.BigEndian.Uint64(v)), flags: v[8]}
	if len(v) > 9 {
		e.loc = decodeLoc(v[9:])
	}
	return e, true
}

// decodeLoc reads the location part of an entry; a corrupt one reads as no
// location, as if the file had never been placed.
func decodeLoc(v []byte) Location {
	off, n := binary.Uvarint(v)
	if n <= 0 {
		return Location{}
	}
	length, m := binary.Uvarint(v[n:])
	if m <= 0 || len(v) == n+m {
		return Location{}
	}
	// string copies the id out of the mmap.
	return Location{Pack: string(v[n+m:]), Offset: int64(off), Length: int64(length)}
}

func putFile(b *bolt.Bucket, k []byte, e fileEntry) error {
	n := 9
	if !e.loc.IsZero() {
		n += 2*binary.MaxVarintLen64 + len(e.loc.Pack)
	}
	buf := make([]byte, 9, n)
	binary.BigEndian.PutUint64(buf, uint64(e.refs))
	buf[8] = e.flags
	if !e.loc.IsZero() {
		buf = binary.AppendUvarint(buf, uint64(e.loc.Offset))
		buf = binary.AppendUvarint(buf, uint64(e.loc.Length))
		buf = append(buf, e.loc.Pack...)
	}
	return b.Put(k, buf)
}

// Tombstone implements FileIndex.
func (s *Bolt) Tombstone(ctx context.Context, d digest.Digest) (bool, error) {
	k, err := keyOf(d)
	if err != nil {
		return false, err
	}
	var ok bool
	err = s.update(ctx, func(tx *bolt.Tx) error {
		var err error
		ok, err = tombstoneTx(tx.Bucket(bktFiles), k)
		return err
	})
	if err != nil {
		return false, fmt.Errorf("meta: tombstone %s: %w", d, err)
	}
	return ok, nil
}

// tombstoneTx is Tombstone of file key k in the files bucket.
func tombstoneTx(files *bolt.Bucket, k []byte) (bool, error) {
	e, exists := getFile(files, k)
	if !exists || e.refs > 0 {
		return false, nil
	}
	if e.flags&flagTombstoned != 0 {
		return true, nil
	}
	// A fresh tombstone starts a new generation: an earlier revive is settled.
	e.flags = (e.flags | flagTombstoned) &^ flagRevived
	return true, putFile(files, k, e)
}

// DropFileEntry implements FileIndex.
func (s *Bolt) DropFileEntry(ctx context.Context, d digest.Digest) (bool, error) {
	k, err := keyOf(d)
	if err != nil {
		return false, err
	}
	var revived bool
	err = s.update(ctx, func(tx *bolt.Tx) error {
		var err error
		revived, err = deleteFileTx(tx, k, false)
		if errors.Is(err, ErrNotTombstoned) {
			return fmt.Errorf("%w: %s", err, d)
		}
		return err
	})
	if err != nil {
		return false, fmt.Errorf("meta: delete file: %w", err)
	}
	return revived, nil
}

// deleteFileTx is DropFileEntry of file key k, or, with settled, DropFileEntries: an
// entry neither tombstoned nor revived is then marked Missing and reported
// revived instead of failing with ErrNotTombstoned.
func deleteFileTx(tx *bolt.Tx, k []byte, settled bool) (revived bool, err error) {
	files := tx.Bucket(bktFiles)
	e, exists := getFile(files, k)
	switch {
	case !exists:
		return false, nil
	case e.flags&flagTombstoned != 0:
		if err := files.Delete(k); err != nil {
			return false, err
		}
		if err := tx.Bucket(bktZero).Delete(k); err != nil {
			return false, err
		}
		// The file leaves its pack with its entry: Live counts entries.
		return false, leavePack(tx.Bucket(bktPacks), e.loc, nowMicros())
	case e.flags&flagRevived != 0 || settled:
		e.flags = (e.flags | flagMissing) &^ flagRevived
		return true, putFile(files, k, e)
	default:
		return false, ErrNotTombstoned
	}
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
				Location:   e.loc,
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
