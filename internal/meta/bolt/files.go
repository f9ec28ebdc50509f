package bolt

import (
	"bytes"
	"context"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"slices"

	"github.com/opencontainers/go-digest"
	"go.etcd.io/bbolt"

	"github.com/cairn-registry/cairn/internal/meta"
)

// refOf is the outcome for an entry in state e. Revived covers the whole window
// from a revive to GC's DropFileEntry (meta.FlagRevived), not only the first reviver: GC's
// delete may land after any write in that window.
func refOf(d digest.Digest, e fileEntry, exists bool) meta.FileRef {
	revived := e.flags&(meta.FlagTombstoned|meta.FlagRevived) != 0
	return meta.FileRef{
		Digest:  d,
		Refs:    e.refs,
		Write:   !exists || revived || e.flags&meta.FlagMissing != 0,
		Revived: revived,
	}
}

// AddLayerRefs implements FileIndex.
func (s *Store) AddLayerRefs(ctx context.Context, layer digest.Digest, files []digest.Digest) ([]meta.FileRef, error) {
	lk, fs, err := meta.LayerFileSet(layer, files)
	if err != nil {
		return nil, err
	}
	refs := make([]meta.FileRef, len(fs.Keys))
	err = s.update(ctx, func(tx *bbolt.Tx) error {
		layers, idx, zero, ords := tx.Bucket(bktLayerFiles), tx.Bucket(bktFiles), tx.Bucket(bktZero), tx.Bucket(bktOrdinals)
		if held := layers.Get(lk); held != nil {
			same, err := sameFiles(ords, held, fs.Keys)
			if err != nil {
				return err
			}
			if !same {
				return fmt.Errorf("%w: %s", meta.ErrLayerFilesDiffer, layer)
			}
			for j, k := range fs.Keys {
				e, ok := getFile(idx, k)
				refs[j] = refOf(fs.Digests[j], e, ok)
			}
			return nil
		}
		if len(fs.Keys) == 0 {
			return nil
		}
		// New ordinals only append to the ordinal map: full pages.
		ords.FillPercent = 1.0
		list := make([]uint64, len(fs.Keys))
		for j, k := range fs.Keys {
			e, ok := getFile(idx, k)
			refs[j] = refOf(fs.Digests[j], e, ok)
			if e.flags&meta.FlagTombstoned != 0 {
				e.flags |= meta.FlagRevived
			}
			// A write is handed out, so Missing is settled (see the package doc).
			e.flags &^= meta.FlagTombstoned | meta.FlagMissing
			if ok && e.refs == 0 {
				if err := zero.Delete(k); err != nil {
					return err
				}
			}
			if err := ensureOrdinal(idx, ords, k, &e); err != nil {
				return err
			}
			list[j] = e.ord
			e.refs++
			refs[j].Refs = e.refs
			if err := putFile(idx, k, e); err != nil {
				return err
			}
		}
		slices.Sort(list)
		return layers.Put(lk, encodeOrdinals(list))
	})
	if err != nil {
		return nil, fmt.Errorf("meta: add layer refs %s: %w", layer, err)
	}
	return fs.Refs(files, refs), nil
}

// sameFiles reports whether the layer file list held names exactly the
// distinct, sorted keys.
func sameFiles(ords *bbolt.Bucket, held []byte, keys [][]byte) (bool, error) {
	have, err := layerKeys(ords, held)
	if err != nil {
		return false, err
	}
	if len(have) != len(keys) {
		return false, nil
	}
	slices.SortFunc(have, bytes.Compare)
	for i, k := range keys {
		if !bytes.Equal(have[i], k) {
			return false, nil
		}
	}
	return true, nil
}

