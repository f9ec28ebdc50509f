package dedupbench

import (
	"bytes"
	"context"
	"errors"
	"os"
	"os/exec"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/cairn-registry/cairn/internal/bench/dataset"
)

// TestRestoreSmall runs the part that needs no server, (c), on the small
// profile under GOMAXPROCS 1 and 2: every reproducible blob is restored
// byte-exactly (Run checks the digest) and reported under the producer that
// made it.
func TestRestoreSmall(t *testing.T) {
	if _, err := exec.LookPath("apt-get"); err != nil {
		t.Skip("apt-get not installed: the dataset is built from Debian packages")
	}
	var log bytes.Buffer
	res, err := Run(context.Background(), Options{
		Profile:  dataset.ProfileSmall,
		CacheDir: os.Getenv("CAIRN_DATASET_CACHE"),
		WorkDir:  t.TempDir(),
		Parts:    []string{PartRestore},
		Repeat:   1,
		Procs:    []int{1, 2},
		Log:      &log,
	})
	if errors.Is(err, dataset.ErrNoApt) {
		t.Skipf("skipping: %v", err)
	}
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Errors) > 0 {
		t.Fatalf("parts failed: %v\n%s", res.Errors, log.String())
	}
	if res.Restore == nil || res.Storage != nil || res.Latency != nil || res.Prefetch != nil {
		t.Fatalf("want only the restore figures, got %+v", res)
	}
	prods := map[string]RestoreResult{}
	timed := 0
	for _, p := range res.Restore.Producers {
		prods[p.Producer] = p
		if !p.Derived {
			timed += p.Layers
		}
		if len(p.Runs) != len(res.Restore.Procs) {
			t.Errorf("%s: %d runs for GOMAXPROCS %v", p.Producer, len(p.Runs), res.Restore.Procs)
		}
		for i, run := range p.Runs {
			if run.Procs != res.Restore.Procs[i] || run.RestoreMBps <= 0 || run.CompressorMBps <= 0 || run.IntactMBps <= 0 ||
				run.AssembleMBps <= 0 || run.RestorePerCompressor <= 0 || run.RestorePerIntact <= 0 {
				t.Errorf("%s: figures missing: %+v", p.Producer, run)
			}
		}
	}
	// Each producer the dataset models is found as its own encoder: docker
	// as compress/gzip level 6, podman as pgzip with 1 MiB blocks; BestSpeed
	// is derived from docker's layers.
	for prod, enc := range map[string]string{
		producerGzipDefault: "stdlib-gzip/6", producerGzipBestSpeed: "stdlib-gzip/1", producerPgzip: "pgzip/5/1MiB",
		producerZstd: "klauspost-zstd/2", producerNone: "none",
	} {
		p, ok := prods[prod]
		if !ok || len(p.Encoders) != 1 || p.Encoders[0] != enc || p.Derived != (prod == producerGzipBestSpeed) {
			t.Errorf("producer %s: got %+v, want encoder %s", prod, p, enc)
		}
	}
	if d, b := prods[producerGzipDefault], prods[producerGzipBestSpeed]; d.Layers != b.Layers || d.TarBytes != b.TarBytes {
		t.Errorf("BestSpeed: %d layers, %d tar bytes; want those of compress/gzip default, %d and %d", b.Layers, b.TarBytes, d.Layers, d.TarBytes)
	}
	wantIrr := 0
	if _, err := exec.LookPath("gzip"); err == nil {
		wantIrr = 1 // the layer GNU gzip compressed
	}
	if len(res.Restore.Irreproducible) != wantIrr || timed+wantIrr != res.Layers {
		t.Errorf("%d blobs timed and %v irreproducible, of %d; want %d irreproducible", timed, res.Restore.Irreproducible, res.Layers, wantIrr)
	}
	var out bytes.Buffer
	if err := WriteTable(&out, res); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"(c) restore", "stdlib-gzip/6", "compress/gzip BestSpeed *", "pgzip/5/1MiB"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("table lacks %q:\n%s", want, out.String())
		}
	}
	t.Logf("\n%s", out.String())
}

func TestParseMetrics(t *testing.T) {
	const text = `# HELP cairn_cache_requests_total Cache lookups.
# TYPE cairn_cache_requests_total counter
cairn_cache_requests_total{cache="preconstruct",result="hit"} 7
cairn_cache_requests_total{cache="preconstruct",result="miss"} 3
cairn_dedup_cache_requests_total{cache="prefetch",result="hit"} 2
cairn_dedup_predicted_total{cache="preconstruct"} 4
cairn_cache_requests_total{cache="prefetch_predicted",result="hit"} 9
cairn_cache_requests_total{cache="prefetch_predicted",result="miss"} 1
cairn_dedup_saved_bytes 1.5e+06
go_goroutines 12
`
	s, err := parseMetrics(strings.NewReader(text))
	if err != nil {
		t.Fatal(err)
	}
	pre, pf := countsOf(s, "preconstruct"), countsOf(s, "prefetch")
	if pre != (cacheCounts{Hits: 7, Misses: 3, Predicted: 4}) || pf != (cacheCounts{Hits: 2}) {
		t.Errorf("preconstruct %+v, prefetch %+v", pre, pf)
	}
	// The "_predicted" series are their own: not summed into the cache's.
	if got := predictedOf(s, "prefetch"); got != (predictedCounts{Hits: 9, Misses: 1, HitRatio: 0.9}) {
		t.Errorf("prefetch predicted %+v", got)
	}
	if got := predictedOf(s, "preconstruct"); got != (predictedCounts{}) {
		t.Errorf("preconstruct predicted %+v, want none", got)
	}
	if got := pre.HitRatio(); got != 0.7 {
		t.Errorf("hit ratio %v, want 0.7", got)
	}
	if _, ok := s["go_goroutines"]; ok {
		t.Error("kept a series that is not cairn's")
	}
	if _, err := parseMetrics(strings.NewReader("cairn_x{a=\"b\"} notanumber\n")); err == nil {
		t.Error("parsed a malformed value")
	}
}

