package dedupbench

import (
	"context"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"time"

	"github.com/cairn-registry/cairn/internal/bench/dataset"
	"github.com/cairn-registry/cairn/internal/repeat"
)

// PrefetchFigures are figure (e): cache hit ratios while clients pull, with
// the predictor off and on, in mode full (deduplicated layers rebuilt on
// GET, through the preconstruct cache) and in mode index (intact copies
// kept, served from disk or the in-memory prefetch cache). Each replay runs
// on a fresh server with empty caches and its own copy of the metadata
// store, so no replay inherits another's pull history.
type PrefetchFigures struct {
	PullOnce int `json:"pullOnceClients"`
	Repull   int `json:"repullClients"`
	Rounds   int `json:"rounds"`
	// DelayMs is the range of the pause between a manifest GET and the
	// layer GETs that follow it.
	DelayMs [2]int `json:"delayMs"`
	// PrefetchSize bounds the prefetch cache, in the config's units.
	PrefetchSize string `json:"prefetchSize"`
	// Runs are the replays: mode full with the predictor off and on, then
	// mode index likewise (each pair Replays times, off and on in turn).
	Runs []PrefetchRun `json:"runs"`
	// Pooled are the layer GET times of each mode and predictor setting
	// over all its replays.
	Pooled []PooledLatency `json:"pooled"`
}

// PooledLatency is the layer GET latency of one mode and predictor
// setting, over every GET of its replays.
type PooledLatency struct {
	Mode      string  `json:"mode"`
	Predictor bool    `json:"predictor"`
	Replays   int     `json:"replays"`
	LayerGets int     `json:"layerGets"`
	P50Ms     float64 `json:"p50Ms"`
	P99Ms     float64 `json:"p99Ms"`
}

// PrefetchRun is one replay of the workload.
type PrefetchRun struct {
	// Mode is the server's dedup mode: full or index.
	Mode         string `json:"mode"`
	Predictor    bool   `json:"predictor"`
	ManifestGets int    `json:"manifestGets"`
	LayerGets    int    `json:"layerGets"`
	// All counts the whole replay; First only its first round, where
	// every client pulls for the first time.
	All   RoundCounts `json:"all"`
	First RoundCounts `json:"first"`
	// LayerP50Ms and LayerP99Ms are the median and 99th percentile layer
	// GET times over the replay.
	LayerP50Ms float64 `json:"layerP50Ms"`
	LayerP99Ms float64 `json:"layerP99Ms"`
	Seconds    float64 `json:"seconds"`
	// layerTimes are the layer GET times, for Pooled.
	layerTimes []time.Duration
}

// RoundCounts are cache counter deltas over part of a replay.
type RoundCounts struct {
	// Preconstruct and Prefetch count every GET that consulted the cache
	// (for preconstruct, every rebuilt-layer GET; a hit started no
	// rebuild) and, as Predicted, the layers the predictor warmed.
	Preconstruct cacheCounts `json:"preconstruct"`
	Prefetch     cacheCounts `json:"prefetch"`
	// HitRatio is the hits of both caches over their requests.
	HitRatio float64 `json:"hitRatio"`
	// PreconstructPredicted and PrefetchPredicted count, per cache, the
	// layer GETs that followed a manifest GET by the same client (the
	// deduplicated layers for preconstruct, the intact ones for
	// prefetch); a hit found the layer in the cache, or for preconstruct
	// already being rebuilt into it. PredictedHitRatio is over both.
	PreconstructPredicted predictedCounts `json:"preconstructPredicted"`
	PrefetchPredicted     predictedCounts `json:"prefetchPredicted"`
	PredictedHitRatio     float64         `json:"predictedHitRatio"`
}

func roundCounts(delta samples) RoundCounts {
	rc := RoundCounts{
		Preconstruct: countsOf(delta, "preconstruct"), Prefetch: countsOf(delta, "prefetch"),
		PreconstructPredicted: predictedOf(delta, "preconstruct"), PrefetchPredicted: predictedOf(delta, "prefetch"),
	}
	hits := rc.Preconstruct.Hits + rc.Prefetch.Hits
	rc.HitRatio = ratio(hits, hits+rc.Preconstruct.Misses+rc.Prefetch.Misses)
	pc, pf := rc.PreconstructPredicted, rc.PrefetchPredicted
	rc.PredictedHitRatio = ratio(pc.Hits+pf.Hits, pc.Hits+pc.Misses+pf.Hits+pf.Misses)
	return rc
}

// wclient is one emulated client: its own source address (the predictor
// knows clients by remote IP), its images, and whether it re-downloads
// layers on every pull.
type wclient struct {
	http   *http.Client
	images []*dataset.Image
	repull bool
	rng    *rand.Rand
}

