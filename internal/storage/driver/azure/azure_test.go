package azure_test

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"maps"
	"net/http"
	"os"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore"
	"github.com/Azure/azure-sdk-for-go/sdk/storage/azblob/container"
	"github.com/Azure/azure-sdk-for-go/sdk/storage/azblob/lease"
	"go.yaml.in/yaml/v3"

	"github.com/cairn-registry/cairn/internal/storage/driver"
	"github.com/cairn-registry/cairn/internal/storage/driver/azure"
	"github.com/cairn-registry/cairn/internal/storage/driver/testsuite"
)

// server is the Azurite (or Azure) account the tests run against.
type server struct{ endpoint, account, key string }

// needServer returns the account from the CAIRN_TEST_AZURE_* variables
// (scripts/services/azurite.sh sets them); without them the test skips,
// or fails under CI=true.
func needServer(t *testing.T) server {
	t.Helper()
	s := server{
		endpoint: os.Getenv("CAIRN_TEST_AZURE_ENDPOINT"),
		account:  os.Getenv("CAIRN_TEST_AZURE_ACCOUNT"),
		key:      os.Getenv("CAIRN_TEST_AZURE_KEY"),
	}
	if s.endpoint == "" || s.account == "" || s.key == "" {
		msg := "CAIRN_TEST_AZURE_ENDPOINT, _ACCOUNT and _KEY are not set (start Azurite with scripts/services/azurite.sh)"
		if os.Getenv("CI") == "true" {
			t.Fatal(msg)
		}
		t.Skip(msg)
	}
	return s
}