// TestPrefetchTable checks figure (e) as printed and as JSON: a replay per
// mode and predictor setting, predicted-layer hit ratios per cache, and "-"
// for a ratio over no GETs (mode index rebuilds nothing).
func TestPrefetchTable(t *testing.T) {
	delta := func(text string) samples {
		s, err := parseMetrics(strings.NewReader(text))
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	full := roundCounts(delta(`cairn_cache_requests_total{cache="preconstruct",result="hit"} 6
cairn_cache_requests_total{cache="preconstruct",result="miss"} 2
cairn_cache_requests_total{cache="preconstruct_predicted",result="hit"} 3
cairn_cache_requests_total{cache="preconstruct_predicted",result="miss"} 1
`))
	index := roundCounts(delta(`cairn_cache_requests_total{cache="prefetch_predicted",result="hit"} 9
cairn_cache_requests_total{cache="prefetch_predicted",result="miss"} 1
cairn_dedup_predicted_total{cache="prefetch"} 5
`))
	if full.HitRatio != 0.75 || full.PredictedHitRatio != 0.75 || index.HitRatio != 0 || index.PredictedHitRatio != 0.9 {
		t.Fatalf("ratios: full %+v, index %+v", full, index)
	}
	res := &Result{Profile: "small", Prefetch: &PrefetchFigures{
		PullOnce: 6, Repull: 4, Rounds: 3, DelayMs: [2]int{50, 200}, PrefetchSize: "256MiB",
		Runs: []PrefetchRun{
			{Mode: "full", Predictor: true, ManifestGets: 48, LayerGets: 8, All: full, First: full},
			{Mode: "index", Predictor: true, ManifestGets: 48, LayerGets: 10, All: index, First: index},
		},
	}}
	var out bytes.Buffer
	if err := WriteTable(&out, res); err != nil {
		t.Fatal(err)
	}
	rows := map[string][]string{}
	for _, line := range strings.Split(out.String(), "\n") {
		if f := strings.Fields(line); len(f) > 0 && (f[0] == "full" || f[0] == "index") && len(f) > 1 && f[1] == "on" {
			rows[f[0]] = f
		}
	}
	// mode predictor manifests layers pre-h/m ratio first pred-pre (2) pred-prefetch (2) first warmed p50 p99
	want := map[string][]string{
		"full":  {"full", "on", "48", "8", "6/2", "0.75", "0.75", "3/1", "0.75", "0/0", "-", "0.75", "0", "0.0", "0.0"},
		"index": {"index", "on", "48", "10", "0/0", "-", "-", "0/0", "-", "9/1", "0.90", "0.90", "5", "0.0", "0.0"},
	}
	for mode, w := range want {
		if !slices.Equal(rows[mode], w) {
			t.Errorf("%s row %q, want %q\n%s", mode, rows[mode], w, out.String())
		}
	}
	if !strings.Contains(out.String(), "hit: ") {
		t.Errorf("no line says what a hit is:\n%s", out.String())
	}
	var js bytes.Buffer
	if err := WriteJSON(&js, res); err != nil {
		t.Fatal(err)
	}
	for _, key := range []string{`"mode": "index"`, `"prefetchPredicted": {`, `"predictedHitRatio": 0.9`, `"prefetchSize": "256MiB"`} {
		if !strings.Contains(js.String(), key) {
			t.Errorf("JSON lacks %s", key)
		}
	}
}

// TestGetTimes: p50 is the lower median, p99 the nearest rank, so with
// fewer than 100 GETs p99 is the slowest one.
func TestGetTimes(t *testing.T) {
	var ds []time.Duration
	for i := 200; i >= 1; i-- {
		ds = append(ds, time.Duration(i)*time.Millisecond)
	}
	if g := getTimes(ds, 0); g.P50Ms != 100 || g.P99Ms != 198 || g.MaxMs != 200 {
		t.Errorf("200 GETs: %+v, want p50 100, p99 198, max 200", g)
	}
	if g := getTimes(ds[150:], 0); g.P50Ms != 25 || g.P99Ms != 50 || g.MaxMs != 50 {
		t.Errorf("50 GETs: %+v, want p50 25, p99 50, max 50", g)
	}
}

// TestPooled: replays of one mode and predictor setting pool their GETs,
// in the order the settings first ran.
func TestPooled(t *testing.T) {
	ms := func(ns ...int) []time.Duration {
		var out []time.Duration
		for _, n := range ns {
			out = append(out, time.Duration(n)*time.Millisecond)
		}
		return out
	}
	runs := []PrefetchRun{
		{Mode: "full", Predictor: false, layerTimes: ms(1, 2, 3)},
		{Mode: "full", Predictor: true, layerTimes: ms(10)},
		{Mode: "full", Predictor: false, layerTimes: ms(4, 5)},
		{Mode: "full", Predictor: true, layerTimes: ms(20, 30)},
	}
	want := []PooledLatency{
		{Mode: "full", Predictor: false, Replays: 2, LayerGets: 5, P50Ms: 3, P99Ms: 5},
		{Mode: "full", Predictor: true, Replays: 2, LayerGets: 3, P50Ms: 20, P99Ms: 30},
	}
	if got := pooled(runs); !slices.Equal(got, want) {
		t.Errorf("pooled %+v, want %+v", got, want)
	}
}
