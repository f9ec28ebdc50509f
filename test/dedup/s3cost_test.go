package dedup

import (
	"bytes"
	"errors"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"testing"
	"text/tabwriter"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	awss3 "github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/opencontainers/go-digest"

	"github.com/cairn-registry/cairn/internal/bench/dataset"
	"github.com/cairn-registry/cairn/internal/bench/dedupbench"
	"github.com/cairn-registry/cairn/internal/layout"
	"github.com/cairn-registry/cairn/internal/storage/driver"
	"github.com/cairn-registry/cairn/internal/storage/driver/s3"
	"github.com/cairn-registry/cairn/internal/testutil/cairnproc"
	"github.com/cairn-registry/cairn/internal/testutil/objstore"
	"github.com/cairn-registry/cairn/test/internal/s3proxy"
)

// S3 Standard list prices (us-east-1): PUT, COPY, POST and LIST requests;
// GET, HEAD and the rest; storage. DELETE and abort are free.
const (
	priceTier1      = 0.005 / 1000
	priceTier2      = 0.0004 / 1000
	priceGBMonth    = 0.023
	bytesPerGB      = 1 << 30 // S3 bills a GB as 2^30 bytes
	daysPerMonth    = 730.0 / 24
	s3costLatency   = 20 * time.Millisecond // a same-region S3 first byte
	s3costWorkers   = 8
	s3costBucketPfx = "cairn-s3cost-"
)

