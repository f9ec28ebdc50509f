package s3

import (
	"context"
	"crypto/md5"
	"encoding/base64"
	"encoding/xml"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws/ratelimit"
	"github.com/aws/aws-sdk-go-v2/aws/retry"
	"github.com/aws/aws-sdk-go-v2/service/s3"

	"github.com/cairn-registry/cairn/internal/storage/driver"
)

// fakeDeleteServer answers DeleteObjects requests with whatever respond
// returns for the keys of each request, so tests can craft per-key errors
// and throttling that a real server produces only under load.
type fakeDeleteServer struct {
	t       *testing.T
	respond func(call int, keys []string) (status int, body string)

	mu       sync.Mutex
	calls    [][]string
	inFlight int
	maxIn    int
}

func (f *fakeDeleteServer) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodPost || !r.URL.Query().Has("delete") {
		f.t.Errorf("unexpected request %s %s", r.Method, r.URL)
		http.Error(w, "unexpected", http.StatusBadRequest)
		return
	}
	body, _ := io.ReadAll(r.Body)
	sum := md5.Sum(body)
	if got := r.Header.Get("Content-MD5"); got != base64.StdEncoding.EncodeToString(sum[:]) {
		f.t.Errorf("DeleteObjects Content-MD5 %q does not match its body", got)
	}
	var req struct {
		Quiet   bool
		Objects []struct{ Key string } `xml:"Object"`
	}
	if err := xml.Unmarshal(body, &req); err != nil {
		f.t.Errorf("DeleteObjects body: %v", err)
	}
	if !req.Quiet {
		f.t.Errorf("DeleteObjects without Quiet")
	}
	keys := make([]string, len(req.Objects))
	for i, o := range req.Objects {
		keys[i] = o.Key
	}
	f.mu.Lock()
	call := len(f.calls)
	f.calls = append(f.calls, keys)
	f.inFlight++
	f.maxIn = max(f.maxIn, f.inFlight)
	f.mu.Unlock()
	status, resp := f.respond(call, keys)
	f.mu.Lock()
	f.inFlight--
	f.mu.Unlock()
	w.Header().Set("Content-Type", "application/xml")
	w.WriteHeader(status)
	io.WriteString(w, resp)
}

func (f *fakeDeleteServer) driver(t *testing.T, p Parameters) *Driver {
	srv := httptest.NewServer(f)
	t.Cleanup(srv.Close)
	p.Bucket = "fake"
	p.RegionEndpoint = srv.URL
	p.Region = "us-east-1"
	p.AccessKey, p.SecretKey = "k", "s"
	p.ForcePathStyle = true
	d := mustNew(t, p, func(o *s3.Options) {
		o.Retryer = retry.NewStandard(func(so *retry.StandardOptions) {
			so.MaxAttempts = 3
			so.RateLimiter = ratelimit.None
			so.Backoff = retry.BackoffDelayerFunc(func(int, error) (time.Duration, error) { return time.Millisecond, nil })
		})
	})
	d.keyRetry.base, d.keyRetry.max = time.Millisecond, time.Millisecond
	return d
}

func deleteResult(errs ...string) string {
	var b strings.Builder
	b.WriteString(`<?xml version="1.0" encoding="UTF-8"?><DeleteResult xmlns="http://s3.amazonaws.com/doc/2006-03-01/">`)
	for i := 0; i+1 < len(errs); i += 2 {
		fmt.Fprintf(&b, "<Error><Key>%s</Key><Code>%s</Code><Message>%s failed</Message></Error>", errs[i], errs[i+1], errs[i])
	}
	b.WriteString("</DeleteResult>")
	return b.String()
}

const slowDown = `<?xml version="1.0" encoding="UTF-8"?><Error><Code>SlowDown</Code><Message>Please reduce your request rate.</Message></Error>`

// TestDeleteFilesResponseHandling covers per-key errors and throttling: a
// 503 SlowDown is retried by the SDK, keys reported as SlowDown or
// InternalError are sent again (alone), NoSuchKey counts as deleted, and
// the rest are returned, one error per path.
func TestDeleteFilesResponseHandling(t *testing.T) {
	f := &fakeDeleteServer{t: t}
	f.respond = func(call int, keys []string) (int, string) {
		switch call {
		case 0:
			return http.StatusServiceUnavailable, slowDown
		case 1:
			return http.StatusOK, deleteResult("a", "SlowDown", "b", "InternalError", "c", "AccessDenied", "d", "NoSuchKey")
		case 2:
			return http.StatusOK, deleteResult("a", "SlowDown")
		default:
			return http.StatusOK, deleteResult()
		}
	}
	d := f.driver(t, Parameters{})
	paths := []string{"/a", "/b", "/c", "/d", "/e", "/bad//path"}
	n, err := d.DeleteFiles(context.Background(), paths)
	if n != 4 {
		t.Errorf("DeleteFiles counted %d deleted, want 4 (a, b, d, e)", n)
	}
	errs := joined(err)
	var ie driver.InvalidPathError
	var de *DeleteError
	if len(errs) != 2 || !errors.As(errs[0], &ie) || ie.Path != "/bad//path" ||
		!errors.As(errs[1], &de) || de.Path != "/c" || de.Code != "AccessDenied" {
		t.Errorf("DeleteFiles error = %v, want the invalid path and AccessDenied for /c", err)
	}
	want := [][]string{{"a", "b", "c", "d", "e"}, {"a", "b", "c", "d", "e"}, {"a", "b"}, {"a"}}
	if !slices.EqualFunc(f.calls, want, slices.Equal) {
		t.Errorf("DeleteObjects requests carried keys %q, want %q", f.calls, want)
	}
}

