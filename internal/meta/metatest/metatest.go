// Package metatest is the conformance suite every meta.Store implementation runs, so
// the bolt and Redis stores keep the same dedup and GC semantics.
package metatest

import (
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/cairn-registry/cairn/internal/meta"
	"github.com/opencontainers/go-digest"
)

// Limits newStore must configure, so the suite can check the bounds.
const (
	MaxLayersPerClient = 8
	PopularityBucket   = time.Minute
	PopularityBuckets  = 60
)

// Run runs the suite. newStore returns an empty store configured with the limits
// above; the suite closes it.
func Run(t *testing.T, newStore func(t *testing.T) meta.Store) {
	tests := []struct {
		name string
		fn   func(t *testing.T, s meta.Store)
	}{
		{"LayerRefs", testLayerRefs},
		{"LayerRefsRetry", testLayerRefsRetry},
		{"EmptyLayer", testEmptyLayer},
		{"TombstoneLifecycle", testTombstoneLifecycle},
		{"MissingFile", testMissingFile},
		{"TombstoneRace", testTombstoneRace},
		{"TombstoneRaceBulk", testTombstoneRaceBulk},
		{"ReleaseLayers", testReleaseLayers},
		{"BulkFiles", testBulkFiles},
		{"BulkInvalid", testBulkInvalid},
		{"BulkLarge", testBulkLarge},
		{"ZeroFilesPaging", testZeroFiles},
		{"LayerRefsConcurrent", testLayerRefsConcurrent},
		{"LargeLayer", testLargeLayer},
		{"Recipes", testRecipes},
		{"ListLayersPaging", testListLayers},
		{"ImageLayers", testImageLayers},
		{"ClientPulls", testClientPulls},
		{"ClientBound", testClientBound},
		{"LayerPopularity", testLayerPopularity},
		{"Stats", testStats},
		{"InvalidInput", testInvalidInput},
		{"LeaseLifecycle", testLeaseLifecycle},
		{"LeaseExpiry", testLeaseExpiry},
		{"LeaseRace", testLeaseRace},
		{"LeaseInvalid", testLeaseInvalid},
		{"PackBegin", testPackBegin},
		{"PackPlace", testPackPlace},
		{"PackPlaceFrom", testPackPlaceFrom},
		{"PackDrop", testPackDrop},
		{"PackDropBulk", testPackDropBulk},
		{"PackGone", testPackGone},
		{"PackTombstone", testPackTombstone},
		{"PackDelete", testPackDelete},
		{"PackList", testPackList},
		{"PackInvalid", testPackInvalid},
		{"PackConcurrent", testPackConcurrent},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			s := newStore(t)
			t.Cleanup(func() {
				if err := s.Close(); err != nil {
					t.Errorf("Close: %v", err)
				}
			})
			tc.fn(t, s)
		})
	}
}

// Digest returns a distinct sha256 digest for a label.
func Digest(label string) digest.Digest {
	return digest.NewDigestFromBytes(digest.SHA256, func() []byte { h := sha256.Sum256([]byte(label)); return h[:] }())
}

// Digests returns n digests labelled prefix-0 ... prefix-(n-1).
func Digests(prefix string, n int) []digest.Digest {
	out := make([]digest.Digest, n)
	for i := range out {
		out[i] = Digest(fmt.Sprintf("%s-%d", prefix, i))
	}
	return out
}

// must(call())(t) fails t when call returned an error, else yields its value.
func must[T any](v T, err error) func(t *testing.T) T {
	return func(t *testing.T) T {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
		return v
	}
}

