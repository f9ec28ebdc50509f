package bolt

import (
	"bytes"
	"context"
	"encoding/binary"
	"fmt"
	"time"

	"github.com/opencontainers/go-digest"
	"go.etcd.io/bbolt"

	"github.com/cairn-registry/cairn/internal/meta"
)

// A client's bucket holds:
//
//	'l' layer key         -> pulls(8) last pull unix nanos(8)
//	't' last(8) layer key -> nil   (time index, oldest first, for eviction)
//	"m"                   -> entries(8) pulls(8) repulls(8)
var (
	pfxLayer = []byte{'l'}
	pfxTime  = []byte{'t'}
	keyMeta  = []byte{'m'}
)

func clientBucketName(client string) []byte { return append([]byte{'c'}, client...) }

func timeKey(t int64, lk []byte) []byte {
	k := make([]byte, 0, 9+len(lk))
	k = append(k, 't')
	k = binary.BigEndian.AppendUint64(k, uint64(t))
	return append(k, lk...)
}

func layerKey(lk []byte) []byte { return append([]byte{'l'}, lk...) }

type clientMeta struct{ entries, pulls, repulls int64 }

func getMeta(b *bbolt.Bucket) clientMeta {
	v := b.Get(keyMeta)
	if len(v) != 24 {
		return clientMeta{}
	}
	return clientMeta{
		entries: int64(binary.BigEndian.Uint64(v)),
		pulls:   int64(binary.BigEndian.Uint64(v[8:])),
		repulls: int64(binary.BigEndian.Uint64(v[16:])),
	}
}

func putMeta(b *bbolt.Bucket, m clientMeta) error {
	v := make([]byte, 0, 24)
	v = binary.BigEndian.AppendUint64(v, uint64(m.entries))
	v = binary.BigEndian.AppendUint64(v, uint64(m.pulls))
	v = binary.BigEndian.AppendUint64(v, uint64(m.repulls))
	return b.Put(keyMeta, v)
}

// RecordPull implements Pulls.
func (s *Store) RecordPull(ctx context.Context, client string, layer digest.Digest, now time.Time) (int64, error) {
	lk, err := meta.KeyOf(layer)
	if err != nil {
		return 0, err
	}
	nowNs := now.UnixNano()
	var prev int64
	err = s.batch(ctx, func(tx *bbolt.Tx) error {
		b, err := tx.Bucket(bktClients).CreateBucketIfNotExists(clientBucketName(client))
		if err != nil {
			return err
		}
		m := getMeta(b)
		prev = 0
		if v := b.Get(layerKey(lk)); len(v) == 16 {
			prev = int64(binary.BigEndian.Uint64(v))
			if err := b.Delete(timeKey(int64(binary.BigEndian.Uint64(v[8:])), lk)); err != nil {
				return err
			}
			m.repulls++
		} else {
			// Evict before inserting so the new entry is never its own victim.
			for m.entries >= int64(s.opts.MaxLayersPerClient) {
				if err := evictOldest(b); err != nil {
					return err
				}
				m.entries--
			}
			m.entries++
		}
		m.pulls++
		v := make([]byte, 0, 16)
		v = binary.BigEndian.AppendUint64(v, uint64(prev+1))
		v = binary.BigEndian.AppendUint64(v, uint64(nowNs))
		if err := b.Put(layerKey(lk), v); err != nil {
			return err
		}
		if err := b.Put(timeKey(nowNs, lk), nil); err != nil {
			return err
		}
		if err := putMeta(b, m); err != nil {
			return err
		}
		return s.bumpPopularity(tx.Bucket(bktPop), lk, nowNs)
	})
	if err != nil {
		return 0, fmt.Errorf("meta: record pull: %w", err)
	}
	return prev, nil
}

