package bolt

import (
	"context"
	"encoding/binary"
	"fmt"
	"time"

	"go.etcd.io/bbolt"

	"github.com/cairn-registry/cairn/internal/meta"
)

// A lease record is the expiry in unix milliseconds, then the holder. It is held
// while the time is at or before the expiry, as Redis keeps a key. Expired
// records stay until taken again or released: a few bytes per layer a crashed
// node left, and bolt is one node's store.

// TryLease implements Leases.
func (s *Store) TryLease(ctx context.Context, name, holder string, ttl time.Duration) (bool, error) {
	ms, err := meta.LeaseMillis(name, holder, ttl)
	if err != nil {
		return false, err
	}
	var ok bool
	err = s.update(ctx, func(tx *bbolt.Tx) error {
		b := tx.Bucket(bktLeases)
		// The clock is read under the write lock: a caller that waited for
		// the lock does not decide with a stale time.
		now := time.Now().UnixMilli()
		if v := b.Get([]byte(name)); len(v) >= 8 && string(v[8:]) != holder && now <= int64(binary.BigEndian.Uint64(v)) {
			ok = false
			return nil
		}
		ok = true
		v := make([]byte, 8, 8+len(holder))
		binary.BigEndian.PutUint64(v, uint64(now+ms))
		return b.Put([]byte(name), append(v, holder...))
	})
	if err != nil {
		return false, fmt.Errorf("meta: try lease %q: %w", name, err)
	}
	return ok, nil
}

// ReleaseLease implements Leases.
func (s *Store) ReleaseLease(ctx context.Context, name, holder string) error {
	if _, err := meta.LeaseMillis(name, holder, time.Millisecond); err != nil {
		return err
	}
	err := s.update(ctx, func(tx *bbolt.Tx) error {
		b := tx.Bucket(bktLeases)
		if v := b.Get([]byte(name)); len(v) >= 8 && string(v[8:]) == holder {
			return b.Delete([]byte(name))
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("meta: release lease %q: %w", name, err)
	}
	return nil
}
