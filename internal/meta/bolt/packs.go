package bolt

import (
	"bytes"
	"context"
	"encoding/binary"
	"fmt"
	"time"

	"go.etcd.io/bbolt"

	"github.com/cairn-registry/cairn/internal/meta"
)

// A pack record is size(8) live(8) changed(8, unix µs) flags(1), under the
// pack id in bktPacks. Live is kept in step with the file entries' locations
// by every transaction that changes one, so it never needs a recount.

const packTombstoned byte = 1

type packRecord struct {
	size, live, changed int64
	flags               byte
}

func getPack(b *bbolt.Bucket, id string) (packRecord, bool) {
	v := b.Get([]byte(id))
	if len(v) != 25 {
		return packRecord{}, false
	}
	return packRecord{
		size:    int64(binary.BigEndian.Uint64(v)),
		live:    int64(binary.BigEndian.Uint64(v[8:])),
		changed: int64(binary.BigEndian.Uint64(v[16:])),
		flags:   v[24],
	}, true
}

func putPack(b *bbolt.Bucket, id string, p packRecord) error {
	buf := make([]byte, 25)
	binary.BigEndian.PutUint64(buf, uint64(p.size))
	binary.BigEndian.PutUint64(buf[8:], uint64(p.live))
	binary.BigEndian.PutUint64(buf[16:], uint64(p.changed))
	buf[24] = p.flags
	return b.Put([]byte(id), buf)
}

func (p packRecord) info(id string) meta.PackInfo {
	return meta.PackInfo{
		ID: id, Size: p.size, Live: p.live,
		Changed:    time.UnixMicro(p.changed),
		Tombstoned: p.flags&packTombstoned != 0,
	}
}

// nowMicros is the store's clock; callers read it inside the write
// transaction, so one that waited for the lock does not record a stale time.
func nowMicros() int64 { return time.Now().UnixMicro() }

// leavePack takes a file at loc out of its pack's Live. A pack without a
// record cannot hold a located file (PlaceFiles needs one and DeletePack needs
// Live 0), so none is left alone rather than made up.
func leavePack(b *bbolt.Bucket, loc meta.Location, now int64) error {
	if loc.IsZero() {
		return nil
	}
	p, ok := getPack(b, loc.Pack)
	if !ok {
		return nil
	}
	p.live -= loc.Length
	p.changed = now
	return putPack(b, loc.Pack, p)
}

// BeginPack implements Packs.
func (s *Store) BeginPack(ctx context.Context, id string) error {
	if err := meta.CheckPackID(id); err != nil {
		return err
	}
	err := s.update(ctx, func(tx *bbolt.Tx) error {
		b := tx.Bucket(bktPacks)
		if _, ok := getPack(b, id); ok {
			return nil
		}
		return putPack(b, id, packRecord{changed: nowMicros()})
	})
	if err != nil {
		return fmt.Errorf("meta: begin pack %s: %w", id, err)
	}
	return nil
}

// PlaceFiles implements Packs.
func (s *Store) PlaceFiles(ctx context.Context, id string, size int64, files []meta.Placement) ([]bool, error) {
	keys, err := meta.CheckPlacements(id, size, files)
	if err != nil {
		return nil, err
	}
	placed := make([]bool, len(files))
	err = s.update(ctx, func(tx *bbolt.Tx) error {
		idx, packs := tx.Bucket(bktFiles), tx.Bucket(bktPacks)
		p, ok := getPack(packs, id)
		if !ok || p.flags&packTombstoned != 0 {
			return meta.ErrPackGone
		}
		p.size = size
		// The target's record is written once, at the end; leavePack writes the
		// records of the packs files move out of, so a file moving within this
		// pack must go through the same copy.
		now := nowMicros()
		for i, f := range files {
			placed[i] = false
			e, ok := getFile(idx, keys[i])
			if !ok || !f.From.IsZero() && e.loc != f.From {
				continue
			}
			placed[i] = true
			to := meta.Location{Pack: id, Offset: f.Offset, Length: f.Length}
			if e.loc == to {
				continue
			}
			if e.loc.Pack == id {
				p.live -= e.loc.Length
				p.changed = now
			} else if err := leavePack(packs, e.loc, now); err != nil {
				return err
			}
			p.live += to.Length
			e.loc = to
			if err := putFile(idx, keys[i], e); err != nil {
				return err
			}
		}
		return putPack(packs, id, p)
	})
	if err != nil {
		return nil, fmt.Errorf("meta: place files in pack %s: %w", id, err)
	}
	return placed, nil
}

// ListPacks implements Packs.
func (s *Store) ListPacks(ctx context.Context, after string, limit int) ([]meta.PackInfo, error) {
	if limit <= 0 {
		return nil, nil
	}
	var out []meta.PackInfo
	err := s.view(ctx, func(tx *bbolt.Tx) error {
		b := tx.Bucket(bktPacks)
		c := b.Cursor()
		k, _ := c.First()
		if after != "" {
			k, _ = c.Seek([]byte(after))
			if bytes.Equal(k, []byte(after)) {
				k, _ = c.Next()
			}
		}
		for ; k != nil && len(out) < limit; k, _ = c.Next() {
			id := string(k)
			if p, ok := getPack(b, id); ok {
				out = append(out, p.info(id))
			}
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("meta: list packs: %w", err)
	}
	return out, nil
}

// TombstonePack implements Packs.
func (s *Store) TombstonePack(ctx context.Context, id string, olderThan time.Duration) (bool, error) {
	if err := meta.CheckPackID(id); err != nil {
		return false, err
	}
	older := meta.OlderThanMicros(olderThan)
	var ok bool
	err := s.update(ctx, func(tx *bbolt.Tx) error {
		b := tx.Bucket(bktPacks)
		p, found := getPack(b, id)
		switch {
		case !found:
			ok = false
		case p.flags&packTombstoned != 0:
			ok = true
		case p.live != 0 || nowMicros()-p.changed < older:
			ok = false
		default:
			ok = true
			p.flags |= packTombstoned
			return putPack(b, id, p)
		}
		return nil
	})
	if err != nil {
		return false, fmt.Errorf("meta: tombstone pack %s: %w", id, err)
	}
	return ok, nil
}

// DeletePack implements Packs.
func (s *Store) DeletePack(ctx context.Context, id string) (bool, error) {
	if err := meta.CheckPackID(id); err != nil {
		return false, err
	}
	ok := true
	err := s.update(ctx, func(tx *bbolt.Tx) error {
		b := tx.Bucket(bktPacks)
		p, found := getPack(b, id)
		if !found {
			ok = true
			return nil
		}
		if ok = p.flags&packTombstoned != 0; !ok {
			return nil
		}
		return b.Delete([]byte(id))
	})
	if err != nil {
		return false, fmt.Errorf("meta: delete pack %s: %w", id, err)
	}
	return ok, nil
}
