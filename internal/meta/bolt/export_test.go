package bolt

import (
	"encoding/binary"

	"github.com/opencontainers/go-digest"
	"go.etcd.io/bbolt"

	"github.com/cairn-registry/cairn/internal/meta"
)

// DropFileEntry deletes d's file entry behind the store's back, to make
// its index inconsistent in tests.
func DropFileEntry(s *Store, d digest.Digest) error {
	return s.db.Update(func(tx *bbolt.Tx) error {
		k, err := meta.KeyOf(d)
		if err != nil {
			return err
		}
		return tx.Bucket(bktFiles).Delete(k)
	})
}

// PutOldFileEntry writes d's file entry as stores before packs did: refs
// and flags, no location.
func PutOldFileEntry(s *Store, d digest.Digest, refs int64) error {
	return s.db.Update(func(tx *bbolt.Tx) error {
		k, err := meta.KeyOf(d)
		if err != nil {
			return err
		}
		var v [9]byte
		binary.BigEndian.PutUint64(v[:], uint64(refs))
		return tx.Bucket(bktFiles).Put(k, v[:])
	})
}