func testRecipes(t *testing.T, s meta.Store) {
	ctx := context.Background()
	l := Digest("layer")
	if _, _, err := s.GetLayer(ctx, l); !errors.Is(err, meta.ErrNotFound) {
		t.Fatalf("GetLayer unknown: err = %v, want ErrNotFound", err)
	}
	if err := s.SetLayerState(ctx, l, meta.StateIntact); !errors.Is(err, meta.ErrNotFound) {
		t.Fatalf("SetLayerState unknown: err = %v, want ErrNotFound", err)
	}
	if err := s.PutLayer(ctx, l, nil, meta.StatePending); err != nil {
		t.Fatal(err)
	}
	r, st, err := s.GetLayer(ctx, l)
	if err != nil || len(r) != 0 || st != meta.StatePending {
		t.Fatalf("GetLayer = %q %v %v, want empty pending", r, st, err)
	}
	recipe := []byte("tar-split and files")
	if err := s.PutLayer(ctx, l, recipe, meta.StateDeduplicated); err != nil {
		t.Fatal(err)
	}
	recipe[0] = 'X' // the store must have copied it
	if err := s.SetLayerState(ctx, l, meta.StateIntact); err != nil {
		t.Fatal(err)
	}
	r, st, err = s.GetLayer(ctx, l)
	if err != nil || string(r) != "tar-split and files" || st != meta.StateIntact {
		t.Fatalf("GetLayer = %q %v %v", r, st, err)
	}
	counts := must(s.LayerCounts(ctx))(t)
	if counts[meta.StateIntact] != 1 || counts[meta.StatePending] != 0 || counts[meta.StateDeduplicated] != 0 {
		t.Fatalf("LayerCounts = %v", counts)
	}
	if err := s.DeleteLayer(ctx, l); err != nil {
		t.Fatal(err)
	}
	if err := s.DeleteLayer(ctx, l); err != nil {
		t.Fatalf("second DeleteLayer: %v", err)
	}
	if _, _, err := s.GetLayer(ctx, l); !errors.Is(err, meta.ErrNotFound) {
		t.Fatalf("GetLayer after delete: err = %v", err)
	}
	if counts := must(s.LayerCounts(ctx))(t); counts[meta.StateIntact] != 0 {
		t.Fatalf("LayerCounts after delete = %v", counts)
	}
	if err := s.PutLayer(ctx, l, nil, 0); !errors.Is(err, meta.ErrInvalidState) {
		t.Fatalf("PutLayer state 0: err = %v, want ErrInvalidState", err)
	}
}

func listAll(t *testing.T, s meta.Store, st meta.LayerState, limit int) []digest.Digest {
	t.Helper()
	var all []digest.Digest
	var after digest.Digest
	for {
		page := must(s.ListLayers(context.Background(), st, after, limit))(t)
		if len(page) == 0 {
			return all
		}
		if len(page) > limit {
			t.Fatalf("page of %d > limit %d", len(page), limit)
		}
		all = append(all, page...)
		after = page[len(page)-1]
	}
}

func testListLayers(t *testing.T, s meta.Store) {
	ctx := context.Background()
	var dedup, pending []digest.Digest
	for i := range 25 {
		l := Digest(fmt.Sprintf("d-%d", i))
		dedup = append(dedup, l)
		if err := s.PutLayer(ctx, l, []byte("r"), meta.StateDeduplicated); err != nil {
			t.Fatal(err)
		}
	}
	for i := range 5 {
		l := Digest(fmt.Sprintf("p-%d", i))
		pending = append(pending, l)
		if err := s.PutLayer(ctx, l, nil, meta.StatePending); err != nil {
			t.Fatal(err)
		}
	}
	// Moving a layer between states moves it between listings.
	if err := s.PutLayer(ctx, pending[0], []byte("r"), meta.StateDeduplicated); err != nil {
		t.Fatal(err)
	}
	dedup, pending = append(dedup, pending[0]), pending[1:]
	got := listAll(t, s, meta.StateDeduplicated, 7)
	slices.Sort(dedup)
	if !slices.IsSorted(got) {
		t.Errorf("listing is not in key order")
	}
	slices.Sort(got)
	if !slices.Equal(got, dedup) {
		t.Fatalf("deduplicated listing has %d layers, want %d", len(got), len(dedup))
	}
	got = listAll(t, s, meta.StatePending, 1)
	slices.Sort(got)
	slices.Sort(pending)
	if !slices.Equal(got, pending) {
		t.Fatalf("pending listing = %v, want %v", got, pending)
	}
	if got := listAll(t, s, meta.StateIrreproducible, 3); len(got) != 0 {
		t.Fatalf("irreproducible listing = %v, want none", got)
	}
	counts := must(s.LayerCounts(ctx))(t)
	if counts[meta.StateDeduplicated] != 26 || counts[meta.StatePending] != 4 {
		t.Fatalf("LayerCounts = %v", counts)
	}
}

