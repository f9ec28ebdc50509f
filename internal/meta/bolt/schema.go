package bolt

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"slices"

	"go.etcd.io/bbolt"

	"github.com/cairn-registry/cairn/internal/meta"
)

// File ordinals and the schema they came with.
//
// Each file entry carries an ordinal, given once, when the entry is made
// (the files bucket's sequence, so never given twice), and bktOrdinals maps
// it back to the file key. A layer's file list (bktLayerFiles) is
// layerListV2 followed by its files' ordinals, ascending, as uvarint
// deltas: a byte or two per file where the key took 33. An ordinal leaves
// the map with its entry (deleteFileTx), which only happens to a tombstoned
// entry, whose refs are 0: no list names it then, and a file added again
// gets a new ordinal.
//
// Stores written before ordinals (no keySchema in bktIdentity) hold the
// old entry format (files.go) and layer lists of keys
// (FileSet.Encode). Open converts them (migrate) in transactions of a
// bounded size, then writes keySchema. The conversion is not atomic, and
// need not be: both formats read everywhere (the first byte of an entry
// or list tells which), so a crash half-way leaves a store that works and
// that the next open finishes converting, skipping what is converted
// already. A list naming a file with no entry (an inconsistent index)
// stays in the old format.

// layerListV2 begins a layer list of ordinals. A list of keys begins with
// the uvarint length of its first key, 32 or more, never 0.
const layerListV2 byte = 0

var keySchema = []byte("schema")

// schemaOrdinals is the keySchema value of stores with file ordinals.
const schemaOrdinals byte = 2

// migrateBatch bounds the entries, or the files of the layer lists, one
// conversion transaction rewrites: bolt holds a transaction's dirty pages
// in memory until it commits.
const migrateBatch = 10_000

func ordinalKey(ord uint64) []byte { return binary.BigEndian.AppendUint64(nil, ord) }

// ensureOrdinal gives e, the entry of file key k, an ordinal if it has none,
// and maps it to k. The caller writes e.
func ensureOrdinal(files, ords *bbolt.Bucket, k []byte, e *fileEntry) error {
	if e.ord != 0 {
		return nil
	}
	ord, err := files.NextSequence()
	if err != nil {
		return err
	}
	if err := ords.Put(ordinalKey(ord), k); err != nil {
		return err
	}
	e.ord = ord
	return nil
}

// dropOrdinal removes ordinal ord of file key k from the map, if it is k's.
func dropOrdinal(ords *bbolt.Bucket, k []byte, ord uint64) error {
	if ord == 0 {
		return nil
	}
	ok := ordinalKey(ord)
	if !bytes.Equal(ords.Get(ok), k) {
		return nil
	}
	return ords.Delete(ok)
}

// encodeOrdinals is a layer list of the distinct, ascending ordinals.
func encodeOrdinals(list []uint64) []byte {
	out := make([]byte, 1, 1+2*len(list))
	out[0] = layerListV2
	prev := uint64(0)
	for _, o := range list {
		out = binary.AppendUvarint(out, o-prev)
		prev = o
	}
	return out
}

// layerKeys returns the file keys of layer list v, in either format, copied
// out of the mmap (they are used as keys of writes that rewrite pages). A
// list of ordinals gives them in ordinal order, a list of keys in key order.
func layerKeys(ords *bbolt.Bucket, v []byte) ([][]byte, error) {
	var buf []byte
	var ends []int
	if len(v) > 0 && v[0] == layerListV2 {
		ord := uint64(0)
		for rest := v[1:]; len(rest) > 0; {
			d, n := binary.Uvarint(rest)
			if n <= 0 || d == 0 {
				return nil, fmt.Errorf("%w: a layer file list is damaged", meta.ErrCorrupt)
			}
			rest = rest[n:]
			ord += d
			k := ords.Get(ordinalKey(ord))
			if k == nil {
				return nil, fmt.Errorf("%w: a layer file list names file ordinal %d, which has no file", meta.ErrCorrupt, ord)
			}
			buf = append(buf, k...)
			ends = append(ends, len(buf))
		}
	} else {
		err := meta.EachKey(v, func(k []byte) error {
			buf = append(buf, k...)
			ends = append(ends, len(buf))
			return nil
		})
		if err != nil {
			return nil, err
		}
	}
	keys := make([][]byte, len(ends))
	start := 0
	for i, end := range ends {
		keys[i] = buf[start:end:end]
		start = end
	}
	return keys, nil
}

