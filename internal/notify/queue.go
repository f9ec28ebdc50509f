package notify

import (
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"time"

	bolt "go.etcd.io/bbolt"
)

// ErrQueueLocked means another process holds the queue file.
var ErrQueueLocked = errors.New("notify: the queue file is in use by another process")

// Queue is a bounded, ordered, on-disk queue of encoded events per
// endpoint, in one bbolt file. Items are keyed by a per-endpoint sequence,
// so reading from the first key gives the oldest. An item stays until it is
// removed (after delivery) or pushed out by a full queue, so a restart
// finds everything not yet delivered.
type Queue struct {
	db  *bolt.DB
	max int

	mu     sync.Mutex
	counts map[string]int // items per endpoint, kept beside the file
}

// Item is one queued event.
type Item struct {
	Seq  uint64
	Data []byte
}

// OpenQueue opens (creating it and its directory) the queue file at path;
// each endpoint keeps at most max items.
func OpenQueue(path string, max int) (*Queue, error) {
	if max < 1 {
		return nil, fmt.Errorf("notify: queue bound %d is not positive", max)
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return nil, fmt.Errorf("notify: queue directory: %w", err)
	}
	db, err := bolt.Open(path, 0o600, &bolt.Options{Timeout: 2 * time.Second})
	if errors.Is(err, bolt.ErrTimeout) {
		return nil, fmt.Errorf("%w: %s", ErrQueueLocked, path)
	}
	if err != nil {
		return nil, fmt.Errorf("notify: open queue %s: %w", path, err)
	}
	q := &Queue{db: db, max: max, counts: make(map[string]int)}
	err = db.View(func(tx *bolt.Tx) error {
		return tx.ForEach(func(name []byte, b *bolt.Bucket) error {
			q.counts[string(name)] = b.Stats().KeyN
			return nil
		})
	})
	if err != nil {
		db.Close()
		return nil, fmt.Errorf("notify: read queue %s: %w", path, err)
	}
	return q, nil
}

// Close closes the file.
func (q *Queue) Close() error { return q.db.Close() }

// Len returns the items queued for endpoint.
func (q *Queue) Len(endpoint string) int {
	q.mu.Lock()
	defer q.mu.Unlock()
	return q.counts[endpoint]
}

// Append adds items to the end of each endpoint's queue, in one
// transaction, and returns per endpoint how many of the oldest items were
// dropped to keep the bound.
func (q *Queue) Append(items map[string][][]byte) (dropped map[string]int, err error) {
	q.mu.Lock()
	defer q.mu.Unlock()
	dropped = make(map[string]int)
	counts := make(map[string]int, len(items))
	err = q.db.Update(func(tx *bolt.Tx) error {
		for ep, datas := range items {
			b, err := tx.CreateBucketIfNotExists([]byte(ep))
			if err != nil {
				return err
			}
			n := q.counts[ep]
			for _, data := range datas {
				seq, err := b.NextSequence()
				if err != nil {
					return err
				}
				if err := b.Put(key(seq), data); err != nil {
					return err
				}
				n++
			}
			// From the first key each time: after a Delete, a cursor's
			// Next skips an item.
			c := b.Cursor()
			for n > q.max {
				if k, _ := c.First(); k == nil {
					break
				}
				if err := c.Delete(); err != nil {
					return err
				}
				n--
				dropped[ep]++
			}
			counts[ep] = n
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("notify: queue append: %w", err)
	}
	for ep, n := range counts {
		q.counts[ep] = n
	}
	return dropped, nil
}

// Peek returns up to n of endpoint's oldest items, oldest first.
func (q *Queue) Peek(endpoint string, n int) ([]Item, error) {
	var out []Item
	err := q.db.View(func(tx *bolt.Tx) error {
		b := tx.Bucket([]byte(endpoint))
		if b == nil {
			return nil
		}
		c := b.Cursor()
		for k, v := c.First(); k != nil && len(out) < n; k, v = c.Next() {
			out = append(out, Item{Seq: binary.BigEndian.Uint64(k), Data: append([]byte(nil), v...)})
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("notify: queue read: %w", err)
	}
	return out, nil
}

// Remove deletes endpoint's items with the given sequence numbers; items
// already gone (pushed out by a full queue) are skipped.
func (q *Queue) Remove(endpoint string, seqs []uint64) error {
	q.mu.Lock()
	defer q.mu.Unlock()
	removed := 0
	err := q.db.Update(func(tx *bolt.Tx) error {
		removed = 0
		b := tx.Bucket([]byte(endpoint))
		if b == nil {
			return nil
		}
		for _, s := range seqs {
			k := key(s)
			if b.Get(k) == nil {
				continue
			}
			if err := b.Delete(k); err != nil {
				return err
			}
			removed++
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("notify: queue remove: %w", err)
	}
	q.counts[endpoint] -= removed
	return nil
}

// key encodes a sequence so that byte order is numeric order.
func key(seq uint64) []byte {
	return binary.BigEndian.AppendUint64(nil, seq)
}
