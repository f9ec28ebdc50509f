package objectstore

import (
	"cmp"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/cairn-registry/cairn/internal/bench"
	"github.com/cairn-registry/cairn/internal/testutil/cairnproc"
	"github.com/cairn-registry/cairn/internal/testutil/objstore"
	"github.com/cairn-registry/cairn/test/internal/s3proxy"
)

// TestRegistryBenchS3 is `cairn bench registry` with cairn on MinIO behind
// a proxy that adds CAIRN_BENCH_S3_LATENCY (default 20ms) to every request,
// as an object store far from its registry does: push (streamed, 8 MiB
// PATCHes, monolithic) and pull MB/s per blob size (CAIRN_BENCH_S3_SIZES,
// default 64MiB,256MiB) and the S3 requests it all cost. Blob GETs are
// redirected to the store, as by default, so pulls measure MinIO.
// CAIRN_BENCH_S3=1 runs it; it asserts nothing but that every request
// succeeds.
func TestRegistryBenchS3(t *testing.T) {
	if os.Getenv("CAIRN_BENCH_S3") == "" {
		t.Skip("CAIRN_BENCH_S3=1 runs the benchmark")
	}
	latency := 20 * time.Millisecond
	if v := os.Getenv("CAIRN_BENCH_S3_LATENCY"); v != "" {
		d, err := time.ParseDuration(v)
		if err != nil {
			t.Fatalf("CAIRN_BENCH_S3_LATENCY: %v", err)
		}
		latency = d
	}
	sizes, err := bench.ParseSizes(cmp.Or(os.Getenv("CAIRN_BENCH_S3_SIZES"), "64MiB,256MiB"))
	if err != nil {
		t.Fatalf("CAIRN_BENCH_S3_SIZES: %v", err)
	}
	p, _ := objstore.S3Bucket(t, "cairn-bench-")
	proxy, err := s3proxy.Start(p.RegionEndpoint, latency)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { proxy.Close() })
	p.RegionEndpoint = proxy.URL
	srv := cairnproc.StartArgs(t, cairnproc.Binary(t), "--config", cairnproc.WriteConfig(t, "version: 0.1\nstorage:\n"+objstore.S3Section(p)))
	proxy.Reset()
	res, err := bench.RunRegistry(t.Context(), bench.Options{URL: "http://" + srv.Addr, Sizes: sizes, Repeat: 3, ManifestRequests: 2000}, testWriter{t})
	if err != nil {
		t.Fatalf("%v\n%s", err, srv.Logs())
	}
	var out strings.Builder
	if err := bench.WriteTable(&out, res); err != nil {
		t.Fatal(err)
	}
	t.Logf("cairn on MinIO + %v per request:\n%s\nS3 requests: %v", latency, out.String(), proxy.Snapshot())
}

// testWriter logs each progress line of the bench.
type testWriter struct{ t *testing.T }

func (w testWriter) Write(p []byte) (int, error) {
	w.t.Log(strings.TrimRight(string(p), "\n"))
	return len(p), nil
}