func evictOldest(b *bbolt.Bucket) error {
	c := b.Cursor()
	k, _ := c.Seek(pfxTime)
	if k == nil || !bytes.HasPrefix(k, pfxTime) || len(k) < 9 {
		return fmt.Errorf("meta: client time index is inconsistent")
	}
	lk := append([]byte(nil), k[9:]...)
	if err := c.Delete(); err != nil {
		return err
	}
	return b.Delete(layerKey(lk))
}

// bumpPopularity counts one pull in the layer's ring of time buckets.
func (s *Store) bumpPopularity(b *bbolt.Bucket, lk []byte, nowNs int64) error {
	n := s.opts.PopularityBuckets
	slot := nowNs / int64(s.opts.PopularityBucket)
	ring := make([]byte, 16*n)
	if v := b.Get(lk); len(v) == len(ring) {
		copy(ring, v) // a ring of another size (options changed) starts afresh
	}
	pos := int(((slot % int64(n)) + int64(n)) % int64(n))
	e := ring[16*pos : 16*pos+16]
	if int64(binary.BigEndian.Uint64(e)) == slot && binary.BigEndian.Uint64(e[8:]) > 0 {
		binary.BigEndian.PutUint64(e[8:], binary.BigEndian.Uint64(e[8:])+1)
	} else {
		binary.BigEndian.PutUint64(e, uint64(slot))
		binary.BigEndian.PutUint64(e[8:], 1)
	}
	return b.Put(lk, ring)
}

// LayerPulls implements Pulls.
func (s *Store) LayerPulls(ctx context.Context, layer digest.Digest, since time.Time) (int64, error) {
	lk, err := meta.KeyOf(layer)
	if err != nil {
		return 0, err
	}
	from := since.UnixNano() / int64(s.opts.PopularityBucket)
	var total int64
	err = s.view(ctx, func(tx *bbolt.Tx) error {
		total = 0
		v := tx.Bucket(bktPop).Get(lk)
		for i := 0; i+16 <= len(v); i += 16 {
			if int64(binary.BigEndian.Uint64(v[i:])) >= from {
				total += int64(binary.BigEndian.Uint64(v[i+8:]))
			}
		}
		return nil
	})
	if err != nil {
		return 0, fmt.Errorf("meta: layer pulls: %w", err)
	}
	return total, nil
}

// ClientLayers implements Pulls.
func (s *Store) ClientLayers(ctx context.Context, client string) ([]meta.LayerPull, error) {
	var out []meta.LayerPull
	err := s.view(ctx, func(tx *bbolt.Tx) error {
		out = nil
		b := tx.Bucket(bktClients).Bucket(clientBucketName(client))
		if b == nil {
			return nil
		}
		c := b.Cursor()
		// Walk the time index backwards: most recent first.
		k, _ := c.Seek([]byte{'t' + 1})
		if k == nil {
			k, _ = c.Last()
		} else {
			k, _ = c.Prev()
		}
		for ; k != nil && bytes.HasPrefix(k, pfxTime); k, _ = c.Prev() {
			if len(k) < 9 {
				continue
			}
			lk := k[9:]
			v := b.Get(layerKey(lk))
			if len(v) != 16 {
				return fmt.Errorf("meta: client layer index is inconsistent")
			}
			out = append(out, meta.LayerPull{
				Layer: meta.DigestOf(lk),
				Pulls: int64(binary.BigEndian.Uint64(v)),
				Last:  time.Unix(0, int64(binary.BigEndian.Uint64(v[8:]))),
			})
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("meta: client layers: %w", err)
	}
	return out, nil
}

// RepullRatio implements Pulls.
func (s *Store) RepullRatio(ctx context.Context, client string) (float64, error) {
	var m clientMeta
	err := s.view(ctx, func(tx *bbolt.Tx) error {
		if b := tx.Bucket(bktClients).Bucket(clientBucketName(client)); b != nil {
			m = getMeta(b)
		}
		return nil
	})
	if err != nil {
		return 0, fmt.Errorf("meta: repull ratio: %w", err)
	}
	if m.pulls == 0 {
		return 0, nil
	}
	return float64(m.repulls) / float64(m.pulls), nil
}
