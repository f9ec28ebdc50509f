package redirect

import (
	"bufio"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/google/go-containerregistry/pkg/v1/remote"

	"github.com/cairn-registry/cairn/internal/testutil/clitool"
	"github.com/cairn-registry/cairn/internal/testutil/objstore"
	"github.com/cairn-registry/cairn/internal/testutil/regtest"
	"github.com/cairn-registry/cairn/test/internal/s3proxy"
)

// TestRedirectBytes measures what redirects take off cairn: two servers
// on one MinIO bucket behind the latency proxy (20 ms per request), one
// redirecting and one with storage.redirect.disable, pull the same image
// with crane in interleaved rounds. It prints the response bytes each
// server sent, the bytes the store sent, and the pull times, side by side.
// Only the pulls' success is asserted.
//
// A benchmark, skipped unless CAIRN_BENCH_REDIRECT is set (rounds, e.g. 3):
//
//	CAIRN_SKIP_INSTALL=1 CAIRN_SERVICES=minio CAIRN_BENCH_REDIRECT=3 \
//	  CAIRN_TEST_PKGS="-v -run TestRedirectBytes ./test/redirect/" scripts/test.sh
func TestRedirectBytes(t *testing.T) {
	rounds, _ := strconv.Atoi(os.Getenv("CAIRN_BENCH_REDIRECT"))
	if rounds < 1 {
		t.Skip("CAIRN_BENCH_REDIRECT is not set (rounds): a benchmark, not run by default")
	}
	crane := clitool.Path(t, "crane")
	p, _ := objstore.S3Bucket(t, "cairn-redirect-bench-")
	proxy, err := s3proxy.Start(p.RegionEndpoint, 20*time.Millisecond)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { proxy.Close() })
	slow := p
	slow.RegionEndpoint = proxy.URL
	section := objstore.S3Section(slow)
	on := start(t, "version: 0.1\nstorage:\n"+section)
	off := start(t, "version: 0.1\nstorage:\n"+section+"  redirect:\n    disable: true\n")

	const layers, size = 4, 16 << 20
	img := regtest.RandomImage(t, layers, size)
	if err := remote.Write(regtest.Ref(t, on.Addr, "bench/img:v1"), img); err != nil {
		t.Fatal(err)
	}
	type result struct {
		cairn, store int64
		took         time.Duration
	}
	pull := func(s *server) result {
		beforeCairn, beforeStore := s.bodyBytes(t), proxy.Snapshot()
		start := time.Now()
		clitool.NewSession(t).Run(t, crane, "pull", "--insecure", "--format=oci", s.Addr+"/bench/img:v1", filepath.Join(t.TempDir(), "o"))
		return result{s.bodyBytes(t) - beforeCairn, proxy.Snapshot().Sub(beforeStore).Down, time.Since(start)}
	}
	var sum [2]result
	for r := range rounds {
		for i, s := range []*server{on, off} {
			res := pull(s)
			t.Logf("round %d, redirects %-3s: cairn sent %9d bytes, the store %9d, pull %v",
				r+1, map[int]string{0: "on", 1: "off"}[i], res.cairn, res.store, res.took.Round(time.Millisecond))
			sum[i].cairn += res.cairn
			sum[i].store += res.store
			sum[i].took += res.took
		}
	}
	t.Logf("%d layers of %d MiB, %d rounds, 20 ms per store request: bytes through cairn on/off = %d/%d = %.5f; pull time on/off = %.2f",
		layers, size>>20, rounds, sum[0].cairn, sum[1].cairn, float64(sum[0].cairn)/float64(sum[1].cairn),
		float64(sum[0].took)/float64(sum[1].took))
}

// bodyBytes is the response body bytes s sent, all routes.
func (s *server) bodyBytes(t *testing.T) int64 {
	t.Helper()
	resp, err := http.Get(s.debug + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var n float64
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		if rest, ok := strings.CutPrefix(sc.Text(), "cairn_http_response_body_bytes_total{"); ok {
			f := strings.Fields(rest[strings.Index(rest, "}")+1:])
			v, err := strconv.ParseFloat(f[0], 64)
			if err != nil {
				t.Fatal(err)
			}
			n += v
		}
	}
	return int64(n)
}
