package dedup

import (
	"bytes"
	"context"
	"io"
	"maps"
	"runtime"
	"testing"
	"time"

	"github.com/cairn-registry/cairn/internal/storage/driver/filesystem"
	"github.com/opencontainers/go-digest"
)

func predictOptions(t *testing.T) Options {
	return Options{Predict: true, PreconstructDir: t.TempDir(), PreconstructSize: 64 << 20, PrefetchSize: 64 << 20}
}

// TestPredictWarmsCaches: a manifest GET by a new client rebuilds its
// deduplicated layers into the preconstruct cache and reads its intact ones
// into memory before their GETs; the GETs that follow count as predicted
// hits.
func TestPredictWarmsCaches(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	v := newEnv(t, nil, predictOptions(t))
	ls := sharedLayers(t)
	dd, intact := v.put(ls[0].blob), v.put(ls[1].blob)
	v.process(dd, ModeFull, outDeduplicated)
	v.eng.Start(ctx)

	m := imageManifest(t, false, dd, ls[:2])
	v.eng.ManifestPulled(ctx, "10.0.0.1", parsed(t, digest.FromBytes(m), m))
	eventually(t, "prediction", func() bool {
		return v.eng.disk.Contains(string(dd)) && v.eng.CachedBlob(intact, 0) != nil
	})
	if p, q := v.m.predictions(CachePreconstruct), v.m.predictions(CachePrefetch); p != 1 || q != 1 {
		t.Fatalf("predicted preconstruct %d, prefetch %d; want 1 each", p, q)
	}
	for _, off := range []int64{0, 100, int64(len(ls[1].blob))} {
		rc := v.eng.CachedBlob(intact, off)
		if rc == nil {
			t.Fatalf("CachedBlob at %d: nil", off)
		}
		got, _ := io.ReadAll(rc)
		rc.Close()
		if !bytes.Equal(got, ls[1].blob[off:]) {
			t.Fatalf("CachedBlob at %d: %d bytes differ", off, len(got))
		}
	}
	if rc := v.eng.CachedBlob(intact, int64(len(ls[1].blob))+1); rc != nil {
		t.Fatal("CachedBlob past the end returned a reader")
	}
	if rc := v.eng.CachedBlob(dd, 0); rc != nil {
		t.Fatal("deduplicated layer in the prefetch cache")
	}

	v.eng.BlobPulled(ctx, "10.0.0.1", dd)
	v.eng.BlobPulled(ctx, "10.0.0.1", intact)
	if v.m.lookup(CachePreconstruct+"_predicted/hit") != 1 || v.m.lookup(CachePrefetch+"_predicted/hit") != 1 {
		t.Fatalf("predicted lookups = %v, want one hit in each cache", v.m.snapshot())
	}
	v.wantBlob(ls[0].blob)
	if v.m.lookup(CachePreconstruct+"/hit") != 1 || v.m.lookup(CachePreconstruct+"/miss") != 0 {
		t.Fatalf("GET after prediction: lookups %v, want one preconstruct hit", v.m.snapshot())
	}
	// The pulls were recorded for the client (ULmap).
	eventually(t, "pulls recorded", func() bool {
		pulled, err := v.store.ClientLayers(ctx, "10.0.0.1")
		return err == nil && len(pulled) == 2
	})
	// A layer the client's images do not name is not a predicted pull.
	before := v.m.snapshot()
	v.eng.BlobPulled(ctx, "10.0.0.2", dd)
	if !maps.Equal(v.m.snapshot(), before) {
		t.Fatalf("unpredicted pull counted: %v", v.m.snapshot())
	}
}

// TestPredictTargets: a client that pulled a layer before does not get it
// warmed again, unless it re-pulls often (repull ratio above the bound).
func TestPredictTargets(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name      string
		pulls     int // earlier pulls of the first layer by the client
		wantFirst bool
	}{
		{"new client", 0, true},
		{"pulled once, low repull ratio", 1, false},
		{"pulled three times, repull ratio 2/3", 3, true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			v := newEnv(t, nil, predictOptions(t))
			ls := sharedLayers(t)
			first, second := v.put(ls[0].blob), v.put(ls[2].blob)
			v.process(first, ModeFull, outDeduplicated)
			v.process(second, ModeFull, outDeduplicated)
			for range tc.pulls {
				if _, err := v.store.RecordPull(ctx, "ci", first, time.Now()); err != nil {
					t.Fatal(err)
				}
			}
			v.eng.Start(ctx)
			// Targets are warmed in manifest order: once the second layer is
			// cached, the first one was warmed or skipped.
			m := imageManifest(t, false, first, []tlayer{ls[0], ls[2]})
			v.eng.ManifestPulled(ctx, "ci", parsed(t, digest.FromBytes(m), m))
			eventually(t, "the second layer warmed", func() bool { return v.eng.disk.Contains(string(second)) })
			want := 1
			if tc.wantFirst {
				want = 2
				eventually(t, "the first layer warmed", func() bool { return v.eng.disk.Contains(string(first)) })
			} else if v.eng.disk.Contains(string(first)) {
				t.Fatal("a layer the client has was warmed")
			}
			if got := v.m.predictions(CachePreconstruct); got != want {
				t.Fatalf("predicted %d layers, want %d", got, want)
			}
		})
	}
}

