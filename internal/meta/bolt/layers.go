package bolt

import (
	"context"
	"fmt"

	"github.com/opencontainers/go-digest"
	"go.etcd.io/bbolt"

	"github.com/cairn-registry/cairn/internal/meta"
)

func stateKey(st meta.LayerState, k []byte) []byte {
	return append([]byte{byte(st)}, k...)
}

// setState moves layer key k from state old (0: none) to st in the state index.
func setState(tx *bbolt.Tx, k []byte, old, st meta.LayerState) error {
	idx, cnt := tx.Bucket(bktByState), tx.Bucket(bktLayerCount)
	if old == st {
		return nil
	}
	if old != 0 {
		if err := idx.Delete(stateKey(old, k)); err != nil {
			return err
		}
		if err := putInt(cnt, []byte{byte(old)}, getInt(cnt, []byte{byte(old)})-1); err != nil {
			return err
		}
	}
	if st != 0 {
		if err := idx.Put(stateKey(st, k), nil); err != nil {
			return err
		}
		if err := putInt(cnt, []byte{byte(st)}, getInt(cnt, []byte{byte(st)})+1); err != nil {
			return err
		}
	}
	return nil
}

// oldState is the state (0: none) and summary of layer key k.
func oldState(b *bbolt.Bucket, k []byte) (meta.LayerState, []byte) {
	return meta.SplitLayerValue(b.Get(k))
}

// PutLayer implements Layers.
func (s *Store) PutLayer(ctx context.Context, layer digest.Digest, summary []byte, state meta.LayerState) error {
	k, err := meta.CheckedLayerKey(layer, state)
	if err != nil {
		return err
	}
	err = s.update(ctx, func(tx *bbolt.Tx) error {
		b := tx.Bucket(bktRecipes)
		old, _ := oldState(b, k)
		if err := b.Put(k, meta.LayerValue(state, summary)); err != nil {
			return err
		}
		return setState(tx, k, old, state)
	})
	if err != nil {
		return fmt.Errorf("meta: put layer %s: %w", layer, err)
	}
	return nil
}

// SetLayerState implements Layers.
func (s *Store) SetLayerState(ctx context.Context, layer digest.Digest, state meta.LayerState) error {
	k, err := meta.CheckedLayerKey(layer, state)
	if err != nil {
		return err
	}
	err = s.update(ctx, func(tx *bbolt.Tx) error {
		b := tx.Bucket(bktRecipes)
		old, recipe := oldState(b, k)
		if old == 0 {
			return meta.ErrNotFound
		}
		if err := b.Put(k, meta.LayerValue(state, recipe)); err != nil {
			return err
		}
		return setState(tx, k, old, state)
	})
	if err != nil {
		return fmt.Errorf("meta: set layer state %s: %w", layer, err)
	}
	return nil
}

// GetLayer implements Layers.
func (s *Store) GetLayer(ctx context.Context, layer digest.Digest) ([]byte, meta.LayerState, error) {
	k, err := meta.KeyOf(layer)
	if err != nil {
		return nil, 0, err
	}
	var (
		recipe []byte
		state  meta.LayerState
	)
	err = s.view(ctx, func(tx *bbolt.Tx) error {
		st, r := oldState(tx.Bucket(bktRecipes), k)
		if st == 0 {
			return meta.ErrNotFound
		}
		state, recipe = st, append([]byte(nil), r...) // r is only valid inside the tx
		return nil
	})
	if err != nil {
		return nil, 0, fmt.Errorf("meta: get layer %s: %w", layer, err)
	}
	return recipe, state, nil
}

// DeleteLayer implements Layers.
func (s *Store) DeleteLayer(ctx context.Context, layer digest.Digest) error {
	k, err := meta.KeyOf(layer)
	if err != nil {
		return err
	}
	err = s.update(ctx, func(tx *bbolt.Tx) error { return deleteRecipeTx(tx, k) })
	if err != nil {
		return fmt.Errorf("meta: delete layer %s: %w", layer, err)
	}
	return nil
}

