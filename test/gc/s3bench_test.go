package gc

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	awss3 "github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/opencontainers/go-digest"
	ocispec "github.com/opencontainers/image-spec/specs-go/v1"

	"github.com/cairn-registry/cairn/internal/bench/s3bench"
	"github.com/cairn-registry/cairn/internal/gc"
	"github.com/cairn-registry/cairn/internal/layout"
	"github.com/cairn-registry/cairn/internal/registry"
	"github.com/cairn-registry/cairn/internal/storage/driver"
	"github.com/cairn-registry/cairn/internal/storage/driver/s3"
)

// benchLatency is added to every request: a LAN or cross-region round trip.
const benchLatency = 48 * time.Millisecond

// TestGCBenchS3 is the GC benchmark on MinIO behind a proxy adding 48 ms to
// every request: M manifests with T tag index entries each, made
// unreferenced by re-tagging, collected by cairn's GC with delete-untagged,
// and the same deletions made the distribution way (for each path a listing,
// then a delete; a HEAD first for each tag index entry). It prints storage
// requests by kind and wall time for both. It runs when
// CAIRN_TEST_S3_ENDPOINT is set (scripts/services/minio.sh): the small rows
// by default, the whole matrix with CAIRN_GC_BENCH=full, chosen rows with
// CAIRN_GC_BENCH=100x20,10x1.
func TestGCBenchS3(t *testing.T) {
	endpoint := os.Getenv("CAIRN_TEST_S3_ENDPOINT")
	if endpoint == "" {
		t.Skip("CAIRN_TEST_S3_ENDPOINT is not set (scripts/services/minio.sh starts MinIO)")
	}
	params := s3.Parameters{
		Region:         os.Getenv("CAIRN_TEST_S3_REGION"),
		RegionEndpoint: endpoint,
		AccessKey:      os.Getenv("CAIRN_TEST_S3_ACCESS_KEY"),
		SecretKey:      os.Getenv("CAIRN_TEST_S3_SECRET_KEY"),
		ForcePathStyle: true,
	}
	rows := [][2]int{{1, 0}, {1, 1}, {10, 0}, {10, 1}}
	switch s := os.Getenv("CAIRN_GC_BENCH"); s {
	case "":
	case "full":
		rows = append(rows, [2]int{100, 0}, [2]int{100, 1}, [2]int{100, 20})
	default: // rows as MxT,MxT
		rows = nil
		for _, r := range strings.Split(s, ",") {
			var m, n int
			if _, err := fmt.Sscanf(r, "%dx%d", &m, &n); err != nil {
				t.Fatalf("CAIRN_GC_BENCH=%q: want full or rows such as 100x20,10x1", s)
			}
			rows = append(rows, [2]int{m, n})
		}
	}
	target, err := url.Parse(endpoint)
	if err != nil {
		t.Fatal(err)
	}
	proxy, err := s3bench.StartLatencyProxy(target, benchLatency)
	if err != nil {
		t.Fatal(err)
	}
	defer proxy.Close()

	var table []benchRow
	for _, mt := range rows {
		row := benchRow{M: mt[0], T: mt[1]}
		row.cairn, row.blobs, row.keys = runBenchSide(t, params, proxy.URL, mt[0], mt[1], false)
		naive, _, naiveKeys := runBenchSide(t, params, proxy.URL, mt[0], mt[1], true)
		row.naive = naive
		if len(row.keys) != len(naiveKeys) {
			t.Errorf("M=%d T=%d: cairn's GC left %d keys, the naive sweep %d", row.M, row.T, len(row.keys), len(naiveKeys))
		}
		// The target: bulk deletes in batches of 1000, whatever T is.
		limit := ceilDiv(row.M+row.M*row.T, 1000) + ceilDiv(row.blobs, 1000)
		if got := row.cairn.reqs["DeleteObjects"] + row.cairn.reqs["DeleteObject"]; got > int64(limit) {
			t.Errorf("M=%d T=%d: %d delete requests, want at most %d", row.M, row.T, got, limit)
		}
		table = append(table, row)
	}
	out := formatBenchTable(table)
	fmt.Print(out)
	t.Log("\n" + out)
}

type benchRow struct {
	M, T         int
	blobs        int
	cairn, naive benchSide
	keys         []string
}

type benchSide struct {
	reqs map[string]int64
	wall time.Duration
}

func ceilDiv(a, b int) int { return (a + b - 1) / b }

// countingTransport counts S3 requests by kind.
type countingTransport struct {
	base http.RoundTripper
	mu   sync.Mutex
	n    map[string]int64
}

func (c *countingTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	kind := r.Method
	q := r.URL.Query()
	switch {
	case r.Method == http.MethodGet && q.Has("list-type"):
		kind = "List"
	case r.Method == http.MethodPost && q.Has("delete"):
		kind = "DeleteObjects"
	case r.Method == http.MethodDelete:
		kind = "DeleteObject"
	case r.Method == http.MethodPut && r.Header.Get("X-Amz-Copy-Source") != "":
		kind = "Copy"
	case r.Method == http.MethodHead:
		kind = "Head"
	case r.Method == http.MethodGet:
		kind = "Get"
	case r.Method == http.MethodPut:
		kind = "Put"
	}
	c.mu.Lock()
	c.n[kind]++
	c.mu.Unlock()
	return c.base.RoundTrip(r)
}

