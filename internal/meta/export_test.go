package meta

import (
	"github.com/opencontainers/go-digest"
	bolt "go.etcd.io/bbolt"
)

// DropFileEntry deletes d's file entry behind the store's back, to make
// its index inconsistent in tests.
func DropFileEntry(s *Bolt, d digest.Digest) error {
	return s.db.Update(func(tx *bolt.Tx) error {
		k, err := keyOf(d)
		if err != nil {
			return err
		}
		return tx.Bucket(bktFiles).Delete(k)
	})
}