// TestDedupS3Cost measures what file-level dedup costs on an object store:
// the dataset's images are pushed intact into MinIO (started by
// scripts/test.sh) through a proxy adding a fixed latency to every request,
// then `cairn dedup run` deduplicates them in mode full, and every layer is
// GET intact before (redirected to the store, as S3 serves clients, and
// through cairn) and restored cold after (no preconstruct cache). It
// prints S3 requests by operation and per layer, wall times, storage saved
// and the break-even time at S3 list prices. Only correctness is asserted:
// every layer pulls byte-exact.
//
// It is a benchmark, skipped unless CAIRN_BENCH_S3COST is small or full
// (the dataset profile; full downloads ~300 MB of debs once). Optional:
// CAIRN_BENCH_S3COST_BIN (the cairn binary; default $CAIRN_BIN, which
// scripts/test.sh sets to bin/cairn), CAIRN_BENCH_S3COST_LATENCY (default
// 20ms), CAIRN_BENCH_S3COST_WORKERS (dedup workers, default 8: the request
// count does not depend on it, the dedup run's wall time does),
// CAIRN_BENCH_S3COST_PARSES=1 (storage.dedup.packs.parses on: files stored
// as parses, level-6 layers rebuilt by following them),
// CAIRN_BENCH_S3COST_COMPARE (a second cairn binary: the store the first
// built is then restored cold by each in turn, twice, and the walls are
// printed side by side; build the store with the older of the two, since a
// newer worker's recipes need not rebuild on an older binary). E.g.:
//
//	CAIRN_SKIP_INSTALL=1 CAIRN_SERVICES=minio CAIRN_BENCH_S3COST=small \
//	  CAIRN_TEST_PKGS="-v -run TestDedupS3Cost -timeout 3h ./test/dedup/" scripts/test.sh
func TestDedupS3Cost(t *testing.T) {
	profile := dataset.Profile(os.Getenv("CAIRN_BENCH_S3COST"))
	if profile == "" {
		t.Skip("CAIRN_BENCH_S3COST is not set (small or full): a benchmark, not run by default")
	}
	if profile != dataset.ProfileSmall && profile != dataset.ProfileFull {
		t.Fatalf("CAIRN_BENCH_S3COST=%q: want small or full", profile)
	}
	bin := os.Getenv("CAIRN_BENCH_S3COST_BIN")
	if bin == "" {
		bin = cairnproc.Binary(t)
	}
	latency := s3costLatency
	if v := os.Getenv("CAIRN_BENCH_S3COST_LATENCY"); v != "" {
		var err error
		if latency, err = time.ParseDuration(v); err != nil {
			t.Fatalf("CAIRN_BENCH_S3COST_LATENCY: %v", err)
		}
	}
	workers := s3costWorkers
	if v := os.Getenv("CAIRN_BENCH_S3COST_WORKERS"); v != "" {
		var err error
		if workers, err = strconv.Atoi(v); err != nil || workers < 1 {
			t.Fatalf("CAIRN_BENCH_S3COST_WORKERS=%q: want a positive number", v)
		}
	}
	parses := os.Getenv("CAIRN_BENCH_S3COST_PARSES") == "1"
	compare := os.Getenv("CAIRN_BENCH_S3COST_COMPARE")
	ctx := t.Context()
	direct, _ := objstore.S3Bucket(t, s3costBucketPfx)

	cache := dataset.DefaultCacheDir()
	// The same work dir as `cairn-lab dedup`, so either reuses the other's build.
	ds, err := dataset.Build(ctx, dataset.Options{
		Profile: profile, CacheDir: cache,
		WorkDir: filepath.Join(cache, "work-"+string(profile), "dataset"), Log: testLog{t},
	})
	if errors.Is(err, dataset.ErrNoApt) {
		t.Skip(err)
	}
	if err != nil {
		t.Fatal(err)
	}

	proxy, err := s3proxy.Start(direct.RegionEndpoint, latency)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { proxy.Close() })
	slow := direct
	slow.RegionEndpoint = proxy.URL
	// Straight to MinIO, uncounted: the bucket listing and layer states.
	directDriver, err := s3.New(ctx, direct)
	if err != nil {
		t.Fatal(err)
	}
	admin, err := s3.NewClient(ctx, direct)
	if err != nil {
		t.Fatal(err)
	}

	dir := t.TempDir()
	offCfg := writeS3CostConfig(t, dir, "off", slow, workers, parses, true)
	proxiedCfg := writeS3CostConfig(t, dir, "off", slow, workers, parses, false)
	fullCfg := writeS3CostConfig(t, dir, "full", slow, workers, parses, true)
	b := &s3costRun{t: t, proxy: proxy, ds: ds, repoOf: ds.RepoOf(), client: &http.Client{}}

	// A registry without dedup: push, then GET every layer intact, as
	// clients do on S3 (a 307 to a signed URL they follow to the store),
	// and again with the bytes served through cairn.
	srv := b.start(bin, offCfg, "serve startup (mode off)")
	b.measure("push (mode off)", 0, func() error { return dataset.Push(ctx, srv.URL, ds.Images, dataset.PushOptions{}) })
	intact := b.getAll(srv.URL)
	srv.Stop()
	proxied := b.servePass(bin, proxiedCfg, "serve startup (mode off, no redirect)")
	before := bucketUsage(t, admin, direct.Bucket)

	var dedupOut []byte
	b.measure("cairn dedup run (mode full)", len(ds.Layers), func() error {
		cmd := exec.CommandContext(ctx, bin, "dedup", "run", "--config", fullCfg)
		// The worker spools layers under the user cache dir: keep it in the test's.
		cmd.Env = append(os.Environ(), "XDG_CACHE_HOME="+filepath.Join(dir, "xdg-cache"))
		var stderr bytes.Buffer
		cmd.Stderr = &stderr
		var err error
		if dedupOut, err = cmd.Output(); err != nil {
			return fmt.Errorf("cairn dedup run: %v\n%s%s", err, dedupOut, stderr.Bytes())
		}
		return nil
	})
	t.Logf("%s", bytes.TrimSpace(dedupOut))
	after := bucketUsage(t, admin, direct.Bucket)
	deduped := dedupedLayers(t, directDriver, ds)

	// The same store served in mode full with no restore cache: every GET
	// of a deduplicated layer is a cold restore.
	cold := b.servePass(bin, fullCfg, "serve startup (mode full)")
	var rounds [][2]pass
	if compare != "" {
		// Alternating, so that a drift of the machine's load shows as a
		// difference between rounds rather than between binaries.
		for r := range 2 {
			var round [2]pass
			for i, bb := range []string{bin, compare} {
				if r == 0 && i == 0 {
					round[0] = cold
					continue
				}
				round[i] = b.servePass(bb, fullCfg, fmt.Sprintf("serve startup (mode full, round %d, %s)", r+1, bb))
			}
			rounds = append(rounds, round)
		}
	}

	var out strings.Builder
	b.report(&out, reportInput{
		profile: profile, latency: latency, workers: workers, parses: parses, bin: bin,
		intact: intact, proxied: proxied, cold: cold, deduped: deduped, before: before, after: after,
	})
	if compare != "" {
		reportSideBySide(&out, bin, compare, rounds, deduped)
	}
	// Printed rather than logged: the table reads better without t.Log's
	// indentation (go test shows it with -v).
	fmt.Print(out.String())
}