func (c *countingTransport) snapshot() map[string]int64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	m := make(map[string]int64, len(c.n))
	for k, v := range c.n {
		m[k] = v
	}
	return m
}

// runBenchSide builds the row's registry in a fresh bucket (directly, with
// no added latency), then collects it through the proxy: with cairn's GC,
// or naively. It returns the requests and wall time of the collection, the
// number of blobs deleted and the keys left.
func runBenchSide(t *testing.T, params s3.Parameters, proxyURL string, m, tags int, naive bool) (benchSide, int, []string) {
	t.Helper()
	ctx := context.Background()
	direct := params
	var nonce [5]byte
	rand.Read(nonce[:])
	direct.Bucket = "cairn-gcbench-" + hex.EncodeToString(nonce[:])
	admin, err := s3.NewClient(ctx, direct)
	if err != nil {
		t.Fatal(err)
	}
	if err := s3.CreateBucket(ctx, admin, direct.Bucket); err != nil {
		t.Fatal(err)
	}
	defer func() {
		if err := s3.RemoveBucket(context.WithoutCancel(ctx), admin, direct.Bucket); err != nil {
			t.Error(err)
		}
	}()
	fast, err := s3.New(ctx, direct)
	if err != nil {
		t.Fatal(err)
	}
	plan := buildBenchRegistry(t, fast, m, tags)
	// S3 keeps modification times to the second, and GC keeps what is as
	// new as the second its run began.
	time.Sleep(1100 * time.Millisecond)

	ct := &countingTransport{base: http.DefaultTransport.(*http.Transport).Clone(), n: map[string]int64{}}
	slowParams := direct
	slowParams.RegionEndpoint = proxyURL
	slowParams.Transport = ct
	slow, err := s3.New(ctx, slowParams)
	if err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	if naive {
		naiveSweep(t, slow, plan)
	} else {
		rep, err := gc.Run(ctx, slow, gc.Options{DeleteUntagged: true, Delay: 0})
		if err != nil {
			t.Fatal(err)
		}
		want := gc.Deleted{Manifests: int64(m), TagIndexEntries: int64(m * tags), LayerLinks: int64(len(plan.layerLinks)), Blobs: int64(len(plan.blobs))}
		got := rep.Deleted
		got.BytesFreed = 0
		if got != want {
			t.Errorf("M=%d T=%d: deleted %+v, want %+v", m, tags, got, want)
		}
	}
	side := benchSide{reqs: ct.snapshot(), wall: time.Since(start)}

	reg := registry.New(fast, registry.Options{})
	if _, err := reg.GetManifest(ctx, "bench/app", "keep"); err != nil {
		t.Errorf("the kept image is gone: %v", err)
	}
	var keys []string
	out, err := admin.ListObjectsV2(ctx, &awss3.ListObjectsV2Input{Bucket: &direct.Bucket})
	for err == nil {
		for _, o := range out.Contents {
			if k := aws.ToString(o.Key); !strings.Contains(k, "/cairn/gc/") {
				keys = append(keys, k)
			}
		}
		if !aws.ToBool(out.IsTruncated) {
			break
		}
		out, err = admin.ListObjectsV2(ctx, &awss3.ListObjectsV2Input{Bucket: &direct.Bucket, ContinuationToken: out.NextContinuationToken})
	}
	if err != nil {
		t.Fatal(err)
	}
	left := make(map[string]bool, len(keys))
	for _, k := range keys {
		left["/"+k] = true
	}
	for _, list := range [][]string{plan.revisions, plan.tagIndex, plan.layerLinks, plan.blobs} {
		for _, p := range list {
			if left[p] {
				t.Errorf("M=%d T=%d naive=%v: %s survived", m, tags, naive, p)
			}
		}
	}
	return side, len(plan.blobs), keys
}

// benchPlan lists what the row's collection must delete.
type benchPlan struct {
	revisions, tagIndex, layerLinks, blobs []string
}