// newContainer creates a container with a random name for this test and
// deletes it, with whatever is left in it, when the test ends.
func newContainer(t *testing.T, s server) (string, *container.Client) {
	t.Helper()
	var b [8]byte
	_, _ = rand.Read(b[:])
	name := "cairn-test-" + hex.EncodeToString(b[:])
	cred, err := container.NewSharedKeyCredential(s.account, s.key)
	if err != nil {
		t.Fatal(err)
	}
	c, err := container.NewClientWithSharedKeyCredential(strings.TrimRight(s.endpoint, "/")+"/"+name, cred, nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.Create(context.Background(), nil); err != nil {
		t.Fatalf("create container %s: %v", name, err)
	}
	t.Cleanup(func() {
		if _, err := c.Delete(context.Background(), nil); err != nil {
			t.Errorf("delete container %s: %v", name, err)
		}
	})
	return name, c
}

func params(s server, containerName string) azure.Parameters {
	return azure.Parameters{
		AccountName: s.account,
		AccountKey:  s.key,
		Container:   containerName,
		ServiceURL:  s.endpoint,
	}
}

func newDriver(t *testing.T, p azure.Parameters) *azure.Driver {
	t.Helper()
	d, err := azure.New(context.Background(), p)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	return d
}

// TestSuite runs the conformance suite with batch deletes (auto), each
// subtest in a fresh container with no rootdirectory.
func TestSuite(t *testing.T) {
	s := needServer(t)
	testsuite.Run(t, func(t *testing.T) driver.Driver {
		name, _ := newContainer(t, s)
		return newDriver(t, params(s, name))
	})
}

// TestSuiteSingleDeletes runs the suite again with batchdelete: false, the
// subtests sharing one container under their own rootdirectory.
func TestSuiteSingleDeletes(t *testing.T) {
	s := needServer(t)
	name, _ := newContainer(t, s)
	testsuite.Run(t, func(t *testing.T) driver.Driver {
		p := params(s, name)
		p.RootDirectory = "/cairn/" + strings.ReplaceAll(t.Name(), "/", "-") + "/"
		p.BatchDelete = "false"
		p.MaxDeleteConcurrency = 16
		return newDriver(t, p)
	})
}

// counter counts the requests that pass through it, by kind, and the most
// in flight at once. fail, when set, answers matching requests itself.
type counter struct {
	next     http.RoundTripper
	mu       sync.Mutex
	kinds    map[string]int
	inFlight atomic.Int64
	peak     atomic.Int64
	fail     func(*http.Request) *http.Response
}

func newCounter() *counter {
	return &counter{next: http.DefaultTransport.(*http.Transport).Clone(), kinds: map[string]int{}}
}

// kind names a request: "batch", "list", or its method.
func kind(r *http.Request) string {
	q := r.URL.Query()
	switch {
	case q.Get("comp") == "batch":
		return "batch"
	case q.Get("comp") == "list":
		return "list"
	}
	return r.Method
}

func (c *counter) RoundTrip(r *http.Request) (*http.Response, error) {
	c.mu.Lock()
	c.kinds[kind(r)]++
	c.mu.Unlock()
	n := c.inFlight.Add(1)
	defer c.inFlight.Add(-1)
	for p := c.peak.Load(); n > p && !c.peak.CompareAndSwap(p, n); p = c.peak.Load() {
	}
	if c.fail != nil {
		if resp := c.fail(r); resp != nil {
			return resp, nil
		}
	}
	return c.next.RoundTrip(r)
}

// take returns the counts so far and starts again from zero.
func (c *counter) take() map[string]int {
	c.mu.Lock()
	defer c.mu.Unlock()
	k := c.kinds
	c.kinds = map[string]int{}
	c.peak.Store(0)
	return k
}

// putFiles writes n files in the registry's blob layout and returns their paths.
func putFiles(t *testing.T, d driver.Driver, base string, n int) []string {
	t.Helper()
	paths := make([]string, n)
	for i := range paths {
		paths[i] = testsuite.BlobDataPath(base, i)
	}
	var wg sync.WaitGroup
	sem := make(chan struct{}, 32)
	for _, p := range paths {
		sem <- struct{}{}
		wg.Go(func() {
			defer func() { <-sem }()
			if err := d.PutContent(context.Background(), p, []byte(p)); err != nil {
				t.Errorf("PutContent(%s): %v", p, err)
			}
		})
	}
	wg.Wait()
	if t.Failed() {
		t.FailNow()
	}
	return paths
}

// countFiles counts the files below base.
func countFiles(t *testing.T, d driver.Driver, base string) int {
	t.Helper()
	n := 0
	err := d.Walk(context.Background(), base, func(fi driver.FileInfo) error {
		if !fi.IsDir {
			n++
		}
		return nil
	})
	if err != nil && !errors.Is(err, driver.ErrNotFound) {
		t.Fatalf("Walk(%s): %v", base, err)
	}
	return n
}

// TestDeleteFilesRequests counts the requests DeleteFiles sends for 600
// files: ceil(600/256) = 3 batch requests, or 600 single DELETEs at most
// maxdeleteconcurrency at a time, and never a listing.
func TestDeleteFilesRequests(t *testing.T) {
	s := needServer(t)
	for _, c := range []struct {
		mode string
		want map[string]int
	}{
		{"auto", map[string]int{"batch": 3}},
		{"true", map[string]int{"batch": 3}},
		{"false", map[string]int{http.MethodDelete: 600}},
	} {
		t.Run("batchdelete="+c.mode, func(t *testing.T) {
			name, _ := newContainer(t, s)
			cnt := newCounter()
			p := params(s, name)
			p.BatchDelete = c.mode
			p.MaxDeleteConcurrency = 20
			p.Transport = cnt
			d := newDriver(t, p)
			paths := putFiles(t, d, "/docker/registry/v2", 600)
			cnt.take()
			n, err := d.DeleteFiles(context.Background(), paths)
			peak := cnt.peak.Load()
			got := cnt.take()
			if n != 600 || err != nil {
				t.Fatalf("DeleteFiles(600 files) = %d, %v; want 600, nil", n, err)
			}
			if !maps.Equal(got, c.want) {
				t.Errorf("DeleteFiles(600 files) sent %v, want %v", got, c.want)
			}
			if c.mode == "false" && (peak > 20 || peak < 2) {
				t.Errorf("single deletes: %d in flight at most, want 2..20 (maxdeleteconcurrency)", peak)
			}
			if left := countFiles(t, d, "/"); left != 0 {
				t.Errorf("%d files left after DeleteFiles", left)
			}
		})
	}
}

// refuseBatches answers every blob batch request the way a service without
// the batch API does, with a 400 error.
func refuseBatches(r *http.Request) *http.Response {
	if kind(r) != "batch" {
		return nil
	}
	body := `<?xml version="1.0" encoding="utf-8"?><Error><Code>InvalidQueryParameterValue</Code>` +
		`<Message>Value for one of the query parameters specified in the request URI is invalid.</Message></Error>`
	h := http.Header{}
	h.Set("Content-Type", "application/xml")
	h.Set("x-ms-error-code", "InvalidQueryParameterValue")
	return &http.Response{
		StatusCode: http.StatusBadRequest, Status: "400 Bad Request", Proto: "HTTP/1.1", ProtoMajor: 1, ProtoMinor: 1,
		Header: h, Body: io.NopCloser(strings.NewReader(body)), ContentLength: int64(len(body)), Request: r,
	}
}

// TestBatchRefused checks that in auto mode a service that refuses the first
// batch gets single deletes from then on, and that batchdelete: true does not
// fall back but reports every file as not deleted.
func TestBatchRefused(t *testing.T) {
	s := needServer(t)
	name, _ := newContainer(t, s)
	cnt := newCounter()
	cnt.fail = refuseBatches
	p := params(s, name)
	p.Transport = cnt
	d := newDriver(t, p)

	paths := putFiles(t, d, "/one", 600)
	cnt.take()
	n, err := d.DeleteFiles(context.Background(), paths)
	if got, want := cnt.take(), map[string]int{"batch": 1, http.MethodDelete: 600}; n != 600 || err != nil || !maps.Equal(got, want) {
		t.Fatalf("DeleteFiles(600) with batches refused = %d, %v, sending %v; want 600, nil, sending %v", n, err, got, want)
	}
	paths = putFiles(t, d, "/two", 300)
	cnt.take()
	n, err = d.DeleteFiles(context.Background(), paths)
	if got, want := cnt.take(), map[string]int{http.MethodDelete: 300}; n != 300 || err != nil || !maps.Equal(got, want) {
		t.Fatalf("second DeleteFiles(300) = %d, %v, sending %v; want 300, nil, sending %v (no batch tried again)", n, err, got, want)
	}
	if left := countFiles(t, d, "/"); left != 0 {
		t.Fatalf("%d files left", left)
	}

	p.BatchDelete = "true"
	forced := newDriver(t, p)
	paths = putFiles(t, forced, "/three", 300)
	n, err = forced.DeleteFiles(context.Background(), paths)
	var re *azcore.ResponseError
	if n != 0 || !errors.As(err, &re) || re.StatusCode != http.StatusBadRequest {
		t.Fatalf("batchdelete true, batches refused: DeleteFiles = %d, %v; want 0 and the 400", n, err)
	}
	if errs := flatten([]error{err}); len(errs) != 300 {
		t.Errorf("DeleteFiles returned %d errors, want one for each of the 300 paths", len(errs))
	}
	for _, p := range paths {
		if !strings.Contains(err.Error(), p+":") {
			t.Fatalf("DeleteFiles error does not name %s", p)
		}
	}
	if left := countFiles(t, forced, "/three"); left != 300 {
		t.Fatalf("%d of 300 files left, want all", left)
	}
	if err := forced.Delete(context.Background(), "/three"); err == nil {
		t.Fatalf("Delete(/three) with batches refused and batchdelete true succeeded")
	}
}

// TestDeleteFilesFailures leases two of 300 blobs so that their deletes
// fail: both failures come back, naming the paths, and the other 298 go.
func TestDeleteFilesFailures(t *testing.T) {
	s := needServer(t)
	for _, mode := range []string{"true", "false"} {
		t.Run("batchdelete="+mode, func(t *testing.T) {
			name, raw := newContainer(t, s)
			p := params(s, name)
			p.BatchDelete = mode
			p.RootDirectory = "root"
			d := newDriver(t, p)
			paths := putFiles(t, d, "/f", 300)
			leased := []string{paths[7], paths[260]}
			for _, lp := range leased {
				bc := raw.NewBlobClient("root" + lp)
				lc, err := lease.NewBlobClient(bc, nil)
				if err != nil {
					t.Fatal(err)
				}
				if _, err := lc.AcquireLease(context.Background(), -1, nil); err != nil {
					t.Fatalf("AcquireLease(%s): %v", lp, err)
				}
				t.Cleanup(func() { _, _ = lc.BreakLease(context.Background(), nil) })
			}
			n, err := d.DeleteFiles(context.Background(), paths)
			if n != 298 || err == nil {
				t.Fatalf("DeleteFiles = %d, %v; want 298 and the two leased blobs' errors", n, err)
			}
			for _, lp := range leased {
				if !strings.Contains(err.Error(), lp) {
					t.Errorf("DeleteFiles error does not name %s: %v", lp, err)
				}
			}
			if errs := flatten([]error{err}); len(errs) != 2 {
				t.Errorf("DeleteFiles returned %d errors, want 2: %v", len(errs), err)
			}
			var left []string
			_ = d.Walk(context.Background(), "/f", func(fi driver.FileInfo) error {
				if !fi.IsDir {
					left = append(left, fi.Path)
				}
				return nil
			})
			slices.Sort(left)
			want := slices.Clone(leased)
			slices.Sort(want)
			if !slices.Equal(left, want) {
				t.Errorf("left after DeleteFiles: %q, want the leased %q", left, want)
			}
		})
	}
}

func flatten(errs []error) []error {
	var out []error
	for _, e := range errs {
		if j, ok := e.(interface{ Unwrap() []error }); ok {
			out = append(out, flatten(j.Unwrap())...)
		} else {
			out = append(out, e)
		}
	}
	return out
}

// TestLayout checks that paths map to blob names as distribution's azure
// driver maps them, so an existing container is served as is.
func TestLayout(t *testing.T) {
	s := needServer(t)
	name, raw := newContainer(t, s)
	ctx := context.Background()
	for root, want := range map[string]string{"": "docker/registry/v2/x", "/some/root/": "some/root/docker/registry/v2/x"} {
		p := params(s, name)
		p.RootDirectory = root
		d := newDriver(t, p)
		if err := d.PutContent(ctx, "/docker/registry/v2/x", []byte("x")); err != nil {
			t.Fatal(err)
		}
		resp, err := raw.NewBlobClient(want).DownloadStream(ctx, nil)
		if err != nil {
			t.Fatalf("rootdirectory %q: blob %s: %v", root, want, err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if string(b) != "x" {
			t.Fatalf("blob %s = %q", want, b)
		}
	}
	// A blob put there by another tool is a file of the driver.
	if _, err := raw.NewBlockBlobClient("some/root/other/file").UploadBuffer(ctx, []byte("other"), nil); err != nil {
		t.Fatal(err)
	}
	p := params(s, name)
	p.RootDirectory = "some/root"
	d := newDriver(t, p)
	if got, err := d.List(ctx, "/"); err != nil || !slices.Equal(got, []string{"/docker", "/other"}) {
		t.Fatalf("List(/) = %q, %v", got, err)
	}
	if err := d.Delete(ctx, "/"); err != nil {
		t.Fatal(err)
	}
	p.RootDirectory = ""
	if err := newDriver(t, p).Delete(ctx, "/"); err != nil {
		t.Fatal(err)
	}
}

// TestWriterBlocks covers what the suite cannot see: a file written in
// several blocks and appended to across writers, appending to a file that
// PutContent wrote, a Move onto itself, and a cancelled writer leaving no
// uncommitted blocks.
func TestWriterBlocks(t *testing.T) {
	s := needServer(t)
	name, raw := newContainer(t, s)
	ctx := context.Background()
	d := newDriver(t, params(s, name))

	var want []byte
	chunk := func(seed byte, n int) []byte {
		b := bytes.Repeat([]byte{seed}, n)
		want = append(want, b...)
		return b
	}
	p := "/up/data"
	for i, n := range []int{5<<20 + 3, 0, 100, 4 << 20} {
		w, err := d.Writer(ctx, p, i > 0)
		if err != nil {
			t.Fatalf("Writer %d: %v", i, err)
		}
		if w.Size() != int64(len(want)) {
			t.Fatalf("Writer %d: Size() = %d, want %d", i, w.Size(), len(want))
		}
		if _, err := w.Write(chunk(byte(i+1), n)); err != nil {
			t.Fatal(err)
		}
		if err := w.Close(); err != nil {
			t.Fatalf("Close %d: %v", i, err)
		}
		if got, err := d.GetContent(ctx, p); err != nil || !bytes.Equal(got, want) {
			t.Fatalf("after writer %d: %d bytes, %v; want %d bytes", i, len(got), err, len(want))
		}
	}

	q := "/put/data"
	want = nil
	if err := d.PutContent(ctx, q, chunk('p', 1000)); err != nil {
		t.Fatal(err)
	}
	w, err := d.Writer(ctx, q, true)
	if err != nil {
		t.Fatalf("Writer(append) on a PutContent file: %v", err)
	}
	if w.Size() != 1000 {
		t.Fatalf("Size() = %d, want 1000", w.Size())
	}
	if _, err := w.Write(chunk('w', 10)); err != nil {
		t.Fatal(err)
	}
	if err := w.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	if got, err := d.GetContent(ctx, q); err != nil || !bytes.Equal(got, want) {
		t.Fatalf("appended to a PutContent file: %q, %v", got, err)
	}

	if err := d.Move(ctx, q, q); err != nil {
		t.Fatalf("Move onto itself: %v", err)
	}
	if got, err := d.GetContent(ctx, q); err != nil || !bytes.Equal(got, want) {
		t.Fatalf("after a Move onto itself: %d bytes, %v; want the %d bytes", len(got), err, len(want))
	}

	c := "/cancel/data"
	w, err = d.Writer(ctx, c, false)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := w.Write(make([]byte, 5<<20)); err != nil { // stages a block
		t.Fatal(err)
	}
	if err := w.Cancel(ctx); err != nil {
		t.Fatal(err)
	}
	prefix := "cancel/"
	pager := raw.NewListBlobsFlatPager(&container.ListBlobsFlatOptions{
		Prefix: &prefix, Include: container.ListBlobsInclude{UncommittedBlobs: true},
	})
	for pager.More() {
		page, err := pager.NextPage(ctx)
		if err != nil {
			t.Fatal(err)
		}
		for _, it := range page.Segment.BlobItems {
			t.Errorf("after Cancel the container holds %s", *it.Name)
		}
	}
	for _, p := range []string{"/up", "/put"} {
		if err := d.Delete(ctx, p); err != nil {
			t.Fatal(err)
		}
	}
}

// TestParameters checks the distribution-style config keys and the checks
// New makes without a server.
func TestParameters(t *testing.T) {
	var p azure.Parameters
	cfg := "accountname: acct\naccountkey: " + "a2V5" + "\ncontainer: registry\nrealm: core.chinacloudapi.cn\n" +
		"rootdirectory: /r\nmaxdeleteconcurrency: 128\nbatchdelete: false\n"
	if err := yaml.Unmarshal([]byte(cfg), &p); err != nil {
		t.Fatal(err)
	}
	want := azure.Parameters{AccountName: "acct", AccountKey: "a2V5", Container: "registry",
		Realm: "core.chinacloudapi.cn", RootDirectory: "/r", MaxDeleteConcurrency: 128, BatchDelete: "false"}
	if fmt.Sprint(p) != fmt.Sprint(want) {
		t.Fatalf("decoded %+v, want %+v", p, want)
	}
	if _, err := azure.New(context.Background(), p); err != nil {
		t.Fatalf("New(%+v): %v", p, err)
	}
	for _, bad := range []func(*azure.Parameters){
		func(p *azure.Parameters) { p.AccountName = "" },
		func(p *azure.Parameters) { p.Container = "" },
		func(p *azure.Parameters) { p.AccountKey = "" },
		func(p *azure.Parameters) { p.BatchDelete = "sometimes" },
		func(p *azure.Parameters) { p.MaxDeleteConcurrency = -1 },
		func(p *azure.Parameters) { p.ServiceURL = "ftp://x" },
	} {
		q := p
		bad(&q)
		if _, err := azure.New(context.Background(), q); err == nil {
			t.Errorf("New(%+v) succeeded", q)
		}
	}
}

// TestReadRangeRequests checks that a range read is one ranged GET, also
// when it starts at or past the end.
func TestReadRangeRequests(t *testing.T) {
	s := needServer(t)
	name, _ := newContainer(t, s)
	// The SDK sets x-ms-range under its lower-case name, which Header.Get
	// (canonical names) does not find.
	h := &testsuite.RangeRecorder{Next: http.DefaultTransport, Range: func(req *http.Request) string {
		return strings.Join(req.Header["x-ms-range"], ",")
	}}
	p := params(s, name)
	p.Transport = h
	testsuite.ReadRangeRequests(t, newDriver(t, p), h.Take)
}
