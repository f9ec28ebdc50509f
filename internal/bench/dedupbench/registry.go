package dedupbench

import (
	"context"
	"crypto/sha256"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/opencontainers/go-digest"

	"github.com/cairn-registry/cairn/internal/bench"
	"github.com/cairn-registry/cairn/internal/bench/dataset"
)

// registryRun is one registry's life through the parts: pushed with dedup
// off, indexed by `cairn dedup run` (for (e) in mode index), deduplicated
// by `cairn dedup run` in mode full, then served in full mode.
type registryRun struct {
	opts Options
	ds   *dataset.Dataset
	logf func(string, ...any)

	dir, root, meta string
	// repoOf names a repository holding each blob.
	repoOf map[digest.Digest]string
	client *http.Client
	// ingestWall and ingestCPU add up the `cairn dedup run`s.
	ingestWall, ingestCPU time.Duration
}

func newRegistryRun(opts Options, ds *dataset.Dataset, logf func(string, ...any)) (*registryRun, error) {
	if err := os.MkdirAll(opts.WorkDir, 0o755); err != nil {
		return nil, fmt.Errorf("dedupbench: %w", err)
	}
	dir, err := os.MkdirTemp(opts.WorkDir, "registry-")
	if err != nil {
		return nil, fmt.Errorf("dedupbench: %w", err)
	}
	r := &registryRun{
		opts: opts, ds: ds, logf: logf, dir: dir,
		root:   filepath.Join(dir, "root"),
		meta:   filepath.Join(dir, "cairn-meta.db"),
		repoOf: ds.RepoOf(),
		client: &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 8}},
	}
	return r, nil
}

func (r *registryRun) cleanup() { cleanupDir(r.dir) }

// config is the run's engine config in mode, with a fresh preconstruct
// cache directory named after the phase.
func (r *registryRun) config(phase, mode string, predictor bool, prefetch string) engineConfig {
	return engineConfig{
		Root: r.root, Meta: r.meta, Mode: mode,
		CacheDir:         filepath.Join(r.dir, "cache-"+phase),
		PreconstructSize: r.opts.PreconstructSize,
		PrefetchSize:     prefetch,
		Predictor:        predictor,
		RepullRatio:      0.5,
		Parses:           r.opts.Parses,
	}
}

// pushAndTimeIntact pushes the dataset into a registry with dedup off and,
// if timeIt, times one GET of every distinct layer blob.
func (r *registryRun) pushAndTimeIntact(ctx context.Context, timeIt bool) (map[digest.Digest]time.Duration, error) {
	srv, err := startServer(ctx, r.opts.CairnBin, r.dir, "push", r.config("push", "off", false, "0"))
	if err != nil {
		return nil, err
	}
	defer srv.Stop()
	if err := dataset.Push(ctx, srv.URL, r.ds.Images, dataset.PushOptions{}); err != nil {
		return nil, err
	}
	times := map[digest.Digest]time.Duration{}
	if timeIt {
		for _, l := range r.ds.Layers {
			d, err := r.getBlob(ctx, r.client, srv.URL, l)
			if err != nil {
				return nil, err
			}
			times[l.Digest] = d
		}
	}
	return times, srv.Stop()
}

// dedup runs `cairn dedup run` in mode over the stopped registry and
// returns `cairn dedup stats`. Mode index makes and verifies the recipes
// and keeps the intact copies; a later run in mode full then only drops
// the copies.
func (r *registryRun) dedup(ctx context.Context, mode string) (*Stats, error) {
	cfg := r.config("dedup-"+mode, mode, false, "0")
	// Nothing listens there: `cairn dedup` only reads the config.
	var err error
	if cfg.Addr, err = bench.FreeAddr(); err != nil {
		return nil, err
	}
	if cfg.DebugAddr, err = bench.FreeAddr(); err != nil {
		return nil, err
	}
	path := filepath.Join(r.dir, "dedup-"+mode+".yaml")
	if err := cfg.write(path); err != nil {
		return nil, err
	}
	start := time.Now()
	out, cpu, err := runCairnCPU(ctx, r.opts.CairnBin, "dedup", "run", "--config", path)
	if err != nil {
		return nil, err
	}
	r.ingestWall += time.Since(start)
	r.ingestCPU += cpu
	lines := strings.Split(strings.TrimSpace(string(out)), "\n")
	r.logf("registry: cairn dedup run (mode %s) took %s: %s", mode, time.Since(start).Round(time.Millisecond), strings.TrimSpace(lines[len(lines)-1]))
	return dedupStats(ctx, r.opts.CairnBin, path)
}

// getBlob GETs layer l's blob, reads it to the end, checks its digest and
// returns the time to the last byte.
func (r *registryRun) getBlob(ctx context.Context, c *http.Client, base string, l *dataset.Layer) (time.Duration, error) {
	repo, ok := r.repoOf[l.Digest]
	if !ok {
		return 0, fmt.Errorf("dedupbench: no repository holds %s", l.Digest)
	}
	return GetBlob(ctx, c, base, repo, l.Digest, l.Size)
}

