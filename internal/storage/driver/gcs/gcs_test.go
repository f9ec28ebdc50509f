package gcs

import (
	"context"
	"crypto/rand"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"cloud.google.com/go/storage"
	"go.yaml.in/yaml/v3"
	"google.golang.org/api/googleapi"
	"google.golang.org/api/iterator"
	"google.golang.org/api/option"

	"github.com/cairn-registry/cairn/internal/storage/driver"
	"github.com/cairn-registry/cairn/internal/storage/driver/testsuite"
)

// endpoint returns the fake-gcs-server URL scripts/services/fakegcs.sh
// exports, skipping the test without one (failing it on CI).
func endpoint(t *testing.T) string {
	t.Helper()
	ep := os.Getenv("CAIRN_TEST_GCS_ENDPOINT")
	if ep == "" {
		if os.Getenv("CI") == "true" {
			t.Fatal("CAIRN_TEST_GCS_ENDPOINT is not set (start fake-gcs-server with scripts/services/fakegcs.sh)")
		}
		t.Skip("CAIRN_TEST_GCS_ENDPOINT is not set (start fake-gcs-server with scripts/services/fakegcs.sh)")
	}
	return ep
}

// newBucket creates a bucket with a random name on the server at ep and
// empties and removes it when the test ends. The client it returns talks to
// the bucket behind the driver's back.
func newBucket(t *testing.T, ep string) (*storage.BucketHandle, string) {
	t.Helper()
	ctx := context.Background()
	c, err := storage.NewClient(ctx, option.WithoutAuthentication(), option.WithEndpoint(ep+"/storage/v1/"))
	if err != nil {
		t.Fatalf("storage client: %v", err)
	}
	name := "cairn-test-" + strings.ToLower(rand.Text()[:16])
	b := c.Bucket(name)
	if err := b.Create(ctx, "cairn-test", nil); err != nil {
		t.Fatalf("create bucket %s: %v", name, err)
	}
	t.Cleanup(func() {
		defer c.Close()
		for _, key := range bucketKeys(t, b) {
			if err := b.Object(key).Delete(ctx); err != nil {
				t.Errorf("cleanup: delete %s: %v", key, err)
			}
		}
		if err := b.Delete(ctx); err != nil {
			t.Errorf("cleanup: delete bucket %s: %v", name, err)
		}
	})
	return b, name
}

// bucketKeys lists every key in b.
func bucketKeys(t *testing.T, b *storage.BucketHandle) []string {
	t.Helper()
	var keys []string
	it := b.Objects(context.Background(), nil)
	for {
		attrs, err := it.Next()
		if errors.Is(err, iterator.Done) {
			return keys
		}
		if err != nil {
			t.Fatalf("list bucket: %v", err)
		}
		keys = append(keys, attrs.Name)
	}
}

func newTestDriver(t *testing.T, p Parameters, opts ...option.ClientOption) *Driver {
	t.Helper()
	d, err := newDriver(context.Background(), p, opts...)
	if err != nil {
		t.Fatalf("newDriver: %v", err)
	}
	t.Cleanup(func() { d.Close() })
	return d
}

func TestSuite(t *testing.T) {
	ep := endpoint(t)
	testsuite.Run(t, func(t *testing.T) driver.Driver {
		_, bucket := newBucket(t, ep)
		return newTestDriver(t, Parameters{Bucket: bucket, Endpoint: ep})
	})
}

// recorder is an http.RoundTripper that records the driver's requests and
// how many were in flight at once.
type recorder struct {
	base http.RoundTripper
	// delay holds each DELETE so that concurrent ones overlap visibly.
	delay time.Duration
	// deny, when it matches, answers 403 without asking the server.
	deny func(*http.Request) bool

	mu       sync.Mutex
	reqs     []*http.Request
	inFlight atomic.Int64
	peak     atomic.Int64
}

func (r *recorder) RoundTrip(req *http.Request) (*http.Response, error) {
	n := r.inFlight.Add(1)
	defer r.inFlight.Add(-1)
	for p := r.peak.Load(); n > p && !r.peak.CompareAndSwap(p, n); p = r.peak.Load() {
	}
	r.mu.Lock()
	r.reqs = append(r.reqs, req)
	r.mu.Unlock()
	if r.deny != nil && r.deny(req) {
		return &http.Response{
			StatusCode: http.StatusForbidden,
			Status:     "403 Forbidden",
			Header:     http.Header{"Content-Type": {"application/json"}},
			Body:       io.NopCloser(strings.NewReader(`{"error":{"code":403,"message":"denied by the test"}}`)),
			Request:    req,
		}, nil
	}
	if req.Method == http.MethodDelete && r.delay > 0 {
		time.Sleep(r.delay)
	}
	return r.base.RoundTrip(req)
}