// migrate converts a store written before ordinals (see the top of this
// file), unless keySchema says it is converted. It stops, reporting false,
// after maxTx transactions (0: no limit), which is how a test interrupts it.
func migrate(db *bbolt.DB, batch, maxTx int) (done bool, err error) {
	var converted bool
	if err := db.View(func(tx *bbolt.Tx) error {
		v := tx.Bucket(bktIdentity).Get(keySchema)
		converted = len(v) == 1 && v[0] >= schemaOrdinals
		return nil
	}); err != nil || converted {
		return converted, err
	}
	txs := 0
	run := func(step func(tx *bbolt.Tx) (more bool, err error)) (bool, error) {
		for more := true; more; {
			if maxTx > 0 && txs >= maxTx {
				return false, nil
			}
			txs++
			err := db.Update(func(tx *bbolt.Tx) error {
				var err error
				more, err = step(tx)
				return err
			})
			if err != nil {
				return false, err
			}
		}
		return true, nil
	}
	// Entries first: a list converts only once its files have ordinals.
	var after []byte
	ok, err := run(func(tx *bbolt.Tx) (bool, error) {
		var more bool
		more, after, err = migrateFiles(tx, after, batch)
		return more, err
	})
	if err != nil || !ok {
		return false, err
	}
	after = nil
	ok, err = run(func(tx *bbolt.Tx) (bool, error) {
		var more bool
		more, after, err = migrateLayers(tx, after, batch)
		return more, err
	})
	if err != nil || !ok {
		return false, err
	}
	ok, err = run(func(tx *bbolt.Tx) (bool, error) {
		return false, tx.Bucket(bktIdentity).Put(keySchema, []byte{schemaOrdinals})
	})
	return ok, err
}

// seekAfter positions c at the first key after `after` (nil: the first).
func seekAfter(c *bbolt.Cursor, after []byte) (k, v []byte) {
	if after == nil {
		return c.First()
	}
	k, v = c.Seek(after)
	if bytes.Equal(k, after) {
		k, v = c.Next()
	}
	return k, v
}

// migrateFiles rewrites up to batch file entries after key `after` that
// are in the old format or have no ordinal, and reports whether any may be
// left and the last key it looked at. An entry too damaged to read is left
// as it is: it reads as no entry in either format.
func migrateFiles(tx *bbolt.Tx, after []byte, batch int) (more bool, last []byte, err error) {
	files, ords := tx.Bucket(bktFiles), tx.Bucket(bktOrdinals)
	type todo struct {
		k []byte
		e fileEntry
	}
	var work []todo
	c := files.Cursor()
	k, v := seekAfter(c, after)
	for ; k != nil && len(work) < batch; k, v = c.Next() {
		last = k
		if e, ok := decodeFile(v); ok && (v[0]&flagEntryV2 == 0 || e.ord == 0) {
			work = append(work, todo{bytes.Clone(k), e})
		}
	}
	more, last = k != nil, bytes.Clone(last)
	// Written after the walk: a cursor does not survive writes to its bucket.
	ords.FillPercent = 1.0
	for _, w := range work {
		if err := ensureOrdinal(files, ords, w.k, &w.e); err != nil {
			return false, nil, err
		}
		if err := putFile(files, w.k, w.e); err != nil {
			return false, nil, err
		}
	}
	return more, last, nil
}

// migrateLayers rewrites layer lists of keys after key `after` as lists of
// ordinals, up to about batch files' worth, and reports whether any may be
// left and the last key it looked at.
func migrateLayers(tx *bbolt.Tx, after []byte, batch int) (more bool, last []byte, err error) {
	layers, files := tx.Bucket(bktLayerFiles), tx.Bucket(bktFiles)
	type todo struct{ k, v []byte }
	var work []todo
	n := 0
	c := layers.Cursor()
	k, v := seekAfter(c, after)
	for ; k != nil && n < batch; k, v = c.Next() {
		last = k
		if len(v) == 0 || v[0] == layerListV2 {
			continue
		}
		var list []uint64
		whole := true
		err := meta.EachKey(v, func(fk []byte) error {
			e, ok := getFile(files, fk)
			whole = whole && ok && e.ord != 0
			list = append(list, e.ord)
			return nil
		})
		if err != nil || !whole {
			// Damaged, or names a file without an entry: the list of keys
			// still says which files the layer holds.
			continue
		}
		n += max(len(list), 1)
		slices.Sort(list)
		work = append(work, todo{bytes.Clone(k), encodeOrdinals(list)})
	}
	more, last = k != nil, bytes.Clone(last)
	for _, w := range work {
		if err := layers.Put(w.k, w.v); err != nil {
			return false, nil, err
		}
	}
	return more, last, nil
}