// TestPredictOff: without Predict nothing is warmed, and a GET of a layer of
// the pulled image counts as a predicted miss.
func TestPredictOff(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	opts := predictOptions(t)
	opts.Predict = false
	v := newEnv(t, nil, opts)
	l := sharedLayers(t)[0]
	d := v.put(l.blob)
	v.process(d, ModeFull, outDeduplicated)
	v.eng.Start(ctx)
	m := imageManifest(t, false, d, []tlayer{l})
	v.eng.ManifestPulled(ctx, "c", parsed(t, digest.FromBytes(m), m))
	v.eng.BlobPulled(ctx, "c", d)
	if v.m.lookup(CachePreconstruct+"_predicted/miss") != 1 {
		t.Fatalf("lookups %v, want one predicted miss", v.m.snapshot())
	}
	if v.m.predictions(CachePreconstruct)+v.m.predictions(CachePrefetch) != 0 || v.eng.disk.Contains(string(d)) {
		t.Fatal("layer warmed with Predict off")
	}
}

// TestPredictRebuildsDefault: predicted rebuilds leave a core to serving,
// and one runs even on a single core.
func TestPredictRebuildsDefault(t *testing.T) {
	if got, want := (Options{}).withDefaults().PredictRebuilds, max(1, runtime.GOMAXPROCS(0)-1); got != want {
		t.Errorf("default PredictRebuilds %d, want %d", got, want)
	}
	if got := (Options{PredictRebuilds: 5}).withDefaults().PredictRebuilds; got != 5 {
		t.Errorf("PredictRebuilds 5 became %d", got)
	}
}

// TestPredictLeavesLayersToGets: a layer the client began to GET before
// its prediction ran is not prefetched beside that GET; the others are.
func TestPredictLeavesLayersToGets(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	v := newEnv(t, nil, predictOptions(t))
	ls := sharedLayers(t)
	got, next := v.put(ls[0].blob), v.put(ls[1].blob)
	j := predictJob{client: "10.0.0.3", manifest: digest.FromString("image"), layers: []digest.Digest{got, next}}
	v.eng.clients.expect(j.client, j.layers)
	v.eng.BlobPulled(ctx, j.client, got)
	v.eng.predictOne(ctx, j)
	if v.eng.mem.Warm(string(got)) || v.m.predictions(CachePrefetch) != 1 {
		t.Fatalf("prefetches %d, layer already pulled warm %v; want 1 and false", v.m.predictions(CachePrefetch), v.eng.mem.Warm(string(got)))
	}
	eventually(t, "prefetch of the layer not pulled yet", func() bool {
		rc := v.eng.CachedBlob(next, 0)
		if rc == nil {
			return false
		}
		b, err := io.ReadAll(rc)
		return err == nil && bytes.Equal(b, ls[1].blob)
	})
}

// TestPredictPageCache: on the filesystem an intact predicted layer is
// left to the page cache (read ahead by the kernel), not copied into a
// prefetch cache; a deduplicated one is still rebuilt ahead.
func TestPredictPageCache(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	fs, err := filesystem.New(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	v := newEnv(t, fs, predictOptions(t))
	if v.eng.mem != nil {
		t.Fatal("a prefetch cache on the filesystem")
	}
	ls := sharedLayers(t)
	dd, intact := v.put(ls[0].blob), v.put(ls[1].blob)
	v.process(dd, ModeFull, outDeduplicated)
	j := predictJob{client: "10.0.0.4", manifest: digest.FromString("image"), layers: []digest.Digest{intact, dd}}
	v.eng.clients.expect(j.client, j.layers)
	v.eng.predictOne(ctx, j)
	if p, q := v.m.predictions(CachePreconstruct), v.m.predictions(CachePrefetch); p != 1 || q != 1 {
		t.Fatalf("predicted preconstruct %d, prefetch %d; want 1 each", p, q)
	}
	if v.eng.CachedBlob(intact, 0) != nil {
		t.Fatal("an intact layer copied into memory")
	}
	eventually(t, "the deduplicated layer rebuilt", func() bool { return v.eng.disk.Contains(string(dd)) })
}