// deleteRecipeTx is DeleteLayer of layer key k.
func deleteRecipeTx(tx *bbolt.Tx, k []byte) error {
	b := tx.Bucket(bktRecipes)
	old, _ := oldState(b, k)
	if old == 0 {
		return nil
	}
	if err := b.Delete(k); err != nil {
		return err
	}
	return setState(tx, k, old, 0)
}

// ListLayers implements Layers.
func (s *Store) ListLayers(ctx context.Context, state meta.LayerState, after digest.Digest, limit int) ([]digest.Digest, error) {
	if err := meta.CheckState(state); err != nil {
		return nil, err
	}
	var out []digest.Digest
	err := s.view(ctx, func(tx *bbolt.Tx) error {
		var err error
		out, err = page(tx.Bucket(bktByState).Cursor(), []byte{byte(state)}, after, limit)
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("meta: list layers: %w", err)
	}
	return out, nil
}

// LayerCounts implements Layers.
func (s *Store) LayerCounts(ctx context.Context) (map[meta.LayerState]int64, error) {
	out := make(map[meta.LayerState]int64, len(meta.States))
	err := s.view(ctx, func(tx *bbolt.Tx) error {
		cnt := tx.Bucket(bktLayerCount)
		for _, st := range meta.States {
			out[st] = getInt(cnt, []byte{byte(st)})
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("meta: layer counts: %w", err)
	}
	return out, nil
}

// SetImageLayers implements ImageMap.
func (s *Store) SetImageLayers(ctx context.Context, manifest digest.Digest, layers []digest.Digest) error {
	k, v, err := meta.ImageRecord(manifest, layers)
	if err != nil {
		return err
	}
	err = s.update(ctx, func(tx *bbolt.Tx) error {
		return tx.Bucket(bktImages).Put(k, []byte(v))
	})
	if err != nil {
		return fmt.Errorf("meta: set image layers %s: %w", manifest, err)
	}
	return nil
}

// ImageLayers implements ImageMap.
func (s *Store) ImageLayers(ctx context.Context, manifest digest.Digest) ([]digest.Digest, error) {
	k, err := meta.KeyOf(manifest)
	if err != nil {
		return nil, err
	}
	var out []digest.Digest
	err = s.view(ctx, func(tx *bbolt.Tx) error {
		v := tx.Bucket(bktImages).Get(k)
		if v == nil {
			return meta.ErrNotFound
		}
		out = meta.DecodeImageLayers(string(v))
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("meta: image layers %s: %w", manifest, err)
	}
	return out, nil
}

// DeleteImage implements ImageMap.
func (s *Store) DeleteImage(ctx context.Context, manifest digest.Digest) error {
	k, err := meta.KeyOf(manifest)
	if err != nil {
		return err
	}
	err = s.update(ctx, func(tx *bbolt.Tx) error { return tx.Bucket(bktImages).Delete(k) })
	if err != nil {
		return fmt.Errorf("meta: delete image %s: %w", manifest, err)
	}
	return nil
}

// AddStat implements Stats.
func (s *Store) AddStat(ctx context.Context, name string, delta int64) error {
	if err := meta.CheckStatName(name); err != nil {
		return err
	}
	err := s.update(ctx, func(tx *bbolt.Tx) error {
		b := tx.Bucket(bktStats)
		return putInt(b, []byte(name), getInt(b, []byte(name))+delta)
	})
	if err != nil {
		return fmt.Errorf("meta: add stat %s: %w", name, err)
	}
	return nil
}

// Stats implements Stats.
func (s *Store) Stats(ctx context.Context) (map[string]int64, error) {
	out := map[string]int64{}
	err := s.view(ctx, func(tx *bbolt.Tx) error {
		b := tx.Bucket(bktStats)
		return b.ForEach(func(k, _ []byte) error {
			out[string(k)] = getInt(b, k)
			return nil
		})
	})
	if err != nil {
		return nil, fmt.Errorf("meta: stats: %w", err)
	}
	return out, nil
}