// taken returns the requests recorded so far and forgets them.
func (r *recorder) taken() []*http.Request {
	r.mu.Lock()
	defer r.mu.Unlock()
	reqs := r.reqs
	r.reqs = nil
	return reqs
}

// objectOf returns the object a JSON API request names, or "" for bucket
// level requests (listings).
func objectOf(req *http.Request, bucket string) string {
	key, _ := strings.CutPrefix(req.URL.Path, "/storage/v1/b/"+bucket+"/o/")
	if key == req.URL.Path {
		return ""
	}
	return key
}

func TestDeleteFilesRequests(t *testing.T) {
	ep := endpoint(t)
	ctx := context.Background()
	_, bucket := newBucket(t, ep)
	plain := newTestDriver(t, Parameters{Bucket: bucket, Endpoint: ep})
	var paths, wantKeys []string
	for i := range 24 {
		p := testsuite.BlobDataPath("/r", i)
		if err := plain.PutContent(ctx, p, []byte(p)); err != nil {
			t.Fatalf("PutContent: %v", err)
		}
		paths = append(paths, p)
	}
	for i := range 8 {
		paths = append(paths, fmt.Sprintf("/r/missing/%d/data", i))
	}
	for _, p := range paths {
		wantKeys = append(wantKeys, p[1:])
	}

	const limit = 4
	rec := &recorder{base: http.DefaultTransport, delay: 20 * time.Millisecond}
	d := newTestDriver(t, Parameters{Bucket: bucket, Endpoint: ep, MaxDeleteConcurrency: limit},
		option.WithHTTPClient(&http.Client{Transport: rec}))
	n, err := d.DeleteFiles(ctx, paths)
	if n != len(paths) || err != nil {
		t.Fatalf("DeleteFiles(%d paths, %d missing) = %d, %v; want %d, nil", len(paths), 8, n, err, len(paths))
	}
	var gotKeys []string
	for _, req := range rec.taken() {
		if req.Method != http.MethodDelete {
			t.Errorf("DeleteFiles sent %s %s; want only DELETEs (no listing, no stat)", req.Method, req.URL)
			continue
		}
		gotKeys = append(gotKeys, objectOf(req, bucket))
	}
	slices.Sort(gotKeys)
	slices.Sort(wantKeys)
	if !slices.Equal(gotKeys, wantKeys) {
		t.Errorf("DELETE requests for %d objects %q, want one per path: %q", len(gotKeys), gotKeys, wantKeys)
	}
	peak := rec.peak.Load()
	t.Logf("%d DELETEs, at most %d in flight (limit %d)", len(gotKeys), peak, limit)
	if peak > limit {
		t.Errorf("%d DELETEs in flight at once, more than maxdeleteconcurrency %d", peak, limit)
	}
	if peak < 2 {
		t.Errorf("at most %d DELETE in flight: the deletes ran one at a time", peak)
	}
	if err := plain.Walk(ctx, "/", func(fi driver.FileInfo) error {
		return fmt.Errorf("%s is still there", fi.Path)
	}); err != nil {
		t.Errorf("after DeleteFiles: %v", err)
	}
}

func TestDeleteFilesReportsEveryFailure(t *testing.T) {
	ep := endpoint(t)
	ctx := context.Background()
	_, bucket := newBucket(t, ep)
	plain := newTestDriver(t, Parameters{Bucket: bucket, Endpoint: ep})
	ok := []string{"/f/ok0", "/f/ok1", "/f/ok2"}
	denied := []string{"/f/deny0", "/f/deny1"}
	for _, p := range slices.Concat(ok, denied) {
		if err := plain.PutContent(ctx, p, []byte("x")); err != nil {
			t.Fatalf("PutContent: %v", err)
		}
	}
	rec := &recorder{base: http.DefaultTransport, deny: func(req *http.Request) bool {
		return req.Method == http.MethodDelete && strings.Contains(req.URL.Path, "deny")
	}}
	d := newTestDriver(t, Parameters{Bucket: bucket, Endpoint: ep}, option.WithHTTPClient(&http.Client{Transport: rec}))
	paths := slices.Concat([]string{denied[0]}, ok, []string{"/f/missing", denied[1]})
	n, err := d.DeleteFiles(ctx, paths)
	if n != len(ok)+1 {
		t.Errorf("DeleteFiles counted %d paths gone, want %d (the deleted and the missing)", n, len(ok)+1)
	}
	var joined interface{ Unwrap() []error }
	if !errors.As(err, &joined) || len(joined.Unwrap()) != len(denied) {
		t.Fatalf("DeleteFiles error %v, want one error per denied path (%d)", err, len(denied))
	}
	for i, e := range joined.Unwrap() {
		var ge *googleapi.Error
		if !strings.Contains(e.Error(), denied[i]) || !errors.As(e, &ge) || ge.Code != http.StatusForbidden {
			t.Errorf("failure %d = %v, want the 403 for %s", i, e, denied[i])
		}
	}
	if got := len(rec.taken()); got != len(paths) {
		t.Errorf("%d requests for %d paths; want one each (a 403 is not retried)", got, len(paths))
	}
	for _, p := range denied {
		if _, err := plain.Stat(ctx, p); err != nil {
			t.Errorf("Stat(%s) after a denied delete: %v", p, err)
		}
	}
	if err := plain.Delete(ctx, "/f"); err != nil {
		t.Fatalf("Delete(/f): %v", err)
	}
}