// TestDeleteFilesGiveUp checks that nothing is dropped when retries run out:
// a key still throttled is reported with its code, and a request that fails
// as a whole reports every path it carried.
func TestDeleteFilesGiveUp(t *testing.T) {
	f := &fakeDeleteServer{t: t}
	f.respond = func(call int, keys []string) (int, string) {
		if slices.Contains(keys, "x/throttled") {
			return http.StatusOK, deleteResult("x/throttled", "SlowDown")
		}
		return http.StatusServiceUnavailable, slowDown
	}
	d := f.driver(t, Parameters{RootDirectory: "x", DeleteBatchSize: 2, MaxAttempts: 4})
	n, err := d.DeleteFiles(context.Background(), []string{"/throttled", "/ok", "/p1", "/p2"})
	if n != 1 {
		t.Errorf("DeleteFiles counted %d deleted, want 1", n)
	}
	var gotThrottled bool
	var failed []string
	for _, e := range joined(err) {
		var de *DeleteError
		var be *BatchError
		switch {
		case errors.As(e, &de) && de.Path == "/throttled" && de.Code == "SlowDown":
			gotThrottled = true
		case errors.As(e, &be) && httpStatus(be.Err) == http.StatusServiceUnavailable:
			failed = append(failed, be.Paths...)
		default:
			t.Errorf("unexpected error %v", e)
		}
	}
	if !gotThrottled || !slices.Equal(failed, []string{"/p1", "/p2"}) {
		t.Errorf("DeleteFiles error = %v, want SlowDown for /throttled and a failed batch of /p1 /p2", err)
	}
	// 4 tries of the throttled key (the first with /ok), 3 SDK attempts of
	// the batch of /p1 and /p2.
	if len(f.calls) != 7 {
		t.Errorf("%d DeleteObjects requests, want 7: %q", len(f.calls), f.calls)
	}
}

// TestDeleteFilesConcurrency checks that batches go out in parallel, never
// more than maxdeleteconcurrency at a time, and that the batch size holds.
func TestDeleteFilesConcurrency(t *testing.T) {
	f := &fakeDeleteServer{t: t}
	f.respond = func(int, []string) (int, string) {
		time.Sleep(20 * time.Millisecond)
		return http.StatusOK, deleteResult()
	}
	d := f.driver(t, Parameters{MaxDeleteConcurrency: 3, DeleteBatchSize: 10})
	paths := make([]string, 95)
	for i := range paths {
		paths[i] = fmt.Sprintf("/f%d", i)
	}
	n, err := d.DeleteFiles(context.Background(), paths)
	if n != len(paths) || err != nil {
		t.Fatalf("DeleteFiles = %d, %v; want %d, nil", n, err, len(paths))
	}
	if len(f.calls) != 10 {
		t.Errorf("%d requests, want 10 of at most 10 keys", len(f.calls))
	}
	if f.maxIn > 3 || f.maxIn < 2 {
		t.Errorf("%d requests were in flight at once, want 2 or 3 (limit 3)", f.maxIn)
	}
}

func TestParameters(t *testing.T) {
	for _, p := range []Parameters{
		{},
		{Bucket: "b", ChunkSize: 5<<20 - 1},
		{Bucket: "b", DeleteBatchSize: 1001},
		{Bucket: "b", AccessKey: "only"},
		{Bucket: "b", KeyID: "k"},
		{Bucket: "b", LogLevel: "loud"},
	} {
		if _, err := New(context.Background(), p); err == nil {
			t.Errorf("New(%+v) succeeded", p)
		}
	}
	d, err := New(context.Background(), Parameters{Bucket: "b", Region: "eu-west-1", RootDirectory: "/reg/"})
	if err != nil {
		t.Fatal(err)
	}
	if got := d.key("/docker/registry/v2/x"); got != "reg/docker/registry/v2/x" {
		t.Errorf("key = %q, want distribution's reg/docker/registry/v2/x", got)
	}
	if d.chunkSize != DefaultChunkSize || d.deleteBatchSize != 1000 || d.deleteConcurrency != DefaultMaxDeleteConcurrency {
		t.Errorf("defaults: chunk %d, batch %d, concurrency %d", d.chunkSize, d.deleteBatchSize, d.deleteConcurrency)
	}
	if got := d.copySource("reg/a+b=c:d@e"); got != "b/reg/a%2Bb%3Dc%3Ad%40e" {
		t.Errorf("copySource = %q", got)
	}
}