// testLog sends the dataset's progress lines to t.Log.
type testLog struct{ t *testing.T }

func (l testLog) Write(p []byte) (int, error) {
	l.t.Log(strings.TrimRight(string(p), "\n"))
	return len(p), nil
}

// writeS3CostConfig writes a config on storage s3 through the proxy in
// dedup mode, with the restore caches and the predictor off so that each
// GET of a deduplicated layer restores it from storage.
func writeS3CostConfig(t *testing.T, dir, mode string, p s3.Parameters, workers int, parses, redirect bool) string {
	t.Helper()
	yml := fmt.Sprintf(`version: 0.1
log: {level: warn}
storage:
  redirect: {disable: %v}
%s  dedup:
    mode: %s
    workers: %d
    metadata: {path: %q}
    cache:
      preconstruct: {dir: %q, size: "0"}
      prefetch: {size: "0"}
    predictor: {enabled: false}
    packs: {parses: %v}
`, !redirect, objstore.S3Section(p), mode, workers, filepath.Join(dir, "meta.db"), filepath.Join(dir, "preconstruct-"+mode), parses)
	path := filepath.Join(dir, fmt.Sprintf("config-%s-%v.yml", mode, redirect))
	if err := os.WriteFile(path, []byte(yml), 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

// s3costRun holds the measurements of one run.
type s3costRun struct {
	t      *testing.T
	proxy  *s3proxy.Proxy
	ds     *dataset.Dataset
	repoOf map[digest.Digest]string
	client *http.Client
	phases []phase
}

// phase is one measured step: its wall time and the requests it made.
type phase struct {
	name   string
	layers int // for the per-layer figure; 0: none
	wall   time.Duration
	first  time.Duration // of GETs: their times to the first byte, summed
	reqs   s3proxy.Counts
}

// measure runs f and records its wall time and requests as a phase.
func (b *s3costRun) measure(name string, layers int, f func() error) {
	b.t.Helper()
	c0, t0 := b.proxy.Snapshot(), time.Now()
	if err := f(); err != nil {
		b.t.Fatalf("%s: %v", name, err)
	}
	ph := phase{name: name, layers: layers, wall: time.Since(t0), reqs: b.proxy.Snapshot().Sub(c0)}
	b.phases = append(b.phases, ph)
	b.t.Logf("%s: %s, %s", name, ph.wall.Round(time.Millisecond), ph.reqs)
}

// start runs cairn serve with cfg and records its startup requests.
func (b *s3costRun) start(bin, cfg, name string) *cairnproc.Server {
	var srv *cairnproc.Server
	b.measure(name, 0, func() error {
		srv = cairnproc.StartArgs(b.t, bin, "--config", cfg)
		return nil
	})
	return srv
}

// pass is one serve's GET of every layer, and the CPU time the serve
// process used in all (its startup and shutdown too, small beside the
// GETs): with the wall time it tells whether a pass waited on the store or
// on the CPU.
type pass struct {
	gets []layerGet
	cpu  time.Duration
}

// servePass starts bin with cfg, GETs every layer and stops it.
func (b *s3costRun) servePass(bin, cfg, name string) pass {
	srv := b.start(bin, cfg, name)
	p := pass{gets: b.getAll(srv.URL)}
	srv.Stop()
	if _, ps := srv.Exited(); ps != nil {
		p.cpu = ps.UserTime() + ps.SystemTime()
	}
	return p
}

// coresBusy is the pass's CPU time over its GETs' wall time.
func (p pass) coresBusy() float64 {
	var wall time.Duration
	for _, g := range p.gets {
		wall += g.wall
	}
	return p.cpu.Seconds() / wall.Seconds()
}

// layerGet is one layer's GET: times to the first and last byte of its
// body, and its requests.
type layerGet struct {
	layer *dataset.Layer
	first time.Duration
	wall  time.Duration
	reqs  s3proxy.Counts
}

// getAll GETs every distinct layer, one at a time so that each GET's
// requests are its own, and checks each byte-exact (digest and size).
func (b *s3costRun) getAll(base string) []layerGet {
	b.t.Helper()
	gets := make([]layerGet, 0, len(b.ds.Layers))
	for i, l := range b.ds.Layers {
		c0 := b.proxy.Snapshot()
		tm, err := dedupbench.GetBlobTimed(b.t.Context(), b.client, base, b.repoOf[l.Digest], l.Digest, l.Size)
		if err != nil {
			b.t.Fatalf("layer %d of %d (%s): %v", i+1, len(b.ds.Layers), l.Description, err)
		}
		g := layerGet{layer: l, first: tm.First, wall: tm.Last, reqs: b.proxy.Snapshot().Sub(c0)}
		gets = append(gets, g)
		b.t.Logf("layer %d of %d (%.1f MB, %d files): first byte %s, last %s, %d requests", i+1, len(b.ds.Layers), float64(l.Size)/1e6, l.Files,
			tm.First.Round(time.Millisecond), tm.Last.Round(time.Millisecond), g.reqs.Total())
	}
	return gets
}

// usage is the bucket's content by kind of object.
type usage struct {
	objects, bytes int64
	byKind         map[string][2]int64 // kind -> objects, bytes
}

// bucketUsage lists the bucket straight from MinIO and sums object sizes
// by kind: blob data, recipes, cairn/<dir> (unique files, packs, ...) and
// the rest (links, manifests' revisions, tags).
func bucketUsage(t *testing.T, client *awss3.Client, bucket string) usage {
	t.Helper()
	u := usage{byKind: map[string][2]int64{}}
	pages := awss3.NewListObjectsV2Paginator(client, &awss3.ListObjectsV2Input{Bucket: aws.String(bucket)})
	for pages.HasMorePages() {
		page, err := pages.NextPage(t.Context())
		if err != nil {
			t.Fatalf("list bucket: %v", err)
		}
		for _, o := range page.Contents {
			size := aws.ToInt64(o.Size)
			k := objectKind(aws.ToString(o.Key))
			v := u.byKind[k]
			u.byKind[k] = [2]int64{v[0] + 1, v[1] + size}
			u.objects++
			u.bytes += size
		}
	}
	return u
}

// objectKind names the kind of a bucket key (rootdirectory /registry).
func objectKind(key string) string {
	p := "/" + strings.TrimPrefix(key, "registry/")
	switch {
	case strings.HasPrefix(p, layout.BlobsDir+"/") && strings.HasSuffix(p, "/"+layout.BlobDataLeaf):
		return "blob data"
	case strings.HasPrefix(p, layout.BlobsDir+"/") && strings.HasSuffix(p, "/"+layout.BlobRecipeLeaf):
		return "recipes"
	case strings.HasPrefix(p, layout.CairnDir+"/"):
		rest := strings.TrimPrefix(p, layout.CairnDir+"/")
		top, _, _ := strings.Cut(rest, "/")
		return "cairn/" + top
	}
	return "other"
}

// dedupedLayers returns the layers whose intact copy is gone and whose
// recipe is there: those a GET restores. The rest stayed intact.
func dedupedLayers(t *testing.T, d driver.Driver, ds *dataset.Dataset) map[digest.Digest]bool {
	t.Helper()
	has := func(p string) bool {
		_, err := d.Stat(t.Context(), p)
		if err != nil && !errors.Is(err, driver.ErrNotFound) {
			t.Fatal(err)
		}
		return err == nil
	}
	m := map[digest.Digest]bool{}
	for _, l := range ds.Layers {
		data, recipe := has(layout.BlobData(l.Digest)), has(layout.BlobRecipe(l.Digest))
		if !data && !recipe {
			t.Fatalf("layer %s (%s) has neither data nor recipe", l.Digest, l.Description)
		}
		if !data {
			m[l.Digest] = true
		}
	}
	return m
}

// cost is the price of the requests in c at list prices.
func cost(c s3proxy.Counts) float64 {
	return float64(c.InClass(s3proxy.ClassTier1))*priceTier1 + float64(c.InClass(s3proxy.ClassTier2))*priceTier2
}

type reportInput struct {
	profile dataset.Profile
	latency time.Duration
	workers int
	parses  bool
	bin     string
	// intact: GETs redirected to the store; proxied: the same layers'
	// bytes served through cairn; cold: after dedup, through cairn.
	intact        []layerGet
	proxied, cold pass
	deduped       map[digest.Digest]bool
	before, after usage
}

// sumGets adds up the GETs of the layers keep selects.
func sumGets(gets []layerGet, keep func(*dataset.Layer) bool) phase {
	var ph phase
	for _, g := range gets {
		if keep(g.layer) {
			ph.layers++
			ph.wall += g.wall
			ph.first += g.first
			ph.reqs = ph.reqs.Add(g.reqs)
		}
	}
	return ph
}

func mbs(n int64) string { return fmt.Sprintf("%.1f", float64(n)/1e6) }

// report prints the phases as a table by S3 operation, then storage, the
// restore comparison and the break-even.
func (b *s3costRun) report(w *strings.Builder, in reportInput) {
	all := func(*dataset.Layer) bool { return true }
	isDeduped := func(l *dataset.Layer) bool { return in.deduped[l.Digest] }
	isIntact := func(l *dataset.Layer) bool { return !in.deduped[l.Digest] }
	rows := append([]phase(nil), b.phases...)
	named := func(gets []layerGet, name string, keep func(*dataset.Layer) bool) phase {
		ph := sumGets(gets, keep)
		ph.name = name
		return ph
	}
	intactAll := named(in.intact, "GET every layer, stored intact (redirected)", all)
	intactSame := named(in.intact, "  the layers dedup restores, intact", isDeduped)
	proxiedAll := named(in.proxied.gets, "GET every layer intact through cairn", all)
	proxiedSame := named(in.proxied.gets, "  the layers dedup restores, through cairn", isDeduped)
	coldAll := named(in.cold.gets, "GET every layer, after dedup (cold)", all)
	coldDeduped := named(in.cold.gets, "  restored on GET (cold)", isDeduped)
	coldIntact := named(in.cold.gets, "  left intact (irreproducible)", isIntact)
	rows = append(rows, intactAll, intactSame, proxiedAll, proxiedSame, coldAll, coldDeduped, coldIntact)
	var dedupRun phase
	for _, ph := range b.phases {
		if strings.HasPrefix(ph.name, "cairn dedup run") {
			dedupRun = ph
		}
	}

	ds := b.ds
	fmt.Fprintf(w, "\nS3 cost of file-level dedup: dataset %s, %d images, %d distinct layers (%s MB of blobs, %d files in their tars)\n",
		in.profile, len(ds.Images), len(ds.Layers), mbs(ds.LogicalBytes()), datasetFiles(ds))
	fmt.Fprintf(w, "MinIO behind a proxy adding %s per request; cairn %s; dedup workers %d; parses %v; GETs one layer at a time; MB = 10^6 bytes\n\n",
		in.latency, in.bin, in.workers, in.parses)

	// Only the operations some row used get a column.
	var ops []s3proxy.Op
	for _, o := range s3proxy.Ops() {
		for _, r := range rows {
			if r.reqs.Of(o) != 0 {
				ops = append(ops, o)
				break
			}
		}
	}
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprint(tw, "phase\tlayers\twall s\trequests\tper layer")
	for _, o := range ops {
		fmt.Fprintf(tw, "\t%s", o)
	}
	fmt.Fprint(tw, "\t4xx\tMB down\tMB up\tcost $\t\n")
	for _, r := range rows {
		per := "-"
		if r.layers > 0 {
			per = fmt.Sprintf("%.1f", float64(r.reqs.Total())/float64(r.layers))
		}
		layers := "-"
		if r.layers > 0 {
			layers = strconv.Itoa(r.layers)
		}
		fmt.Fprintf(tw, "%s\t%s\t%.2f\t%d\t%s", r.name, layers, r.wall.Seconds(), r.reqs.Total(), per)
		for _, o := range ops {
			fmt.Fprintf(tw, "\t%d", r.reqs.Of(o))
		}
		fmt.Fprintf(tw, "\t%d\t%s\t%s\t%.6f\t\n", r.reqs.Failed, mbs(r.reqs.Down), mbs(r.reqs.Up), cost(r.reqs))
	}
	tw.Flush()

	fmt.Fprintf(w, "\nbucket (listed straight from MinIO): before dedup %s MB in %d objects, after %s MB in %d objects\n",
		mbs(in.before.bytes), in.before.objects, mbs(in.after.bytes), in.after.objects)
	tw = tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprint(tw, "kind\tobjects before\tMB before\tobjects after\tMB after\t\n")
	for _, k := range sortedKinds(in.before, in.after) {
		bv, av := in.before.byKind[k], in.after.byKind[k]
		fmt.Fprintf(tw, "%s\t%d\t%s\t%d\t%s\t\n", k, bv[0], mbs(bv[1]), av[0], mbs(av[1]))
	}
	tw.Flush()

	saved := in.before.bytes - in.after.bytes
	monthly := float64(saved) / bytesPerGB * priceGBMonth
	fmt.Fprintf(w, "\nstorage saved: %s MB (ratio %.2f); at $%.3f per GB-month: $%.5f a month\n",
		mbs(saved), ratioOf(in.before.bytes, in.after.bytes), priceGBMonth, monthly)
	fmt.Fprintf(w, "cold restore of the %d deduplicated layers: %.2f s vs %.2f s intact through cairn (%.1fx), %.2f s redirected to the store (%.1fx); %.1f requests per layer vs %.1f\n",
		coldDeduped.layers, coldDeduped.wall.Seconds(), proxiedSame.wall.Seconds(), ratioOf(int64(coldDeduped.wall), int64(proxiedSame.wall)),
		intactSame.wall.Seconds(), ratioOf(int64(coldDeduped.wall), int64(intactSame.wall)),
		perLayer(coldDeduped), perLayer(proxiedSame))
	fmt.Fprintf(w, "time to the first byte, summed over those layers: %.2f s intact through cairn, %.2f s redirected, %.2f s cold (the rest of each wall streams)\n",
		proxiedSame.first.Seconds(), intactSame.first.Seconds(), coldDeduped.first.Seconds())
	fmt.Fprintf(w, "serve's CPU time over each pass (all layers): intact through cairn %.1f s (%.2f cores busy on average), cold %.1f s (%.2f cores busy) on %d cores\n",
		in.proxied.cpu.Seconds(), in.proxied.coresBusy(), in.cold.cpu.Seconds(), in.cold.coresBusy(), runtime.NumCPU())
	fmt.Fprintf(w, "request cost (S3 Standard list: PUT/COPY/POST/LIST $0.005, GET/HEAD $0.0004 per 1000, DELETE free):\n")
	fmt.Fprintf(w, "  dedup run $%.6f; break-even after %s of the saving\n", cost(dedupRun.reqs), breakEven(cost(dedupRun.reqs), monthly))
	fmt.Fprintf(w, "  one cold GET of every layer $%.6f (= %s of the saving); intact $%.6f\n",
		cost(coldAll.reqs), breakEven(cost(coldAll.reqs), monthly), cost(intactAll.reqs))
	fmt.Fprintf(w, "targets (issues 11, 27): cold restore <= 2x intact through cairn: %s, redirected: %s; <= 20 requests per layer: %s; break-even under a week: %s\n",
		yesNo(ratioOf(int64(coldDeduped.wall), int64(proxiedSame.wall)) <= 2), yesNo(ratioOf(int64(coldDeduped.wall), int64(intactSame.wall)) <= 2),
		yesNo(perLayer(coldDeduped) <= 20),
		yesNo(monthly > 0 && cost(dedupRun.reqs)/monthly*daysPerMonth < 7))
}

// reportSideBySide prints each round's cold restore of the deduplicated
// layers by both binaries and the second's wall over the first's.
func reportSideBySide(w *strings.Builder, bin, compare string, rounds [][2]pass, deduped map[digest.Digest]bool) {
	isDeduped := func(l *dataset.Layer) bool { return deduped[l.Digest] }
	fmt.Fprintf(w, "\nside by side, cold restore of the deduplicated layers (same store, built by the first):\n")
	for r, round := range rounds {
		a, c := sumGets(round[0].gets, isDeduped), sumGets(round[1].gets, isDeduped)
		fmt.Fprintf(w, "  round %d: %s %.2f s (%.1f requests per layer, %.2f cores busy), %s %.2f s (%.1f per layer, %.2f cores busy): %.3fx\n",
			r+1, bin, a.wall.Seconds(), perLayer(a), round[0].coresBusy(), compare, c.wall.Seconds(), perLayer(c), round[1].coresBusy(), ratioOf(int64(c.wall), int64(a.wall)))
	}
}

func datasetFiles(ds *dataset.Dataset) int {
	n := 0
	for _, l := range ds.Layers {
		n += l.Files
	}
	return n
}

func perLayer(ph phase) float64 {
	if ph.layers == 0 {
		return 0
	}
	return float64(ph.reqs.Total()) / float64(ph.layers)
}

func ratioOf(a, b int64) float64 {
	if b == 0 {
		return 0
	}
	return float64(a) / float64(b)
}

// breakEven says how long the monthly saving takes to pay for c.
func breakEven(c, monthly float64) string {
	if monthly <= 0 {
		return "never (nothing saved)"
	}
	days := c / monthly * daysPerMonth
	if days < 60 {
		return fmt.Sprintf("%.1f days", days)
	}
	if days < 730 {
		return fmt.Sprintf("%.1f months", days/daysPerMonth)
	}
	return fmt.Sprintf("%.1f years", days/365)
}

func yesNo(ok bool) string {
	if ok {
		return "met"
	}
	return "NOT met"
}

func sortedKinds(a, b usage) []string {
	seen := map[string]bool{}
	var ks []string
	for _, u := range []usage{a, b} {
		for k := range u.byKind {
			if !seen[k] {
				seen[k] = true
				ks = append(ks, k)
			}
		}
	}
	slices.Sort(ks)
	return ks
}