// buildBenchRegistry pushes, through the registry, a kept image tagged
// "keep" and m images each tagged with tags tags, then moves all those tags
// to the kept image: the m images are untagged, each named by tags tag
// index entries. Each has its own config and layer besides a shared one.
func buildBenchRegistry(t *testing.T, d driver.Driver, m, tags int) *benchPlan {
	t.Helper()
	ctx := context.Background()
	reg := registry.New(d, registry.Options{DeleteEnabled: true})
	const repo = "bench/app"
	upload := func(data []byte) ocispec.Descriptor {
		id, err := reg.StartUpload(ctx, repo)
		if err != nil {
			t.Fatal(err)
		}
		dg := digest.FromBytes(data)
		if _, err := reg.FinishUpload(ctx, repo, id, dg, bytes.NewReader(data), 0); err != nil {
			t.Fatal(err)
		}
		return ocispec.Descriptor{MediaType: ocispec.MediaTypeImageLayerGzip, Digest: dg, Size: int64(len(data))}
	}
	image := func(layers ...ocispec.Descriptor) []byte {
		cfg := upload(randBytes(64))
		cfg.MediaType = ocispec.MediaTypeImageConfig
		mf := ocispec.Manifest{MediaType: ocispec.MediaTypeImageManifest, Config: cfg, Layers: layers}
		mf.SchemaVersion = 2
		b, _ := json.Marshal(mf)
		return b
	}
	put := func(ref string, content []byte) {
		if _, err := reg.PutManifest(ctx, repo, ref, ocispec.MediaTypeImageManifest, content, nil); err != nil {
			t.Fatal(err)
		}
	}
	shared := upload(randBytes(512))
	keep := image(shared)
	put("keep", keep)

	plan := &benchPlan{}
	var mu sync.Mutex
	var next atomic.Int64
	var wg sync.WaitGroup
	for range 16 {
		wg.Go(func() {
			for i := int(next.Add(1) - 1); i < m; i = int(next.Add(1) - 1) {
				own := upload(randBytes(256))
				content := image(shared, own)
				dg := digest.FromBytes(content)
				put(dg.String(), content)
				var cfg ocispec.Manifest
				_ = json.Unmarshal(content, &cfg)
				mu.Lock()
				plan.revisions = append(plan.revisions, string(layout.AppendRevisionLink(nil, repo, "sha256", dg.Encoded())))
				for _, b := range []digest.Digest{dg, cfg.Config.Digest, own.Digest} {
					plan.blobs = append(plan.blobs, layout.BlobData(b))
				}
				for _, b := range []digest.Digest{cfg.Config.Digest, own.Digest} {
					plan.layerLinks = append(plan.layerLinks, string(layout.AppendLayerLink(nil, repo, "sha256", b.Encoded())))
				}
				mu.Unlock()
				for j := range tags {
					tag := fmt.Sprintf("m%d-t%d", i, j)
					put(tag, content)
					put(tag, keep)
					mu.Lock()
					plan.tagIndex = append(plan.tagIndex, string(layout.AppendTagIndexLink(nil, repo, tag, "sha256", dg.Encoded())))
					mu.Unlock()
				}
			}
		})
	}
	wg.Wait()
	return plan
}

func randBytes(n int) []byte {
	b := make([]byte, n)
	rand.Read(b)
	return b
}

// naiveSweep deletes the plan as distribution's garbage collector does:
// one path at a time, each with a HEAD first when it is a tag index entry,
// and Delete, which lists the path's prefix before deleting what it finds.
func naiveSweep(t *testing.T, d driver.Driver, plan *benchPlan) {
	ctx := context.Background()
	for _, p := range plan.tagIndex {
		if _, err := d.Stat(ctx, p); err != nil {
			t.Fatal(err)
		}
		if err := d.Delete(ctx, p); err != nil {
			t.Fatal(err)
		}
	}
	for _, list := range [][]string{plan.revisions, plan.layerLinks, plan.blobs} {
		for _, p := range list {
			if err := d.Delete(ctx, p); err != nil && !errors.Is(err, driver.ErrNotFound) {
				t.Fatal(err)
			}
		}
	}
}

func formatBenchTable(rows []benchRow) string {
	var b strings.Builder
	fmt.Fprintf(&b, "gc benchmark: MinIO behind a %v-per-request proxy; cairn = `cairn gc --delete-untagged` (mark and sweep), naive = the same deletions one path at a time (HEAD for tag entries, LIST + DELETE each)\n", benchLatency)
	fmt.Fprintf(&b, "%5s %4s %6s | %-58s %9s | %-44s %9s | %7s\n", "M", "T", "paths", "cairn requests", "wall", "naive requests", "wall", "speedup")
	for _, r := range rows {
		paths := r.M + r.M*r.T + r.blobs + 2*r.M
		fmt.Fprintf(&b, "%5d %4d %6d | %-58s %8.2fs | %-44s %8.2fs | %6.1fx\n", r.M, r.T, paths,
			kinds(r.cairn.reqs), r.cairn.wall.Seconds(), kinds(r.naive.reqs), r.naive.wall.Seconds(), r.naive.wall.Seconds()/r.cairn.wall.Seconds())
	}
	return b.String()
}

func kinds(m map[string]int64) string {
	order := []string{"List", "Get", "Head", "Put", "DeleteObjects", "DeleteObject", "Copy"}
	var parts []string
	var total int64
	for _, k := range order {
		if m[k] > 0 {
			parts = append(parts, fmt.Sprintf("%s %d", k, m[k]))
			total += m[k]
		}
	}
	return fmt.Sprintf("%d: %s", total, strings.Join(parts, ", "))
}
