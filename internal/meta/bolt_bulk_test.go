package meta

import (
	"context"
	"errors"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/opencontainers/go-digest"
	bolt "go.etcd.io/bbolt"
)

// TestBoltReleaseLayersInconsistent: a layer whose release finds an inconsistent
// index is left whole and named in the error; the layers around it, in the same
// transaction, are released.
func TestBoltReleaseLayersInconsistent(t *testing.T) {
	ctx := context.Background()
	s, err := Open(filepath.Join(t.TempDir(), "meta.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	a, b, c := digest.FromString("a"), digest.FromString("b"), digest.FromString("c")
	l1, bad, l3 := digest.FromString("l1"), digest.FromString("bad"), digest.FromString("l3")
	for _, l := range []struct {
		layer digest.Digest
		files []digest.Digest
	}{{l1, []digest.Digest{a}}, {bad, []digest.Digest{a, b}}, {l3, []digest.Digest{c}}} {
		if _, err := s.AddLayerRefs(ctx, l.layer, l.files); err != nil {
			t.Fatal(err)
		}
		if err := s.PutRecipe(ctx, l.layer, nil, StateDeduplicated); err != nil {
			t.Fatal(err)
		}
	}
	err = s.db.Update(func(tx *bolt.Tx) error {
		k, err := keyOf(b)
		if err != nil {
			return err
		}
		return tx.Bucket(bktFiles).Delete(k)
	})
	if err != nil {
		t.Fatal(err)
	}
	zeroed, err := s.ReleaseLayers(ctx, []digest.Digest{l1, bad, l3})
	if !errors.Is(err, ErrInvalidRelease) || !strings.Contains(err.Error(), bad.String()) {
		t.Fatalf("err = %v, want ErrInvalidRelease naming %s", err, bad)
	}
	if !slices.Equal(zeroed, []digest.Digest{c}) {
		t.Fatalf("zeroed %v, want [c]", zeroed)
	}
	if held, err := s.LayerFiles(ctx, bad); err != nil || len(held) != 2 {
		t.Fatalf("the inconsistent layer holds %v, %v; want a and b", held, err)
	}
	if _, _, err := s.GetRecipe(ctx, bad); err != nil {
		t.Fatalf("recipe of the inconsistent layer: %v", err)
	}
	fi, err := s.Files(ctx, []digest.Digest{a, c})
	if err != nil || fi[0].Refs != 1 || fi[1].Exists && fi[1].Refs != 0 {
		t.Fatalf("files after the release: %+v, %v", fi, err)
	}
	for _, l := range []digest.Digest{l1, l3} {
		if _, _, err := s.GetRecipe(ctx, l); !errors.Is(err, ErrNotFound) {
			t.Fatalf("recipe of released %s: %v", l, err)
		}
	}
}
