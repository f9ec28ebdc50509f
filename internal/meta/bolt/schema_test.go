package bolt

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"path/filepath"
	"slices"
	"testing"

	"github.com/opencontainers/go-digest"
	"go.etcd.io/bbolt"

	"github.com/cairn-registry/cairn/internal/meta"
)

// oldStore is the content of a store written before file ordinals.
type oldStore struct {
	files  []digest.Digest
	refs   map[digest.Digest]int64
	tomb   map[digest.Digest]bool
	loc    map[digest.Digest]meta.Location
	layers map[digest.Digest][]digest.Digest // sorted
}

// newOldStore makes nFiles files and nLayers layers holding some of them;
// a few files are held by none (refs 0, some tombstoned), a few have the
// entry of before packs, and the packs are one of pack.NewID's ids and one
// other id.
func newOldStore(nFiles, nLayers int) oldStore {
	o := oldStore{refs: map[digest.Digest]int64{}, tomb: map[digest.Digest]bool{},
		loc: map[digest.Digest]meta.Location{}, layers: map[digest.Digest][]digest.Digest{}}
	for i := range nFiles {
		o.files = append(o.files, digest.FromString(fmt.Sprint("file ", i)))
	}
	for l := range nLayers {
		var fs []digest.Digest
		for i, f := range o.files {
			if (i+l)%3 == 0 && i%10 != 9 {
				fs = append(fs, f)
				o.refs[f]++
			}
		}
		slices.Sort(fs)
		o.layers[digest.FromString(fmt.Sprint("layer ", l))] = fs
	}
	for i, f := range o.files {
		switch {
		case i%10 == 9:
			o.tomb[f] = i%20 == 19
		case i%7 == 0: // before packs
		case i%2 == 0:
			o.loc[f] = meta.Location{Pack: "0123456789abcdef0123456789abcdef", Offset: int64(i * 1000), Length: 900}
		default:
			o.loc[f] = meta.Location{Pack: "legacy-pack", Offset: int64(i), Length: 1}
		}
	}
	return o
}

// oldFileEntry is a file entry as stores before ordinals wrote it.
func oldFileEntry(refs int64, flags byte, loc meta.Location, prePack bool) []byte {
	v := binary.BigEndian.AppendUint64(nil, uint64(refs))
	v = append(v, flags)
	if prePack || loc.IsZero() {
		return v
	}
	v = binary.AppendUvarint(v, uint64(loc.Offset))
	v = binary.AppendUvarint(v, uint64(loc.Length))
	return append(v, loc.Pack...)
}