// GetBlob GETs blob d of repo from the registry at base, reads it to the
// end, checks its digest and size and returns the time to the last byte.
func GetBlob(ctx context.Context, c *http.Client, base, repo string, d digest.Digest, size int64) (time.Duration, error) {
	t, err := GetBlobTimed(ctx, c, base, repo, d, size)
	return t.Last, err
}

// BlobTimes are the times from a GET's start to the first byte of its
// body and to the last.
type BlobTimes struct{ First, Last time.Duration }

// GetBlobTimed is GetBlob returning the time to the body's first byte too:
// what a client waits before a rebuild (or a store) starts to stream.
func GetBlobTimed(ctx context.Context, c *http.Client, base, repo string, d digest.Digest, size int64) (BlobTimes, error) {
	start := time.Now()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, base+"/v2/"+repo+"/blobs/"+d.String(), nil)
	if err != nil {
		return BlobTimes{}, err
	}
	resp, err := c.Do(req)
	if err != nil {
		return BlobTimes{}, fmt.Errorf("dedupbench: GET blob %s: %w", d, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return BlobTimes{}, fmt.Errorf("dedupbench: GET blob %s from %s: %s", d, repo, resp.Status)
	}
	h := sha256.New()
	body := &firstRead{r: resp.Body, start: start}
	n, err := io.Copy(h, body)
	t := BlobTimes{First: body.first, Last: time.Since(start)}
	if err != nil {
		return BlobTimes{}, fmt.Errorf("dedupbench: GET blob %s: %w", d, err)
	}
	if got := digest.NewDigest(digest.SHA256, h); got != d || n != size {
		return BlobTimes{}, fmt.Errorf("dedupbench: GET blob %s from %s returned %d bytes hashing to %s", d, repo, n, got)
	}
	return t, nil
}

// firstRead notes when its first bytes arrive, as time since start.
type firstRead struct {
	r     io.Reader
	start time.Time
	first time.Duration
}

func (f *firstRead) Read(p []byte) (int, error) {
	n, err := f.r.Read(p)
	if n > 0 && f.first == 0 {
		f.first = time.Since(f.start)
	}
	return n, err
}

// StorageFigures are figures (a) and (b), from `cairn dedup stats`.
type StorageFigures struct {
	// LogicalBytes is the compressed size of every layer dedup knows.
	LogicalBytes int64 `json:"logicalBytes"`
	// FileLevelBytes is what storage would hold with unique files kept
	// uncompressed: files.bytes + recipes + intact copies.
	FileLevelBytes int64   `json:"fileLevelBytes"`
	FileLevelRatio float64 `json:"fileLevelRatio"`
	// StoredBytes is what storage holds (unique files zstd-compressed).
	StoredBytes int64   `json:"storedBytes"`
	ZstdRatio   float64 `json:"zstdRatio"`
	// Layers by state; Reproduced is deduplicated over all layers.
	Layers         int64   `json:"layers"`
	Deduplicated   int64   `json:"deduplicated"`
	Irreproducible int64   `json:"irreproducible"`
	Intact         int64   `json:"intact"`
	Pending        int64   `json:"pending"`
	Reproduced     float64 `json:"reproduced"`
	// BlobRatio is what blob-level sharing alone saves over storing
	// every image's layers separately: ImageBytes over BlobBytes.
	BlobRatio float64 `json:"blobRatio"`
	Stats     *Stats  `json:"stats"`
	// Apparent and OnDisk are the bytes of the storage root's files after
	// dedup, and what the filesystem allocates for them (du).
	Apparent int64 `json:"apparentBytes"`
	OnDisk   int64 `json:"onDiskBytes"`
	// IngestSeconds and IngestCPUSeconds are the wall and CPU (user and
	// system) time of the `cairn dedup run`s that deduplicated the layers;
	// IngestMBps and IngestMBpsPerCore are LogicalBytes over them.
	IngestSeconds     float64 `json:"ingestSeconds"`
	IngestCPUSeconds  float64 `json:"ingestCPUSeconds"`
	IngestMBps        float64 `json:"ingestMBps"`
	IngestMBpsPerCore float64 `json:"ingestMBpsPerCore"`
}

func storageFigures(st *Stats, res *Result, wall, cpu time.Duration) *StorageFigures {
	f := &StorageFigures{
		IngestSeconds:    wall.Seconds(),
		IngestCPUSeconds: cpu.Seconds(),
		LogicalBytes:     st.LogicalBytes,
		FileLevelBytes:   st.Files.Bytes + st.StoredBytes.Recipes + st.StoredBytes.Intact,
		StoredBytes:      st.StoredBytes.Total,
		Deduplicated:     st.Layers["deduplicated"],
		Irreproducible:   st.Layers["irreproducible"],
		Intact:           st.Layers["intact"],
		Pending:          st.Layers["pending"],
		Stats:            st,
	}
	for _, n := range st.Layers {
		f.Layers += n
	}
	f.FileLevelRatio = ratio(f.LogicalBytes, f.FileLevelBytes)
	f.ZstdRatio = ratio(f.LogicalBytes, f.StoredBytes)
	f.Reproduced = ratio(f.Deduplicated, f.Layers)
	f.BlobRatio = ratio(res.ImageBytes, res.BlobBytes)
	if wall > 0 && cpu > 0 {
		f.IngestMBps = float64(f.LogicalBytes) / 1e6 / wall.Seconds()
		f.IngestMBpsPerCore = float64(f.LogicalBytes) / 1e6 / cpu.Seconds()
	}
	return f
}