func TestWalkRequests(t *testing.T) {
	ep := endpoint(t)
	ctx := context.Background()
	_, bucket := newBucket(t, ep)
	rec := &recorder{base: http.DefaultTransport}
	d := newTestDriver(t, Parameters{Bucket: bucket, Endpoint: ep}, option.WithHTTPClient(&http.Client{Transport: rec}))
	d.pageSize = 5
	var files []string
	for i := range 30 {
		files = append(files, fmt.Sprintf("/w/a/%02d", i))
	}
	files = append(files, "/w/b", "/w/c/d")
	for _, p := range files {
		if err := d.PutContent(ctx, p, []byte(p)); err != nil {
			t.Fatalf("PutContent: %v", err)
		}
	}
	listings := func() int {
		n := 0
		for _, req := range rec.taken() {
			if req.Method != http.MethodGet || objectOf(req, bucket) != "" {
				t.Errorf("Walk sent %s %s; want only listings", req.Method, req.URL)
			}
			n++
		}
		return n
	}
	rec.taken()

	var got []string
	if err := d.Walk(ctx, "/w", func(fi driver.FileInfo) error {
		got = append(got, fi.Path)
		return nil
	}); err != nil {
		t.Fatalf("Walk: %v", err)
	}
	if want := slices.Concat([]string{"/w/a"}, files[:30], []string{"/w/b", "/w/c", "/w/c/d"}); !slices.Equal(got, want) {
		t.Errorf("Walk = %q, want %q", got, want)
	}
	if n := listings(); n != 7 {
		t.Errorf("Walk over 32 keys sent %d listings with 5 keys a page, want 7", n)
	}

	got = nil
	if err := d.Walk(ctx, "/w", func(fi driver.FileInfo) error {
		got = append(got, fi.Path)
		if fi.Path == "/w/a" {
			return driver.ErrSkipDir
		}
		return nil
	}); err != nil {
		t.Fatalf("Walk: %v", err)
	}
	if want := []string{"/w/a", "/w/b", "/w/c", "/w/c/d"}; !slices.Equal(got, want) {
		t.Errorf("Walk skipping /w/a = %q, want %q", got, want)
	}
	if n := listings(); n != 2 {
		t.Errorf("Walk skipping a 30-key directory sent %d listings, want 2 (it resumes after the directory)", n)
	}
	if err := d.Delete(ctx, "/w"); err != nil {
		t.Fatalf("Delete: %v", err)
	}
}