func testImageLayers(t *testing.T, s meta.Store) {
	ctx := context.Background()
	m := Digest("manifest")
	if _, err := s.ImageLayers(ctx, m); !errors.Is(err, meta.ErrNotFound) {
		t.Fatalf("ImageLayers unknown: err = %v, want ErrNotFound", err)
	}
	layers := []digest.Digest{Digest("l3"), Digest("l1"), "sha512:" + digest.Digest(fmt.Sprintf("%0128x", 7))}
	if err := s.SetImageLayers(ctx, m, layers); err != nil {
		t.Fatal(err)
	}
	if got := must(s.ImageLayers(ctx, m))(t); !slices.Equal(got, layers) {
		t.Fatalf("ImageLayers = %v, want %v", got, layers)
	}
	if err := s.SetImageLayers(ctx, m, nil); err != nil {
		t.Fatal(err)
	}
	if got := must(s.ImageLayers(ctx, m))(t); len(got) != 0 {
		t.Fatalf("ImageLayers after overwrite = %v, want empty", got)
	}
	if err := s.DeleteImage(ctx, m); err != nil {
		t.Fatal(err)
	}
	if _, err := s.ImageLayers(ctx, m); !errors.Is(err, meta.ErrNotFound) {
		t.Fatalf("ImageLayers after delete: err = %v", err)
	}
}

func testClientPulls(t *testing.T, s meta.Store) {
	ctx := context.Background()
	t0 := time.Unix(1_700_000_000, 0)
	a, b := Digest("a"), Digest("b")
	if r := must(s.RepullRatio(ctx, "alice"))(t); r != 0 {
		t.Fatalf("RepullRatio of unknown client = %v", r)
	}
	for i, want := range []int64{0, 1, 2} {
		if prev := must(s.RecordPull(ctx, "alice", a, t0.Add(time.Duration(i)*time.Second)))(t); prev != want {
			t.Fatalf("pull %d of a: prev = %d, want %d", i, prev, want)
		}
	}
	if prev := must(s.RecordPull(ctx, "alice", b, t0.Add(10*time.Second)))(t); prev != 0 {
		t.Fatalf("first pull of b: prev = %d", prev)
	}
	if prev := must(s.RecordPull(ctx, "bob", a, t0))(t); prev != 0 {
		t.Fatalf("bob's first pull of a: prev = %d (clients must be separate)", prev)
	}
	got := must(s.ClientLayers(ctx, "alice"))(t)
	want := []meta.LayerPull{{Layer: b, Pulls: 1, Last: t0.Add(10 * time.Second)}, {Layer: a, Pulls: 3, Last: t0.Add(2 * time.Second)}}
	if len(got) != len(want) {
		t.Fatalf("ClientLayers = %+v, want %+v", got, want)
	}
	for i := range got {
		if got[i].Layer != want[i].Layer || got[i].Pulls != want[i].Pulls || !got[i].Last.Equal(want[i].Last) {
			t.Fatalf("ClientLayers = %+v, want %+v", got, want)
		}
	}
	if r := must(s.RepullRatio(ctx, "alice"))(t); r != 0.5 {
		t.Fatalf("RepullRatio = %v, want 0.5 (2 repulls of 4)", r)
	}
	if got := must(s.ClientLayers(ctx, "nobody"))(t); len(got) != 0 {
		t.Fatalf("ClientLayers of unknown client = %v", got)
	}
}

func testClientBound(t *testing.T, s meta.Store) {
	ctx := context.Background()
	t0 := time.Unix(1_700_000_000, 0)
	n := MaxLayersPerClient + 5
	for i := range n {
		must(s.RecordPull(ctx, "c", Digest(fmt.Sprintf("l-%d", i)), t0.Add(time.Duration(i)*time.Second)))(t)
		// Keep layer 0 recently pulled: it must survive eviction.
		must(s.RecordPull(ctx, "c", Digest("l-0"), t0.Add(time.Duration(i)*time.Second+time.Millisecond)))(t)
	}
	got := must(s.ClientLayers(ctx, "c"))(t)
	if len(got) != MaxLayersPerClient {
		t.Fatalf("client has %d entries, want cap %d", len(got), MaxLayersPerClient)
	}
	if got[0].Layer != Digest("l-0") || got[0].Pulls != int64(n)+1 {
		t.Fatalf("most recent entry = %+v, want l-0 with %d pulls", got[0], n+1)
	}
	for _, lp := range got {
		if lp.Layer == Digest("l-1") {
			t.Fatal("oldest entry l-1 survived eviction")
		}
	}
	// An evicted layer counts as a first pull again.
	if prev := must(s.RecordPull(ctx, "c", Digest("l-1"), t0.Add(time.Hour)))(t); prev != 0 {
		t.Fatalf("pull of evicted layer: prev = %d, want 0", prev)
	}
}

