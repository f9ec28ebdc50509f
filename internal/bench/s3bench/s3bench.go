// Package s3bench measures what the s3 driver's bulk DeleteFiles saves over
// distribution's way of deleting, one DeleteObject request per file in
// sequence as its garbage collector does, against a real S3-compatible
// server reached through a proxy that adds a fixed latency to every request
// (a LAN or cross-region round trip to a local MinIO). Only tests run it:
// TestDeleteBench here (with CAIRN_S3_BENCH=1), and test/gc's TestGCBenchS3
// takes its LatencyProxy; `cairn bench` does not.
package s3bench

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"sync"
	"sync/atomic"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	awss3 "github.com/aws/aws-sdk-go-v2/service/s3"

	"github.com/cairn-registry/cairn/internal/layout"
	"github.com/cairn-registry/cairn/internal/storage/driver/s3"
)

// Config says what to measure where.
type Config struct {
	// Server holds the endpoint and credentials of the server; its Bucket
	// is ignored (a fresh bucket is made and removed).
	Server  s3.Parameters
	Files   int           // files to delete each way; default 10000
	Latency time.Duration // added to every request; default 48ms
}

// Result holds the measured figures.
type Result struct {
	Files           int
	Latency         time.Duration
	Bulk            time.Duration // DeleteFiles of all files
	BulkRequests    int64
	PerFile         time.Duration // one DeleteObject per file, in sequence
	PerFileRequests int64
}

// Speedup is how many times faster DeleteFiles was.
func (r Result) Speedup() float64 { return r.PerFile.Seconds() / r.Bulk.Seconds() }

func (r Result) String() string {
	return fmt.Sprintf("delete %d files, %v per request: DeleteFiles %v (%d requests), one DeleteObject per file %v (%d requests): %.1fx faster",
		r.Files, r.Latency, r.Bulk.Round(time.Millisecond), r.BulkRequests,
		r.PerFile.Round(time.Millisecond), r.PerFileRequests, r.Speedup())
}

// Run puts cfg.Files files into a fresh bucket (directly, without the added
// latency), deletes them with DeleteFiles through the proxy, puts them
// again and deletes them one DeleteObject at a time through the proxy.
func Run(ctx context.Context, cfg Config) (res Result, err error) {
	if cfg.Files <= 0 {
		cfg.Files = 10000
	}
	if cfg.Latency == 0 {
		cfg.Latency = 48 * time.Millisecond
	}
	res = Result{Files: cfg.Files, Latency: cfg.Latency}
	direct := cfg.Server
	direct.Bucket = "cairn-bench-" + randomHex(6)
	admin, err := s3.NewClient(ctx, direct)
	if err != nil {
		return res, err
	}
	if err := s3.CreateBucket(ctx, admin, direct.Bucket); err != nil {
		return res, err
	}
	defer func() {
		if rerr := s3.RemoveBucket(context.WithoutCancel(ctx), admin, direct.Bucket); rerr != nil && err == nil {
			err = rerr
		}
	}()
	target, err := url.Parse(direct.RegionEndpoint)
	if err != nil {
		return res, fmt.Errorf("s3bench: endpoint: %w", err)
	}
	proxy, err := StartLatencyProxy(target, cfg.Latency)
	if err != nil {
		return res, err
	}
	defer proxy.Close()
	slow := direct
	slow.RegionEndpoint = proxy.URL
	slowDriver, err := s3.New(ctx, slow)
	if err != nil {
		return res, err
	}
	slowClient, err := s3.NewClient(ctx, slow)
	if err != nil {
		return res, err
	}
	fast, err := s3.New(ctx, direct)
	if err != nil {
		return res, err
	}

	paths := make([]string, cfg.Files)
	for i := range paths {
		paths[i] = blobPath(i)
	}

	if err := putAll(ctx, fast, paths); err != nil {
		return res, err
	}
	proxy.Requests.Store(0)
	start := time.Now()
	n, err := slowDriver.DeleteFiles(ctx, paths)
	res.Bulk, res.BulkRequests = time.Since(start), proxy.Requests.Load()
	if err != nil || n != len(paths) {
		return res, fmt.Errorf("s3bench: DeleteFiles = %d, %v; want %d", n, err, len(paths))
	}
	if err := wantEmpty(ctx, admin, direct.Bucket); err != nil {
		return res, err
	}

	if err := putAll(ctx, fast, paths); err != nil {
		return res, err
	}
	proxy.Requests.Store(0)
	start = time.Now()
	for _, p := range paths {
		// rootdirectory is empty: the key is the path without its "/".
		if _, err := slowClient.DeleteObject(ctx, &awss3.DeleteObjectInput{Bucket: &direct.Bucket, Key: aws.String(p[1:])}); err != nil {
			return res, fmt.Errorf("s3bench: DeleteObject: %w", err)
		}
	}
	res.PerFile, res.PerFileRequests = time.Since(start), proxy.Requests.Load()
	return res, wantEmpty(ctx, admin, direct.Bucket)
}

// blobPath is the registry's data path of blob i.
func blobPath(i int) string {
	sum := sha256.Sum256(fmt.Appendf(nil, "bench blob %d", i))
	return string(layout.AppendBlobData(nil, "sha256", hex.EncodeToString(sum[:])))
}

func putAll(ctx context.Context, d *s3.Driver, paths []string) error {
	next := make(chan string)
	var (
		wg   sync.WaitGroup
		mu   sync.Mutex
		errs []error
	)
	for range 32 {
		wg.Go(func() {
			for p := range next {
				if err := d.PutContent(ctx, p, []byte(p)); err != nil {
					mu.Lock()
					errs = append(errs, err)
					mu.Unlock()
				}
			}
		})
	}
	for _, p := range paths {
		next <- p
	}
	close(next)
	wg.Wait()
	return errors.Join(errs...)
}

func wantEmpty(ctx context.Context, client *awss3.Client, bucket string) error {
	out, err := client.ListObjectsV2(ctx, &awss3.ListObjectsV2Input{Bucket: &bucket, MaxKeys: aws.Int32(1)})
	if err != nil {
		return fmt.Errorf("s3bench: listing: %w", err)
	}
	if len(out.Contents) > 0 {
		return fmt.Errorf("s3bench: %s is still there after the deletes", aws.ToString(out.Contents[0].Key))
	}
	return nil
}

func randomHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// LatencyProxy is a reverse proxy on a loopback port that waits Latency
// before forwarding each request, and counts them.
type LatencyProxy struct {
	URL      string
	Requests atomic.Int64
	srv      *http.Server
}

// StartLatencyProxy starts a proxy to target that delays every request.
func StartLatencyProxy(target *url.URL, latency time.Duration) (*LatencyProxy, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, fmt.Errorf("s3bench: proxy: %w", err)
	}
	p := &LatencyProxy{URL: "http://" + ln.Addr().String()}
	rp := &httputil.ReverseProxy{
		Rewrite: func(r *httputil.ProxyRequest) {
			r.SetURL(target)
			// SigV4 signs the Host header: keep the one the client signed.
			r.Out.Host = r.In.Host
		},
		Transport: &http.Transport{MaxIdleConnsPerHost: 256},
	}
	p.srv = &http.Server{
		Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			p.Requests.Add(1)
			select {
			case <-time.After(latency):
			case <-r.Context().Done():
				return
			}
			rp.ServeHTTP(w, r)
		}),
		ReadHeaderTimeout: time.Minute,
	}
	go func() { _ = p.srv.Serve(ln) }()
	return p, nil
}

// Close stops the proxy.
func (p *LatencyProxy) Close() error { return p.srv.Close() }