func ratio(a, b int64) float64 {
	if b == 0 {
		return 0
	}
	return float64(a) / float64(b)
}

// LatencyFigures are figure (d): the GET latency of the layers the engine
// deduplicated, p50 over those layers, in three states.
type LatencyFigures struct {
	// Layers is how many layers were restored on GET (a preconstruct
	// miss); Bytes their blob bytes. Others were served intact in full
	// mode (irreproducible) and are left out.
	Layers int   `json:"layers"`
	Bytes  int64 `json:"bytes"`
	Others int   `json:"others"`
	// Intact: the same layers from the registry before dedup (mode off);
	// Cold: first GET from a fresh server with an empty preconstruct
	// cache; Hit: the GET after, from the preconstruct cache.
	Intact GetTimes `json:"intact"`
	Cold   GetTimes `json:"cold"`
	Hit    GetTimes `json:"hit"`
}

// GetTimes summarises GETs of a set of layers.
type GetTimes struct {
	P50Ms float64 `json:"p50Ms"`
	P99Ms float64 `json:"p99Ms"`
	MaxMs float64 `json:"maxMs"`
	// MBps is all bytes over all time (10^6 bytes/s).
	MBps float64 `json:"mbps"`
}

func getTimes(ds []time.Duration, bytes int64) GetTimes {
	if len(ds) == 0 {
		return GetTimes{}
	}
	s := slices.Clone(ds)
	slices.Sort(s)
	var total time.Duration
	for _, d := range s {
		total += d
	}
	return GetTimes{P50Ms: ms(s[(len(s)-1)/2]), P99Ms: ms(nearestRank(s, 99)), MaxMs: ms(s[len(s)-1]), MBps: mbps(bytes, total)}
}

// nearestRank is the p-th percentile of sorted (not empty): the smallest
// value at least p% of them do not exceed.
func nearestRank(sorted []time.Duration, p int) time.Duration {
	rank := (p*len(sorted) + 99) / 100
	return sorted[max(1, min(rank, len(sorted)))-1]
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

// cacheGet GETs layer l from srv and returns how long it took and how it
// moved the preconstruct cache's counts (a miss rebuilt it, a hit did not).
func (r *registryRun) cacheGet(ctx context.Context, srv *server, l *dataset.Layer) (time.Duration, cacheCounts, error) {
	before, err := scrape(ctx, r.client, srv.MetricsURL)
	if err != nil {
		return 0, cacheCounts{}, err
	}
	d, err := r.getBlob(ctx, r.client, srv.URL, l)
	if err != nil {
		return 0, cacheCounts{}, err
	}
	after, err := scrape(ctx, r.client, srv.MetricsURL)
	if err != nil {
		return 0, cacheCounts{}, err
	}
	return d, countsOf(after.sub(before), "preconstruct"), nil
}

// latency serves the deduplicated registry in full mode, with prediction
// and prefetch off, and GETs every layer twice.
func (r *registryRun) latency(ctx context.Context, intact map[digest.Digest]time.Duration) (*LatencyFigures, error) {
	srv, err := startServer(ctx, r.opts.CairnBin, r.dir, "latency", r.config("latency", "full", false, "0"))
	if err != nil {
		return nil, err
	}
	defer srv.Stop()
	fig := &LatencyFigures{}
	var restored []*dataset.Layer
	var intactT, cold, hit []time.Duration
	for _, l := range r.ds.Layers {
		d, moved, err := r.cacheGet(ctx, srv, l)
		if err != nil {
			return nil, err
		}
		if moved.Misses == 0 {
			fig.Others++
			continue
		}
		restored = append(restored, l)
		cold = append(cold, d)
		intactT = append(intactT, intact[l.Digest])
		fig.Bytes += l.Size
	}
	for _, l := range restored {
		d, moved, err := r.cacheGet(ctx, srv, l)
		if err != nil {
			return nil, err
		}
		if moved.Hits == 0 {
			return nil, fmt.Errorf("dedupbench: second GET of %s was no preconstruct cache hit (cache %s too small?)", l.Digest, r.opts.PreconstructSize)
		}
		hit = append(hit, d)
	}
	fig.Layers = len(restored)
	fig.Intact = getTimes(intactT, fig.Bytes)
	fig.Cold = getTimes(cold, fig.Bytes)
	fig.Hit = getTimes(hit, fig.Bytes)
	r.logf("latency: %d layers restored on GET, %d served otherwise", fig.Layers, fig.Others)
	return fig, srv.Stop()
}