// Dedup modes (e) replays in.
const (
	modeFull  = "full"
	modeIndex = "index"
)

// prefetchRuns replays the workload in mode, predictor off then on,
// Replays times. The registry must hold what mode serves: recipes, and for
// mode index the intact copies too.
func (r *registryRun) prefetchRuns(ctx context.Context, mode string) ([]PrefetchRun, error) {
	var runs []PrefetchRun
	for i := range r.opts.Replays {
		for _, predictor := range []bool{false, true} {
			phase := mode + "-predictor-off"
			if predictor {
				phase = mode + "-predictor-on"
			}
			if r.opts.Replays > 1 {
				phase += fmt.Sprintf("-%d", i+1)
			}
			run, err := r.replay(ctx, phase, mode, predictor)
			if err != nil {
				return nil, err
			}
			runs = append(runs, *run)
		}
	}
	return runs, nil
}

// prefetchFigures wraps the replays into figure (e).
func (r *registryRun) prefetchFigures(runs []PrefetchRun) *PrefetchFigures {
	f := &PrefetchFigures{
		PullOnce: r.opts.PullOnce, Repull: r.opts.Repull, Rounds: r.opts.Rounds,
		DelayMs:      [2]int{int(r.opts.DelayMin / time.Millisecond), int(r.opts.DelayMax / time.Millisecond)},
		PrefetchSize: r.opts.PrefetchSize,
		Runs:         runs,
	}
	f.Pooled = pooled(runs)
	return f
}

// pooled gives each mode and predictor setting's layer GET latency over
// all its replays, in the order of their first replays.
func pooled(runs []PrefetchRun) []PooledLatency {
	type key struct {
		mode      string
		predictor bool
	}
	var order []key
	times := map[key][]time.Duration{}
	replays := map[key]int{}
	for _, run := range runs {
		k := key{run.Mode, run.Predictor}
		if _, ok := times[k]; !ok {
			order = append(order, k)
		}
		times[k] = append(times[k], run.layerTimes...)
		replays[k]++
	}
	var out []PooledLatency
	for _, k := range order {
		t := getTimes(times[k], 0)
		out = append(out, PooledLatency{Mode: k.mode, Predictor: k.predictor, Replays: replays[k], LayerGets: len(times[k]), P50Ms: t.P50Ms, P99Ms: t.P99Ms})
	}
	return out
}

func (r *registryRun) replay(ctx context.Context, phase, mode string, predictor bool) (*PrefetchRun, error) {
	cfg := r.config(phase, mode, predictor, r.opts.PrefetchSize)
	// A copy of the metadata store: the layer states, without the pulls
	// of earlier replays (the predictor would skip layers a client
	// "has").
	cfg.Meta = filepath.Join(r.dir, "meta-"+phase+".db")
	if err := copyFile(r.meta, cfg.Meta); err != nil {
		return nil, err
	}
	defer os.Remove(cfg.Meta)
	defer cleanupDir(cfg.CacheDir)
	srv, err := startServer(ctx, r.opts.CairnBin, r.dir, phase, cfg)
	if err != nil {
		return nil, err
	}
	defer srv.Stop()
	// Same seed for both replays: the same clients pull the same images
	// with the same pauses.
	rng := rand.New(rand.NewPCG(1, 2))
	var clients []*wclient
	for i := range r.opts.PullOnce + r.opts.Repull {
		c := &wclient{repull: i >= r.opts.PullOnce, rng: rand.New(rand.NewPCG(uint64(i), 3))}
		n := 2
		if c.repull {
			n = 1
		}
		for _, j := range rng.Perm(len(r.ds.Images))[:min(n, len(r.ds.Images))] {
			c.images = append(c.images, r.ds.Images[j])
		}
		// 127.0.0.0/8 is all loopback: each client its own address.
		c.http = clientFrom(fmt.Sprintf("127.0.%d.%d", 1+i/250, 2+i%250))
		clients = append(clients, c)
	}
	defer func() {
		for _, c := range clients {
			c.http.CloseIdleConnections()
		}
	}()

	run := &PrefetchRun{Mode: mode, Predictor: predictor}
	start := time.Now()
	before, err := scrape(ctx, r.client, srv.MetricsURL)
	if err != nil {
		return nil, err
	}
	var layerTimes []time.Duration
	for round := range r.opts.Rounds {
		var (
			mu   sync.Mutex
			wg   sync.WaitGroup
			errs []error
		)
		for _, c := range clients {
			wg.Add(1)
			go func() {
				defer wg.Done()
				m, ts, err := r.pull(ctx, srv.URL, c, round)
				mu.Lock()
				defer mu.Unlock()
				run.ManifestGets += m
				run.LayerGets += len(ts)
				layerTimes = append(layerTimes, ts...)
				if err != nil {
					errs = append(errs, err)
				}
			}()
		}
		wg.Wait()
		if len(errs) > 0 {
			return nil, errs[0]
		}
		if round == 0 {
			after, err := scrape(ctx, r.client, srv.MetricsURL)
			if err != nil {
				return nil, err
			}
			run.First = roundCounts(after.sub(before))
		}
	}
	after, err := scrape(ctx, r.client, srv.MetricsURL)
	if err != nil {
		return nil, err
	}
	run.All = roundCounts(after.sub(before))
	run.Seconds = time.Since(start).Seconds()
	lt := getTimes(layerTimes, 0)
	run.LayerP50Ms, run.LayerP99Ms, run.layerTimes = lt.P50Ms, lt.P99Ms, layerTimes
	r.logf("%s: %d manifest and %d layer GETs in %.1fs, layer GET p50 %.1f ms, p99 %.1f ms, hit ratio %.2f (first round %.2f), predicted-layer GETs %.2f", phase, run.ManifestGets, run.LayerGets, run.Seconds, run.LayerP50Ms, run.LayerP99Ms, run.All.HitRatio, run.First.HitRatio, run.All.PredictedHitRatio)
	return run, srv.Stop()
}

