package bolt

import (
	"context"
	"errors"
	"fmt"

	"github.com/opencontainers/go-digest"
	"go.etcd.io/bbolt"

	"github.com/cairn-registry/cairn/internal/meta"
)

// maxTxWork bounds the entries one bulk transaction changes: bolt keeps a
// transaction's dirty pages in memory until it commits, and a few hundred layers of
// 50k files each would hold much of the file index there.
const maxTxWork = 1 << 16

// bulk runs step(tx, i) for each i < n in as few transactions as keep each under
// maxTxWork (a step reports the entries it changed) and returns how many steps
// committed. A step writes its outcome to slot i of the caller's results, so a
// transaction that fails, or runs again, leaves nothing stale behind.
func (s *Store) bulk(ctx context.Context, n int, step func(tx *bbolt.Tx, i int) (work int, err error)) (int, error) {
	done := 0
	for done < n {
		end := done
		err := s.update(ctx, func(tx *bbolt.Tx) error {
			end = done
			for work := 0; end < n && work < maxTxWork; end++ {
				w, err := step(tx, end)
				if err != nil {
					return err
				}
				work += max(w, 1)
			}
			return nil
		})
		if err != nil {
			return done, err
		}
		done = end
	}
	return done, nil
}

// ReleaseLayers implements Bulk.
func (s *Store) ReleaseLayers(ctx context.Context, layers []digest.Digest) ([]digest.Digest, error) {
	keys, err := meta.KeysOf(layers)
	if err != nil {
		return nil, err
	}
	zeroed := make([][]digest.Digest, len(keys))
	bad := make([]error, len(keys))
	done, err := s.bulk(ctx, len(keys), func(tx *bbolt.Tx, i int) (int, error) {
		z, n, err := releaseTx(tx, keys[i])
		zeroed[i], bad[i] = z, nil
		if errors.Is(err, meta.ErrInvalidRelease) {
			// releaseTx changed nothing: the other layers go on.
			bad[i] = fmt.Errorf("%s: %w", layers[i], err)
			return 1, nil
		}
		if err != nil {
			return 0, err
		}
		return n + 1, deleteRecipeTx(tx, keys[i])
	})
	var out []digest.Digest
	for _, z := range zeroed[:done] {
		out = append(out, z...)
	}
	errs := bad[:done]
	if err != nil {
		errs = append(errs, err)
	}
	if err := errors.Join(errs...); err != nil {
		return out, fmt.Errorf("meta: release layers: %w", err)
	}
	return out, nil
}

// TombstoneFiles implements Bulk.
func (s *Store) TombstoneFiles(ctx context.Context, files []digest.Digest) ([]digest.Digest, error) {
	keys, err := meta.KeysOf(files)
	if err != nil {
		return nil, err
	}
	ok := make([]bool, len(keys))
	done, err := s.bulk(ctx, len(keys), func(tx *bbolt.Tx, i int) (int, error) {
		var err error
		ok[i], err = tombstoneTx(tx.Bucket(bktFiles), keys[i])
		return 1, err
	})
	out := meta.Pick(files[:done], func(i int) bool { return ok[i] })
	if err != nil {
		return out, fmt.Errorf("meta: tombstone files: %w", err)
	}
	return out, nil
}

// DropFileEntries implements Bulk.
func (s *Store) DropFileEntries(ctx context.Context, files []digest.Digest) ([]digest.Digest, error) {
	keys, err := meta.KeysOf(files)
	if err != nil {
		return nil, err
	}
	revived := make([]bool, len(keys))
	done, err := s.bulk(ctx, len(keys), func(tx *bbolt.Tx, i int) (int, error) {
		var err error
		revived[i], err = deleteFileTx(tx, keys[i], true)
		return 1, err
	})
	out := meta.Pick(files[:done], func(i int) bool { return revived[i] })
	if err != nil {
		return out, fmt.Errorf("meta: delete files: %w", err)
	}
	return out, nil
}