// TestAppendPastComponentLimit appends more times than a composite object
// may have components and checks content, sizes and leftovers.
func TestAppendPastComponentLimit(t *testing.T) {
	ep := endpoint(t)
	ctx := context.Background()
	b, bucket := newBucket(t, ep)
	d := newTestDriver(t, Parameters{Bucket: bucket, Endpoint: ep, ChunkSize: minChunkSize})
	d.maxComponents = 3
	const p = "/up/data"
	var want []byte
	for i := range 8 {
		w, err := d.Writer(ctx, p, i > 0)
		if err != nil {
			t.Fatalf("Writer %d: %v", i, err)
		}
		if w.Size() != int64(len(want)) {
			t.Fatalf("writer %d: Size() = %d, want %d", i, w.Size(), len(want))
		}
		chunk := []byte(fmt.Sprintf("part %d;", i))
		if i == 4 {
			// Several upload chunks in one append.
			chunk = make([]byte, 2*minChunkSize+17)
			_, _ = rand.Read(chunk)
		}
		if _, err := w.Write(chunk); err != nil {
			t.Fatalf("writer %d: Write: %v", i, err)
		}
		want = append(want, chunk...)
		if w.Size() != int64(len(want)) {
			t.Fatalf("writer %d: Size() = %d after Write, want %d", i, w.Size(), len(want))
		}
		if i == 7 {
			err = w.Commit(ctx)
		} else {
			err = w.Close()
		}
		if err != nil {
			t.Fatalf("writer %d: finish: %v", i, err)
		}
		attrs, err := b.Object("up/data").Attrs(ctx)
		if err != nil {
			t.Fatalf("Attrs: %v", err)
		}
		if n := components(attrs); n > d.maxComponents {
			t.Fatalf("after writer %d the object has %d components, limit %d", i, n, d.maxComponents)
		}
	}
	if got, err := d.GetContent(ctx, p); err != nil || string(got) != string(want) {
		t.Fatalf("GetContent = %d bytes, %v; want the %d bytes of all writers", len(got), err, len(want))
	}
	if keys := bucketKeys(t, b); !slices.Equal(keys, []string{"up/data"}) {
		t.Fatalf("bucket holds %q, want only up/data (no parts left behind)", keys)
	}
}

func TestRootDirectory(t *testing.T) {
	ep := endpoint(t)
	ctx := context.Background()
	b, bucket := newBucket(t, ep)
	w := b.Object("outside").NewWriter(ctx)
	if _, err := w.Write([]byte("not the driver's")); err != nil {
		t.Fatal(err)
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	d := newTestDriver(t, Parameters{Bucket: bucket, Endpoint: ep, RootDirectory: "/some/root/"})
	if err := d.PutContent(ctx, "/x/y", []byte("1")); err != nil {
		t.Fatalf("PutContent: %v", err)
	}
	if keys := bucketKeys(t, b); !slices.Equal(keys, []string{"outside", "some/root/x/y"}) {
		t.Errorf("bucket keys %q, want the driver's file under some/root/", keys)
	}
	if got, err := d.List(ctx, "/"); err != nil || !slices.Equal(got, []string{"/x"}) {
		t.Errorf("List(/) = %q, %v; want [/x]", got, err)
	}
	if err := d.Delete(ctx, "/"); err != nil {
		t.Fatalf("Delete(/): %v", err)
	}
	if keys := bucketKeys(t, b); !slices.Equal(keys, []string{"outside"}) {
		t.Errorf("after Delete(/) the bucket holds %q, want only the key outside the root", keys)
	}
}

func TestCredentialsYAML(t *testing.T) {
	for name, doc := range map[string]string{
		"mapping": "credentials:\n  type: service_account\n  project_id: p\n",
		"json":    "credentials: '{\"type\": \"service_account\", \"project_id\": \"p\"}'\n",
	} {
		var p Parameters
		if err := yaml.Unmarshal([]byte(doc), &p); err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		var got map[string]string
		if err := json.Unmarshal(p.Credentials, &got); err != nil || got["type"] != "service_account" || got["project_id"] != "p" {
			t.Errorf("%s: credentials = %s (%v), want the key's fields as JSON", name, p.Credentials, err)
		}
	}
}

func TestParameterErrors(t *testing.T) {
	for _, p := range []Parameters{
		{},
		{Bucket: "b", Endpoint: "http://127.0.0.1:1", ChunkSize: minChunkSize + 1},
		{Bucket: "b", Endpoint: "http://127.0.0.1:1", ChunkSize: -minChunkSize},
		{Bucket: "b", Endpoint: "http://127.0.0.1:1", MaxDeleteConcurrency: -1},
		{Bucket: "b", Keyfile: "k.json", Credentials: Credentials("{}")},
	} {
		if d, err := New(context.Background(), p); err == nil {
			d.Close()
			t.Errorf("New(%+v) succeeded, want an error", p)
		}
	}
}

// TestReadRangeRequests checks that a range read is one ranged GET, also
// when it starts at or past the end.
func TestReadRangeRequests(t *testing.T) {
	ep := endpoint(t)
	_, bucket := newBucket(t, ep)
	rec := &testsuite.RangeRecorder{Next: http.DefaultTransport, Range: func(req *http.Request) string { return req.Header.Get("Range") }}
	d := newTestDriver(t, Parameters{Bucket: bucket, Endpoint: ep}, option.WithHTTPClient(&http.Client{Transport: rec}))
	testsuite.ReadRangeRequests(t, d, rec.Take)
}