// pull is one visit of a client: it arrives at a random moment in the
// round's first second; for each of its images, it GETs the manifest; on
// the first round (or always, for a repull client) it pauses DelayMin to
// DelayMax and GETs the layers, three at a time as docker does.
func (r *registryRun) pull(ctx context.Context, base string, c *wclient, round int) (manifests int, times []time.Duration, err error) {
	if err := repeat.Sleep(ctx, time.Duration(c.rng.IntN(1000))*time.Millisecond); err != nil {
		return 0, nil, err
	}
	for _, im := range c.images {
		if err := getManifest(ctx, c.http, base, im); err != nil {
			return manifests, times, err
		}
		manifests++
		if round > 0 && !c.repull {
			continue
		}
		delay := r.opts.DelayMin + time.Duration(c.rng.Int64N(int64(r.opts.DelayMax-r.opts.DelayMin)+1))
		if err := repeat.Sleep(ctx, delay); err != nil {
			return manifests, times, err
		}
		var mu sync.Mutex
		var wg sync.WaitGroup
		var errs []error
		sem := make(chan struct{}, 3)
		for _, l := range im.Layers {
			wg.Add(1)
			sem <- struct{}{}
			go func() {
				defer func() { <-sem; wg.Done() }()
				d, err := GetBlob(ctx, c.http, base, im.Repo, l.Digest, l.Size)
				mu.Lock()
				defer mu.Unlock()
				if err != nil {
					errs = append(errs, err)
					return
				}
				times = append(times, d)
			}()
		}
		wg.Wait()
		if len(errs) > 0 {
			return manifests, times, errs[0]
		}
	}
	return manifests, times, nil
}

func getManifest(ctx context.Context, c *http.Client, base string, im *dataset.Image) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, base+"/v2/"+im.Repo+"/manifests/"+im.Tag, nil)
	if err != nil {
		return err
	}
	req.Header.Set("Accept", dataset.MediaTypeOCIManifest+", "+dataset.MediaTypeDockerManifest)
	resp, err := c.Do(req)
	if err != nil {
		return fmt.Errorf("dedupbench: GET manifest %s:%s: %w", im.Repo, im.Tag, err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		return fmt.Errorf("dedupbench: GET manifest %s:%s: %w", im.Repo, im.Tag, err)
	}
	if resp.StatusCode != http.StatusOK || !slices.Equal(body, im.Manifest) {
		return fmt.Errorf("dedupbench: GET manifest %s:%s: %s, %d bytes, not the manifest pushed", im.Repo, im.Tag, resp.Status, len(body))
	}
	return nil
}

// clientFrom returns an HTTP client whose connections leave from the
// loopback address ip.
func clientFrom(ip string) *http.Client {
	d := &net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(ip)}, Timeout: 10 * time.Second}
	return &http.Client{Transport: &http.Transport{DialContext: d.DialContext, MaxIdleConnsPerHost: 4}}
}

// copyFile copies src to dst (a closed bolt file: no process has it open).
func copyFile(src, dst string) error {
	in, err := os.Open(src)
	if err != nil {
		return fmt.Errorf("dedupbench: %w", err)
	}
	defer in.Close()
	out, err := os.Create(dst)
	if err != nil {
		return fmt.Errorf("dedupbench: %w", err)
	}
	if _, err := io.Copy(out, in); err != nil {
		out.Close()
		return fmt.Errorf("dedupbench: copy %s: %w", src, err)
	}
	if err := out.Close(); err != nil {
		return fmt.Errorf("dedupbench: %w", err)
	}
	return nil
}