// write creates the store at path with bbolt directly, in the old formats.
func (o oldStore) write(t *testing.T, path string) {
	t.Helper()
	db, err := bbolt.Open(path, 0o600, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	err = db.Update(func(tx *bbolt.Tx) error {
		for _, b := range allBuckets {
			if bytes.Equal(b, bktOrdinals) {
				continue
			}
			if _, err := tx.CreateBucket(b); err != nil {
				return err
			}
		}
		files, zero, packs := tx.Bucket(bktFiles), tx.Bucket(bktZero), tx.Bucket(bktPacks)
		live := map[string]int64{}
		for i, f := range o.files {
			k, _ := meta.KeyOf(f)
			var flags byte
			if o.tomb[f] {
				flags = meta.FlagTombstoned
			}
			if err := files.Put(k, oldFileEntry(o.refs[f], flags, o.loc[f], i%7 == 0)); err != nil {
				return err
			}
			if o.refs[f] == 0 {
				if err := zero.Put(k, nil); err != nil {
					return err
				}
			}
			live[o.loc[f].Pack] += o.loc[f].Length
		}
		for id, n := range live {
			if id != "" {
				if err := putPack(packs, id, packRecord{size: 1 << 30, live: n, changed: 1}); err != nil {
					return err
				}
			}
		}
		for l, fs := range o.layers {
			lk, _ := meta.KeyOf(l)
			set, err := meta.NewFileSet(fs)
			if err != nil {
				return err
			}
			if err := tx.Bucket(bktLayerFiles).Put(lk, set.Encode()); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

// check asserts that s answers every FileIndex question as o says.
func (o oldStore) check(t *testing.T, s *Store) {
	t.Helper()
	ctx := context.Background()
	infos, err := s.Files(ctx, o.files)
	if err != nil {
		t.Fatal(err)
	}
	for i, fi := range infos {
		f := o.files[i]
		if !fi.Exists || fi.Refs != o.refs[f] || fi.Tombstoned != o.tomb[f] || fi.Location != o.loc[f] {
			t.Fatalf("file %d: %+v, want refs %d tombstoned %v at %+v", i, fi, o.refs[f], o.tomb[f], o.loc[f])
		}
	}
	for l, want := range o.layers {
		got, err := s.LayerFiles(ctx, l)
		if err != nil || !slices.Equal(got, want) {
			t.Fatalf("LayerFiles(%s) = %v, %v; want %v", l, got, err, want)
		}
		// The same list again is a retry; another list differs.
		refs, err := s.AddLayerRefs(ctx, l, want)
		if err != nil {
			t.Fatalf("AddLayerRefs retry: %v", err)
		}
		for _, r := range refs {
			if r.Refs != o.refs[r.Digest] {
				t.Fatalf("AddLayerRefs retry counted: %+v", r)
			}
		}
		if _, err := s.AddLayerRefs(ctx, l, want[1:]); !errors.Is(err, meta.ErrLayerFilesDiffer) {
			t.Fatalf("AddLayerRefs of another list: %v", err)
		}
	}
	var zero []digest.Digest
	for _, f := range o.files {
		if o.refs[f] == 0 {
			zero = append(zero, f)
		}
	}
	slices.Sort(zero)
	if got, err := s.ZeroFiles(ctx, "", len(o.files)); err != nil || !slices.Equal(got, zero) {
		t.Fatalf("ZeroFiles = %v, %v; want %v", got, err, zero)
	}
}

// checkConverted asserts that every entry and list of s is in the format
// with ordinals, that the ordinal map matches, and that the marker is set.
func checkConverted(t *testing.T, s *Store) {
	t.Helper()
	err := s.db.View(func(tx *bbolt.Tx) error {
		if v := tx.Bucket(bktIdentity).Get(keySchema); !bytes.Equal(v, []byte{schemaOrdinals}) {
			return fmt.Errorf("schema %v", v)
		}
		ords := tx.Bucket(bktOrdinals)
		n := 0
		err := tx.Bucket(bktFiles).ForEach(func(k, v []byte) error {
			n++
			e, ok := decodeFile(v)
			if !ok || v[0]&flagEntryV2 == 0 || e.ord == 0 || !bytes.Equal(ords.Get(ordinalKey(e.ord)), k) {
				return fmt.Errorf("entry %x = %x", k, v)
			}
			return nil
		})
		if err != nil {
			return err
		}
		if m := ords.Stats().KeyN; m != n {
			return fmt.Errorf("%d ordinals for %d entries", m, n)
		}
		return tx.Bucket(bktLayerFiles).ForEach(func(k, v []byte) error {
			if v[0] != layerListV2 {
				return fmt.Errorf("layer list %x = %x", k, v)
			}
			return nil
		})
	})
	if err != nil {
		t.Fatal(err)
	}
}

// TestBoltMigrateOldStore: a store of the old formats opens, is converted,
// and answers as before through the whole file lifecycle.
func TestBoltMigrateOldStore(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "meta.db")
	o := newOldStore(300, 6)
	o.write(t, path)
	s := mustOpen(t, path)
	o.check(t, s)
	checkConverted(t, s)
	s.Close()
	// A converted store opens as it is.
	s = mustOpen(t, path)
	defer s.Close()
	o.check(t, s)

	// Release everything, then GC it all: no entry nor ordinal is left.
	held := map[digest.Digest]bool{}
	for l := range o.layers {
		z, err := s.ReleaseLayerRefs(ctx, l)
		if err != nil {
			t.Fatal(err)
		}
		for _, f := range z {
			if held[f] || o.refs[f] == 0 {
				t.Fatalf("%s zeroed twice, or held no reference", f)
			}
			held[f] = true
		}
	}
	for _, f := range o.files {
		if o.refs[f] > 0 && !held[f] {
			t.Fatalf("%s not zeroed", f)
		}
	}
	zero, err := s.ZeroFiles(ctx, "", len(o.files)+1)
	if err != nil || len(zero) != len(o.files) {
		t.Fatalf("ZeroFiles: %d files, %v", len(zero), err)
	}
	if _, err := s.TombstoneFiles(ctx, zero); err != nil {
		t.Fatal(err)
	}
	if _, err := s.DropFileEntries(ctx, zero); err != nil {
		t.Fatal(err)
	}
	err = s.db.View(func(tx *bbolt.Tx) error {
		if n := tx.Bucket(bktFiles).Stats().KeyN + tx.Bucket(bktOrdinals).Stats().KeyN; n != 0 {
			return fmt.Errorf("%d entries and ordinals left", n)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	packs, err := s.ListPacks(ctx, "", 10)
	if err != nil || len(packs) != 2 || packs[0].Live != 0 || packs[1].Live != 0 {
		t.Fatalf("packs %+v, %v", packs, err)
	}
	// A file added again gets a new ordinal.
	if _, err := s.AddLayerRefs(ctx, digest.FromString("new layer"), o.files[:3]); err != nil {
		t.Fatal(err)
	}
	checkConverted(t, s)
}

// TestBoltMigrateInterrupted: a conversion that stopped after any of its
// transactions left a store that reads as before, and the next open
// finishes it.
func TestBoltMigrateInterrupted(t *testing.T) {
	o := newOldStore(120, 4)
	for stop := 1; ; stop++ {
		path := filepath.Join(t.TempDir(), "meta.db")
		o.write(t, path)
		db, err := openBolt(path, 0)
		if err != nil {
			t.Fatal(err)
		}
		err = db.Update(func(tx *bbolt.Tx) error {
			_, err := tx.CreateBucketIfNotExists(bktOrdinals)
			return err
		})
		if err != nil {
			t.Fatal(err)
		}
		done, err := migrate(db, 25, stop)
		if err != nil {
			t.Fatal(err)
		}
		if done {
			db.Close()
			t.Logf("converted in %d transactions", stop)
			if stop < 4 {
				t.Fatalf("converted in %d transactions: the batches are not bounded", stop)
			}
			return
		}
		// Half converted, the store reads as before.
		o.check(t, &Store{db: db, path: path})
		db.Close()
		s := mustOpen(t, path)
		o.check(t, s)
		checkConverted(t, s)
		s.Close()
	}
}
