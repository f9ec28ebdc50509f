package bolt_test

import (
	"context"
	"path/filepath"
	"testing"
	"time"

	"github.com/cairn-registry/cairn/internal/meta"
	"github.com/cairn-registry/cairn/internal/meta/bolt"
	"github.com/cairn-registry/cairn/internal/meta/metatest"
	"github.com/opencontainers/go-digest"
)

var testOpts = bolt.Options{
	MaxLayersPerClient: metatest.MaxLayersPerClient,
	PopularityBucket:   metatest.PopularityBucket,
	PopularityBuckets:  metatest.PopularityBuckets,
}

func TestBoltConformance(t *testing.T) {
	metatest.Run(t, func(t *testing.T) meta.Store {
		s, err := bolt.OpenWith(filepath.Join(t.TempDir(), "meta.db"), testOpts)
		if err != nil {
			t.Fatal(err)
		}
		return s
	})
}

// TestBoltPersistence checks that every kind of record survives Close and Open.
func TestBoltPersistence(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "meta.db")
	s, err := bolt.OpenWith(path, testOpts)
	if err != nil {
		t.Fatal(err)
	}
	f, l, l2, m := metatest.Digest("f"), metatest.Digest("l"), metatest.Digest("l2"), metatest.Digest("m")
	now := time.Unix(1_700_000_000, 0)
	steps := []error{
		func() error { _, err := s.AddLayerRefs(ctx, l, []digest.Digest{f}); return err }(),
		func() error { _, err := s.AddLayerRefs(ctx, l2, []digest.Digest{f}); return err }(),
		s.PutLayer(ctx, l, []byte("recipe"), meta.StateDeduplicated),
		s.SetImageLayers(ctx, m, []digest.Digest{l}),
		func() error { _, err := s.RecordPull(ctx, "alice", l, now); return err }(),
		s.AddStat(ctx, "hits", 4),
		func() error { _, err := s.TryLease(ctx, "job", "node-a", time.Hour); return err }(),
		s.BeginPack(ctx, "p1"),
		func() error {
			_, err := s.PlaceFiles(ctx, "p1", 100, []meta.Placement{{Digest: f, Offset: 5, Length: 10}})
			return err
		}(),
	}
	for i, err := range steps {
		if err != nil {
			t.Fatalf("step %d: %v", i, err)
		}
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}

	s, err = bolt.OpenWith(path, testOpts)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	want := meta.Location{Pack: "p1", Offset: 5, Length: 10}
	if fi, err := s.Files(ctx, []digest.Digest{f}); err != nil || fi[0].Refs != 2 || fi[0].Location != want {
		t.Errorf("file after reopen = %+v, %v; want 2 refs at %+v", fi, err, want)
	}
	if p, err := s.ListPacks(ctx, "", 10); err != nil || len(p) != 1 || p[0].ID != "p1" || p[0].Size != 100 || p[0].Live != 10 {
		t.Errorf("ListPacks after reopen = %+v, %v", p, err)
	}
	if got, err := s.LayerFiles(ctx, l2); err != nil || len(got) != 1 || got[0] != f {
		t.Errorf("LayerFiles after reopen = %v %v", got, err)
	}
	if r, st, err := s.GetLayer(ctx, l); err != nil || string(r) != "recipe" || st != meta.StateDeduplicated {
		t.Errorf("recipe after reopen = %q %v %v", r, st, err)
	}
	if got, err := s.ListLayers(ctx, meta.StateDeduplicated, "", 10); err != nil || len(got) != 1 || got[0] != l {
		t.Errorf("ListLayers after reopen = %v %v", got, err)
	}
	if got, err := s.ImageLayers(ctx, m); err != nil || len(got) != 1 || got[0] != l {
		t.Errorf("ImageLayers after reopen = %v %v", got, err)
	}
	if prev, err := s.RecordPull(ctx, "alice", l, now.Add(time.Second)); err != nil || prev != 1 {
		t.Errorf("RecordPull after reopen: prev = %d %v, want 1", prev, err)
	}
	if n, err := s.LayerPulls(ctx, l, now); err != nil || n != 2 {
		t.Errorf("LayerPulls after reopen = %d %v, want 2", n, err)
	}
	if st, err := s.Stats(ctx); err != nil || st["hits"] != 4 {
		t.Errorf("Stats after reopen = %v %v", st, err)
	}
	if ok, err := s.TryLease(ctx, "job", "node-b", time.Hour); err != nil || ok {
		t.Errorf("TryLease by another holder after reopen = %v %v, want false (lease kept)", ok, err)
	}
}

// BenchmarkBoltAddLayerRefs: see metatest.BenchAddLayerRefs.
func BenchmarkBoltAddLayerRefs(b *testing.B) {
	s, err := bolt.OpenWith(filepath.Join(b.TempDir(), "meta.db"), testOpts)
	if err != nil {
		b.Fatal(err)
	}
	defer s.Close()
	metatest.BenchAddLayerRefs(b, s)
}
