package metatest

import (
	"context"
	"errors"
	"slices"
	"strings"
	"testing"

	"github.com/opencontainers/go-digest"

	"github.com/cairn-registry/cairn/internal/meta"
)

// ReleaseLayersInconsistent: a layer whose release finds an inconsistent
// index is left whole and named in the error; the layers beside it are
// released. dropEntry removes a file's entry behind the store's back (each
// store knows its own layout).
func ReleaseLayersInconsistent(t *testing.T, s meta.Store, dropEntry func(t *testing.T, d digest.Digest)) {
	ctx := context.Background()
	a, b, c := Digest("a"), Digest("b"), Digest("c")
	l1, bad, l3 := Digest("l1"), Digest("bad"), Digest("l3")
	for _, l := range []struct {
		layer digest.Digest
		files []digest.Digest
	}{{l1, []digest.Digest{a}}, {bad, []digest.Digest{a, b}}, {l3, []digest.Digest{c}}} {
		if _, err := s.AddLayerRefs(ctx, l.layer, l.files); err != nil {
			t.Fatal(err)
		}
		if err := s.PutLayer(ctx, l.layer, nil, meta.StateDeduplicated); err != nil {
			t.Fatal(err)
		}
	}
	dropEntry(t, b)
	zeroed, err := s.ReleaseLayers(ctx, []digest.Digest{l1, bad, l3})
	if !errors.Is(err, meta.ErrInvalidRelease) || !strings.Contains(err.Error(), bad.String()) {
		t.Fatalf("err = %v, want ErrInvalidRelease naming %s", err, bad)
	}
	if !slices.Equal(zeroed, []digest.Digest{c}) {
		t.Fatalf("zeroed %v, want [c]", zeroed)
	}
	if held, err := s.LayerFiles(ctx, bad); err != nil || len(held) != 2 {
		t.Fatalf("the inconsistent layer holds %v, %v; want a and b", held, err)
	}
	if _, _, err := s.GetLayer(ctx, bad); err != nil {
		t.Fatalf("recipe of the inconsistent layer: %v", err)
	}
	fi, err := s.Files(ctx, []digest.Digest{a, c})
	if err != nil || fi[0].Refs != 1 || fi[1].Exists && fi[1].Refs != 0 {
		t.Fatalf("files after the release: %+v, %v", fi, err)
	}
	for _, l := range []digest.Digest{l1, l3} {
		if _, _, err := s.GetLayer(ctx, l); !errors.Is(err, meta.ErrNotFound) {
			t.Fatalf("recipe of released %s: %v", l, err)
		}
	}
}

// BenchAddLayerRefs adds and releases one layer of 50k files, half of them
// already known, per iteration, and reports files/s.
func BenchAddLayerRefs(b *testing.B, s meta.Store) {
	ctx := context.Background()
	const n = 50_000
	files := Digests("bench", n)
	if _, err := s.AddLayerRefs(ctx, Digest("base"), files[:n/2]); err != nil {
		b.Fatal(err)
	}
	layer := Digest("layer")
	for b.Loop() {
		if _, err := s.AddLayerRefs(ctx, layer, files); err != nil {
			b.Fatal(err)
		}
		if _, err := s.ReleaseLayerRefs(ctx, layer); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(b.N*n)/b.Elapsed().Seconds(), "files/s")
}