// ReleaseLayerRefs implements FileIndex.
func (s *Store) ReleaseLayerRefs(ctx context.Context, layer digest.Digest) ([]digest.Digest, error) {
	lk, err := meta.KeyOf(layer)
	if err != nil {
		return nil, err
	}
	var zeroed []digest.Digest
	err = s.update(ctx, func(tx *bbolt.Tx) error {
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
func releaseTx(tx *bbolt.Tx, lk []byte) ([]digest.Digest, int, error) {
	layers, idx, zero := tx.Bucket(bktLayerFiles), tx.Bucket(bktFiles), tx.Bucket(bktZero)
	held := layers.Get(lk)
	if held == nil {
		return nil, 0, nil
	}
	keys, err := layerKeys(tx.Bucket(bktOrdinals), held)
	if err != nil {
		return nil, 0, err
	}
	for _, k := range keys {
		if e, ok := getFile(idx, k); !ok || e.refs <= 0 {
			return nil, 0, fmt.Errorf("%w: %s", meta.ErrInvalidRelease, meta.DigestOf(k))
		}
	}
	var zeroed []digest.Digest
	for _, k := range keys {
		e, _ := getFile(idx, k)
		e.refs--
		if err := putFile(idx, k, e); err != nil {
			return nil, 0, err
		}
		if e.refs == 0 {
			zeroed = append(zeroed, meta.DigestOf(k))
			if err := zero.Put(k, nil); err != nil {
				return nil, 0, err
			}
		}
	}
	n := len(keys)
	return zeroed, n, layers.Delete(lk)
}

// LayerFiles implements FileIndex.
func (s *Store) LayerFiles(ctx context.Context, layer digest.Digest) ([]digest.Digest, error) {
	lk, err := meta.KeyOf(layer)
	if err != nil {
		return nil, err
	}
	var out []digest.Digest
	err = s.view(ctx, func(tx *bbolt.Tx) error {
		held := tx.Bucket(bktLayerFiles).Get(lk)
		if held == nil {
			return meta.ErrNotFound
		}
		keys, err := layerKeys(tx.Bucket(bktOrdinals), held)
		if err != nil {
			return err
		}
		// Key order, as the interface says; a list of ordinals is in
		// ordinal order.
		slices.SortFunc(keys, bytes.Compare)
		out = make([]digest.Digest, len(keys))
		for i, k := range keys {
			out[i] = meta.DigestOf(k)
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("meta: layer files %s: %w", layer, err)
	}
	return out, nil
}

// A file entry is flags(1) refs(uvarint) ordinal(uvarint), then, for a
// file located in a pack, the offset and length as uvarints and the pack
// id: its 16 bytes when it is 32 lower-case hex digits (pack.NewID's ids,
// flagRawPack), else the id itself. flagEntryV2 is always set, so the first
// byte tells this format from the one before ordinals (schema.go),
// whose refs(8) begin with a zero byte: refs(8) flags(1), then the same
// location with the pack id as a string, or nothing for entries written
// before packs. Both read; only this one is written. Ordinal 0 means none
// yet: an entry of the old format rewritten before the migration reached
// it. AddLayerRefs and the migration give it one.
type fileEntry struct {
	refs  int64
	flags byte
	ord   uint64
	loc   meta.Location
}

// Format bits of an entry's flags byte, never set in fileEntry.flags.
const (
	flagEntryV2 byte = 0x80
	flagRawPack byte = 0x40
	entryFormat      = flagEntryV2 | flagRawPack
)

// getFile reads k's entry; an entry too damaged to decode reads as none, a
// damaged location as none (as if the file had never been placed).
func getFile(b *bbolt.Bucket, k []byte) (fileEntry, bool) {
	return decodeFile(b.Get(k))
}

func decodeFile(v []byte) (fileEntry, bool) {
	if len(v) == 0 {
		return fileEntry{}, false
	}
	if v[0]&flagEntryV2 == 0 {
		return decodeOldFile(v)
	}
	e := fileEntry{flags: v[0] &^ entryFormat}
	refs, n := binary.Uvarint(v[1:])
	if n <= 0 {
		return fileEntry{}, false
	}
	ord, m := binary.Uvarint(v[1+n:])
	if m <= 0 {
		return fileEntry{}, false
	}
	e.refs, e.ord = int64(refs), ord
	if rest := v[1+n+m:]; len(rest) > 0 {
		e.loc = decodeLoc(rest, v[0]&flagRawPack != 0)
	}
	return e, true
}

// decodeOldFile reads an entry written before ordinals.
func decodeOldFile(v []byte) (fileEntry, bool) {
	if len(v) < 9 {
		return fileEntry{}, false
	}
	e := fileEntry{refs: int64(binary.BigEndian.Uint64(v)), flags: v[8]}
	if len(v) > 9 {
		e.loc = decodeLoc(v[9:], false)
	}
	return e, true
}

// decodeLoc reads the location part of an entry; a corrupt one reads as no
// location, as if the file had never been placed.
func decodeLoc(v []byte, rawPack bool) meta.Location {
	off, n := binary.Uvarint(v)
	if n <= 0 {
		return meta.Location{}
	}
	length, m := binary.Uvarint(v[n:])
	if m <= 0 || len(v) == n+m {
		return meta.Location{}
	}
	id := v[n+m:]
	if rawPack {
		if len(id) != rawPackLen {
			return meta.Location{}
		}
		return meta.Location{Pack: hex.EncodeToString(id), Offset: int64(off), Length: int64(length)}
	}
	// string copies the id out of the mmap.
	return meta.Location{Pack: string(id), Offset: int64(off), Length: int64(length)}
}

// rawPackLen is the stored length of a pack id of 32 lower-case hex digits.
const rawPackLen = 16

func encodeFile(e fileEntry) []byte {
	buf := make([]byte, 1, 1+4*binary.MaxVarintLen64+len(e.loc.Pack))
	buf[0] = e.flags | flagEntryV2
	buf = binary.AppendUvarint(buf, uint64(e.refs))
	buf = binary.AppendUvarint(buf, e.ord)
	if !e.loc.IsZero() {
		buf = binary.AppendUvarint(buf, uint64(e.loc.Offset))
		buf = binary.AppendUvarint(buf, uint64(e.loc.Length))
		if id := e.loc.Pack; len(id) == 2*rawPackLen && meta.IsLowerHex(id) {
			buf[0] |= flagRawPack
			buf, _ = hex.AppendDecode(buf, []byte(id)) // meta.IsLowerHex: cannot fail
		} else {
			buf = append(buf, id...)
		}
	}
	return buf
}

func putFile(b *bbolt.Bucket, k []byte, e fileEntry) error { return b.Put(k, encodeFile(e)) }

// Tombstone implements FileIndex.
func (s *Store) Tombstone(ctx context.Context, d digest.Digest) (bool, error) {
	k, err := meta.KeyOf(d)
	if err != nil {
		return false, err
	}
	var ok bool
	err = s.update(ctx, func(tx *bbolt.Tx) error {
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
func tombstoneTx(files *bbolt.Bucket, k []byte) (bool, error) {
	e, exists := getFile(files, k)
	if !exists || e.refs > 0 {
		return false, nil
	}
	if e.flags&meta.FlagTombstoned != 0 {
		return true, nil
	}
	// A fresh tombstone starts a new generation: an earlier revive is settled.
	e.flags = (e.flags | meta.FlagTombstoned) &^ meta.FlagRevived
	return true, putFile(files, k, e)
}

// DropFileEntry implements FileIndex.
func (s *Store) DropFileEntry(ctx context.Context, d digest.Digest) (bool, error) {
	k, err := meta.KeyOf(d)
	if err != nil {
		return false, err
	}
	var revived bool
	err = s.update(ctx, func(tx *bbolt.Tx) error {
		var err error
		revived, err = deleteFileTx(tx, k, false)
		if errors.Is(err, meta.ErrNotTombstoned) {
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
func deleteFileTx(tx *bbolt.Tx, k []byte, settled bool) (revived bool, err error) {
	files := tx.Bucket(bktFiles)
	e, exists := getFile(files, k)
	switch {
	case !exists:
		return false, nil
	case e.flags&meta.FlagTombstoned != 0:
		if err := files.Delete(k); err != nil {
			return false, err
		}
		if err := tx.Bucket(bktZero).Delete(k); err != nil {
			return false, err
		}
		// The ordinal goes with the entry. Tombstoned means refs 0 (a new
		// reference clears the flag), so no layer list names it; a file
		// added again gets a new one.
		if err := dropOrdinal(tx.Bucket(bktOrdinals), k, e.ord); err != nil {
			return false, err
		}
		// The file leaves its pack with its entry: Live counts entries.
		return false, leavePack(tx.Bucket(bktPacks), e.loc, nowMicros())
	case e.flags&meta.FlagRevived != 0 || settled:
		e.flags = (e.flags | meta.FlagMissing) &^ meta.FlagRevived
		return true, putFile(files, k, e)
	default:
		return false, meta.ErrNotTombstoned
	}
}

// Files implements FileIndex.
func (s *Store) Files(ctx context.Context, digests []digest.Digest) ([]meta.FileInfo, error) {
	keys, err := meta.KeysOf(digests)
	if err != nil {
		return nil, err
	}
	out := make([]meta.FileInfo, len(digests))
	err = s.view(ctx, func(tx *bbolt.Tx) error {
		files := tx.Bucket(bktFiles)
		for i, k := range keys {
			e, ok := getFile(files, k)
			out[i] = meta.FileInfo{
				Digest: digests[i], Exists: ok, Refs: e.refs,
				Tombstoned: e.flags&meta.FlagTombstoned != 0,
				Missing:    e.flags&meta.FlagMissing != 0,
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
func (s *Store) ZeroFiles(ctx context.Context, after digest.Digest, limit int) ([]digest.Digest, error) {
	var out []digest.Digest
	err := s.view(ctx, func(tx *bbolt.Tx) error {
		var err error
		out, err = page(tx.Bucket(bktZero).Cursor(), nil, after, limit)
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("meta: zero files: %w", err)
	}
	return out, nil
}