func testLayerPopularity(t *testing.T, s meta.Store) {
	ctx := context.Background()
	t0 := time.Unix(0, 0).Add(28_333_333 * PopularityBucket) // bucket-aligned
	l := Digest("hot")
	for i, at := range []time.Duration{10 * time.Second, 70 * time.Second, 130 * time.Second} {
		must(s.RecordPull(ctx, fmt.Sprintf("client-%d", i), l, t0.Add(at)))(t)
	}
	must(s.RecordPull(ctx, "client-0", Digest("cold"), t0))(t)
	for _, c := range []struct {
		since time.Duration
		want  int64
	}{{0, 3}, {60 * time.Second, 2}, {125 * time.Second, 1}, {180 * time.Second, 0}} {
		if got := must(s.LayerPulls(ctx, l, t0.Add(c.since)))(t); got != c.want {
			t.Errorf("LayerPulls since t0+%v = %d, want %d", c.since, got, c.want)
		}
	}
	// Past the retained horizon, the oldest bucket is reused.
	horizon := PopularityBuckets * PopularityBucket
	must(s.RecordPull(ctx, "client-9", l, t0.Add(horizon+5*time.Second)))(t)
	if got := must(s.LayerPulls(ctx, l, t0))(t); got != 3 {
		t.Errorf("LayerPulls after wrap = %d, want 3 (oldest bucket replaced)", got)
	}
	if got := must(s.LayerPulls(ctx, l, t0.Add(horizon)))(t); got != 1 {
		t.Errorf("LayerPulls of the newest bucket = %d, want 1", got)
	}
	if got := must(s.LayerPulls(ctx, Digest("never"), t0))(t); got != 0 {
		t.Errorf("LayerPulls of unpulled layer = %d", got)
	}
}

func testStats(t *testing.T, s meta.Store) {
	ctx := context.Background()
	if got := must(s.Stats(ctx))(t); len(got) != 0 {
		t.Fatalf("Stats of empty store = %v", got)
	}
	for _, st := range []struct {
		name  string
		delta int64
	}{{"encoder.gzip-stdlib-6", 1}, {"encoder.gzip-stdlib-6", 2}, {"bytes.saved", 1 << 40}, {"bytes.saved", -5}} {
		if err := s.AddStat(ctx, st.name, st.delta); err != nil {
			t.Fatal(err)
		}
	}
	got := must(s.Stats(ctx))(t)
	if len(got) != 2 || got["encoder.gzip-stdlib-6"] != 3 || got["bytes.saved"] != 1<<40-5 {
		t.Fatalf("Stats = %v", got)
	}
}

func testInvalidInput(t *testing.T, s meta.Store) {
	ctx := context.Background()
	bad := digest.Digest("sha256:nothex")
	l := Digest("layer")
	if _, err := s.AddLayerRefs(ctx, l, []digest.Digest{Digest("ok"), bad}); !errors.Is(err, meta.ErrInvalidDigest) {
		t.Fatalf("AddLayerRefs bad file digest: err = %v", err)
	}
	if fi := fileInfo(t, s, Digest("ok")); fi.Exists {
		t.Fatalf("rejected add left an entry: %+v", fi)
	}
	if _, err := s.LayerFiles(ctx, l); !errors.Is(err, meta.ErrNotFound) {
		t.Fatalf("rejected add recorded the layer: err = %v", err)
	}
	if _, err := s.AddLayerRefs(ctx, bad, []digest.Digest{Digest("ok")}); !errors.Is(err, meta.ErrInvalidDigest) {
		t.Fatalf("AddLayerRefs bad layer digest: err = %v", err)
	}
	if _, err := s.ReleaseLayerRefs(ctx, bad); !errors.Is(err, meta.ErrInvalidDigest) {
		t.Fatalf("ReleaseLayerRefs bad layer digest: err = %v", err)
	}
	if _, err := s.LayerFiles(ctx, bad); !errors.Is(err, meta.ErrInvalidDigest) {
		t.Fatalf("LayerFiles bad layer digest: err = %v", err)
	}
	if err := s.PutLayer(ctx, bad, nil, meta.StatePending); !errors.Is(err, meta.ErrInvalidDigest) {
		t.Fatalf("PutLayer bad digest: err = %v", err)
	}
	if err := s.SetImageLayers(ctx, Digest("m"), []digest.Digest{bad}); !errors.Is(err, meta.ErrInvalidDigest) {
		t.Fatalf("SetImageLayers bad layer: err = %v", err)
	}
	cctx, cancel := context.WithCancel(ctx)
	cancel()
	if _, err := s.AddLayerRefs(cctx, l, []digest.Digest{Digest("ok")}); !errors.Is(err, context.Canceled) {
		t.Fatalf("AddLayerRefs with cancelled ctx: err = %v", err)
	}
}
