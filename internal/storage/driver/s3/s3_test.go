package s3

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
	"net/http/httptest"
	"os"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"

	"github.com/cairn-registry/cairn/internal/storage/driver"
	"github.com/cairn-registry/cairn/internal/storage/driver/testsuite"
)

// testParams returns parameters for the MinIO server the test script started
// (scripts/services/minio.sh), with a fresh bucket that is removed when the
// test ends. Without a server the test is skipped, or fails under CI=true.
func testParams(t *testing.T) Parameters {
	t.Helper()
	endpoint := os.Getenv("CAIRN_TEST_S3_ENDPOINT")
	if endpoint == "" {
		if os.Getenv("CI") == "true" {
			t.Fatal("CAIRN_TEST_S3_ENDPOINT is not set (scripts/services/minio.sh starts MinIO)")
		}
		t.Skip("CAIRN_TEST_S3_ENDPOINT is not set (scripts/services/minio.sh starts MinIO)")
	}
	p := Parameters{
		Region:         os.Getenv("CAIRN_TEST_S3_REGION"),
		RegionEndpoint: endpoint,
		AccessKey:      os.Getenv("CAIRN_TEST_S3_ACCESS_KEY"),
		SecretKey:      os.Getenv("CAIRN_TEST_S3_SECRET_KEY"),
		ForcePathStyle: true,
		Bucket:         "cairn-test-" + randomHex(6),
	}
	ctx := context.Background()
	client, err := NewClient(ctx, p)
	if err != nil {
		t.Fatal(err)
	}
	if err := CreateBucket(ctx, client, p.Bucket); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := RemoveBucket(context.Background(), client, p.Bucket); err != nil {
			t.Errorf("cleanup: %v", err)
		}
	})
	return p
}

func randomHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

func mustNew(t *testing.T, p Parameters, optFns ...func(*s3.Options)) *Driver {
	t.Helper()
	d, err := newDriver(context.Background(), p, optFns...)
	if err != nil {
		t.Fatal(err)
	}
	return d
}

// TestSuite runs the shared driver suite, each subtest under its own
// rootdirectory of one bucket.
func TestSuite(t *testing.T) {
	p := testParams(t)
	testsuite.Run(t, func(t *testing.T) driver.Driver {
		q := p
		q.RootDirectory = "/suite/" + t.Name() + "/"
		return mustNew(t, q)
	})
}

// counter is an http.RoundTripper that counts S3 operations by method and
// query, the way S3 tells them apart.
type counter struct {
	next http.RoundTripper
	mu   sync.Mutex
	ops  map[string]int
}

func newCounter() *counter { return &counter{next: http.DefaultTransport, ops: map[string]int{}} }

func (c *counter) RoundTrip(r *http.Request) (*http.Response, error) {
	c.mu.Lock()
	c.ops[operation(r)]++
	c.mu.Unlock()
	return c.next.RoundTrip(r)
}

func (c *counter) take() map[string]int {
	c.mu.Lock()
	defer c.mu.Unlock()
	ops := c.ops
	c.ops = map[string]int{}
	return ops
}

func operation(r *http.Request) string {
	q := r.URL.Query()
	switch {
	case r.Method == http.MethodPost && q.Has("delete"):
		return "DeleteObjects"
	case r.Method == http.MethodGet && q.Get("list-type") == "2":
		return "ListObjectsV2"
	case r.Method == http.MethodGet && q.Has("uploads"):
		return "ListMultipartUploads"
	case r.Method == http.MethodGet && q.Has("uploadId"):
		return "ListParts"
	case r.Method == http.MethodPost && q.Has("uploads"):
		return "CreateMultipartUpload"
	case r.Method == http.MethodPost && q.Has("uploadId"):
		return "CompleteMultipartUpload"
	case r.Method == http.MethodPut && q.Has("uploadId") && r.Header.Get("x-amz-copy-source") != "":
		return "UploadPartCopy"
	case r.Method == http.MethodPut && q.Has("uploadId"):
		return "UploadPart"
	case r.Method == http.MethodDelete && q.Has("uploadId"):
		return "AbortMultipartUpload"
	case r.Method == http.MethodPut && r.Header.Get("x-amz-copy-source") != "":
		return "CopyObject"
	case r.Method == http.MethodPut:
		return "PutObject"
	case r.Method == http.MethodGet:
		return "GetObject"
	case r.Method == http.MethodHead:
		return "HeadObject"
	case r.Method == http.MethodDelete:
		return "DeleteObject"
	}
	return r.Method + " " + r.URL.RawQuery
}

func blobPath(i int) string { return testsuite.BlobDataPath("/docker/registry/v2", i) }

// TestDeleteFilesRequests checks the request cost of DeleteFiles: 2100 known
// files take exactly three DeleteObjects requests and nothing else.
func TestDeleteFilesRequests(t *testing.T) {
	p := testParams(t)
	c := newCounter()
	p.Transport = c
	d := mustNew(t, p)
	ctx := context.Background()
	const files = 2100
	paths := make([]string, files)
	for i := range paths {
		paths[i] = blobPath(i)
	}
	testsuite.PutParallel(t, d, paths)
	c.take()

	// Mark-phase listing of the same files: one page per 1000 keys.
	n := 0
	if err := d.Walk(ctx, "/docker/registry/v2/blobs", func(fi driver.FileInfo) error {
		if !fi.IsDir {
			n++
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	if ops := c.take(); n != files || !maps.Equal(ops, map[string]int{"ListObjectsV2": 3}) {
		t.Errorf("Walk of %d files found %d with requests %v, want 3 ListObjectsV2", files, n, ops)
	}

	// A skipped directory is jumped over: the 2100 blobs fill the first
	// page, the second starts after them.
	link := "/docker/registry/v2/repositories/r/_layers/link"
	if err := d.PutContent(ctx, link, nil); err != nil {
		t.Fatal(err)
	}
	c.take()
	var visited []string
	if err := d.Walk(ctx, "/docker/registry/v2", func(fi driver.FileInfo) error {
		visited = append(visited, strings.TrimPrefix(fi.Path, "/docker/registry/v2"))
		if fi.Path == "/docker/registry/v2/blobs" {
			return driver.ErrSkipDir
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	want := []string{"/blobs", "/repositories", "/repositories/r", "/repositories/r/_layers", "/repositories/r/_layers/link"}
	if ops := c.take(); !slices.Equal(visited, want) || !maps.Equal(ops, map[string]int{"ListObjectsV2": 2}) {
		t.Errorf("Walk skipping blobs visited %q with requests %v, want %q with 2 ListObjectsV2", visited, ops, want)
	}
	if _, err := d.DeleteFiles(ctx, []string{link}); err != nil {
		t.Fatal(err)
	}
	c.take()

	deleted, err := d.DeleteFiles(ctx, paths)
	if deleted != files || err != nil {
		t.Fatalf("DeleteFiles = %d, %v; want %d, nil", deleted, err, files)
	}
	if ops := c.take(); !maps.Equal(ops, map[string]int{"DeleteObjects": 3}) {
		t.Errorf("DeleteFiles of %d files sent %v, want exactly 3 DeleteObjects", files, ops)
	}
	for _, i := range []int{0, 999, 1000, files - 1} {
		if _, err := d.Stat(ctx, paths[i]); !errors.Is(err, driver.ErrNotFound) {
			t.Errorf("Stat(%s) after DeleteFiles: %v, want not found", paths[i], err)
		}
	}
	if err := d.Walk(ctx, "/", func(fi driver.FileInfo) error {
		return fmt.Errorf("%s is still there", fi.Path)
	}); err != nil {
		t.Error(err)
	}
	c.take()

	// Missing files count as deleted, at the same cost.
	deleted, err = d.DeleteFiles(ctx, paths)
	if deleted != files || err != nil {
		t.Errorf("DeleteFiles of missing files = %d, %v; want %d, nil", deleted, err, files)
	}
	if ops := c.take(); !maps.Equal(ops, map[string]int{"DeleteObjects": 3}) {
		t.Errorf("DeleteFiles of %d missing files sent %v, want exactly 3 DeleteObjects", files, ops)
	}
}

// TestDeleteFilesKeyErrors makes MinIO refuse some keys of a DeleteObjects
// request: anonymous requests are allowed to delete only below /ok/ by the
// bucket policy, which MinIO checks key by key.
func TestDeleteFilesKeyErrors(t *testing.T) {
	p := testParams(t)
	ctx := context.Background()
	owner := mustNew(t, p)
	policy := fmt.Sprintf(`{"Version":"2012-10-17","Statement":[{"Effect":"Allow","Principal":{"AWS":["*"]},`+
		`"Action":["s3:DeleteObject"],"Resource":["arn:aws:s3:::%s/ok/*"]}]}`, p.Bucket)
	if _, err := owner.client.PutBucketPolicy(ctx, &s3.PutBucketPolicyInput{Bucket: &p.Bucket, Policy: &policy}); err != nil {
		t.Fatalf("PutBucketPolicy: %v", err)
	}
	ok := []string{"/ok/1", "/ok/2", "/ok/sub/3"}
	denied := []string{"/denied/1", "/denied/2"}
	for _, path := range slices.Concat(ok, denied) {
		if err := owner.PutContent(ctx, path, []byte(path)); err != nil {
			t.Fatal(err)
		}
	}
	anon := mustNew(t, p, func(o *s3.Options) { o.Credentials = aws.AnonymousCredentials{} })
	n, err := anon.DeleteFiles(ctx, []string{ok[0], denied[0], ok[1], "/ok/missing", denied[1], ok[2]})
	if n != 4 {
		t.Errorf("DeleteFiles counted %d deleted, want 4 (3 present, 1 missing)", n)
	}
	var got []string
	for _, e := range joined(err) {
		var de *DeleteError
		if !errors.As(e, &de) || de.Code != "AccessDenied" {
			t.Errorf("error %v, want a DeleteError with code AccessDenied", e)
			continue
		}
		got = append(got, de.Path)
	}
	slices.Sort(got)
	if !slices.Equal(got, denied) {
		t.Errorf("DeleteFiles reported failures for %q, want %q (error: %v)", got, denied, err)
	}
	for _, path := range ok {
		if _, err := owner.Stat(ctx, path); !errors.Is(err, driver.ErrNotFound) {
			t.Errorf("Stat(%s) = %v, want it deleted", path, err)
		}
	}
	for _, path := range denied {
		if b, err := owner.GetContent(ctx, path); err != nil || string(b) != path {
			t.Errorf("GetContent(%s) = %q, %v; want it kept", path, b, err)
		}
	}
}

// joined flattens errors.Join trees.
func joined(err error) []error {
	if err == nil {
		return nil
	}
	if j, ok := err.(interface{ Unwrap() []error }); ok {
		var out []error
		for _, e := range j.Unwrap() {
			out = append(out, joined(e)...)
		}
		return out
	}
	return []error{err}
}

// TestWriterResume covers what the suite's small files cannot: resuming
// uploads whose parts are above and below S3's 5 MiB minimum, repeatedly,
// appending to committed files, and leaving no upload behind.
func TestWriterResume(t *testing.T) {
	p := testParams(t)
	p.ChunkSize = minPartSize
	c := newCounter()
	p.Transport = c
	d := mustNew(t, p)
	ctx := context.Background()

	// Each case is a list of writes; a writer is closed and resumed after
	// each, and the last one is committed.
	const mib = 1 << 20
	for _, tc := range []struct {
		name   string
		writes []int
	}{
		{"short parts", []int{100, 3 * mib, 1}},
		{"full then short", []int{7 * mib, 4 * mib}},
		{"short then long", []int{2 * mib, 12 * mib, 3}},
		{"exact chunks", []int{5 * mib, 5 * mib}},
		{"empty first", []int{0, 10}},
		{"all empty", []int{0, 0}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			path := "/uploads/" + strings.ReplaceAll(tc.name, " ", "-") + "/data"
			var want []byte
			for i, size := range tc.writes {
				w, err := d.Writer(ctx, path, i > 0)
				if err != nil {
					t.Fatalf("Writer %d: %v", i, err)
				}
				if w.Size() != int64(len(want)) {
					t.Fatalf("writer %d: Size() = %d, want %d", i, w.Size(), len(want))
				}
				chunk := bytes.Repeat([]byte{byte('a' + i)}, size)
				if _, err := w.Write(chunk); err != nil {
					t.Fatalf("Write %d: %v", i, err)
				}
				want = append(want, chunk...)
				if i < len(tc.writes)-1 {
					err = w.Close()
				} else {
					err = w.Commit(ctx)
				}
				if err != nil {
					t.Fatalf("writer %d: %v", i, err)
				}
			}
			got, err := d.GetContent(ctx, path)
			if err != nil || !bytes.Equal(got, want) {
				t.Fatalf("GetContent = %d bytes, %v; want the %d written", len(got), err, len(want))
			}
			wantNoUploads(t, d)
		})
	}

	t.Run("append to committed", func(t *testing.T) {
		for _, size := range []int{10, 6 * mib} {
			path := fmt.Sprintf("/committed/%d", size)
			first := bytes.Repeat([]byte{'x'}, size)
			if err := d.PutContent(ctx, path, first); err != nil {
				t.Fatal(err)
			}
			w, err := d.Writer(ctx, path, true)
			if err != nil {
				t.Fatal(err)
			}
			if w.Size() != int64(size) {
				t.Fatalf("Size() = %d, want %d", w.Size(), size)
			}
			if _, err := w.Write([]byte("tail")); err != nil {
				t.Fatal(err)
			}
			if err := w.Commit(ctx); err != nil {
				t.Fatal(err)
			}
			if got, err := d.GetContent(ctx, path); err != nil || !bytes.Equal(got, append(first, "tail"...)) {
				t.Fatalf("GetContent = %d bytes, %v; want %d", len(got), err, size+4)
			}
		}
		wantNoUploads(t, d)
	})

	t.Run("cancel resumed", func(t *testing.T) {
		path := "/cancel/data"
		w, err := d.Writer(ctx, path, false)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := w.Write(make([]byte, 6*mib)); err != nil {
			t.Fatal(err)
		}
		if err := w.Close(); err != nil {
			t.Fatal(err)
		}
		w, err = d.Writer(ctx, path, true)
		if err != nil {
			t.Fatal(err)
		}
		// This write completes the short-tailed upload first.
		if _, err := w.Write([]byte("more")); err != nil {
			t.Fatal(err)
		}
		if err := w.Cancel(ctx); err != nil {
			t.Fatal(err)
		}
		if _, err := d.Stat(ctx, path); !errors.Is(err, driver.ErrNotFound) {
			t.Fatalf("Stat after Cancel: %v, want not found", err)
		}
		wantNoUploads(t, d)
	})

	// A small file written through a Writer costs one PutObject.
	c.take()
	w, err := d.Writer(ctx, "/small", false)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := w.Write([]byte("config blob")); err != nil {
		t.Fatal(err)
	}
	if err := w.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	if ops := c.take(); !maps.Equal(ops, map[string]int{"PutObject": 1}) {
		t.Errorf("small Writer sent %v, want one PutObject", ops)
	}
}

func wantNoUploads(t *testing.T, d *Driver) {
	t.Helper()
	out, err := d.client.ListMultipartUploads(context.Background(), &s3.ListMultipartUploadsInput{Bucket: &d.bucket})
	if err != nil {
		t.Fatal(err)
	}
	for _, u := range out.Uploads {
		t.Errorf("upload of %s left behind", aws.ToString(u.Key))
	}
}

// TestMoveMultipart moves a file above multipartcopythresholdsize, which is
// copied in parts on the server.
func TestMoveMultipart(t *testing.T) {
	p := testParams(t)
	p.MultipartCopyThresholdSize = minPartSize
	p.MultipartCopyChunkSize = minPartSize
	c := newCounter()
	p.Transport = c
	d := mustNew(t, p)
	ctx := context.Background()
	content := make([]byte, 12<<20+5)
	_, _ = rand.Read(content)
	if err := d.PutContent(ctx, "/_uploads/u/data", content); err != nil {
		t.Fatal(err)
	}
	c.take()
	if err := d.Move(ctx, "/_uploads/u/data", "/blobs/x/data"); err != nil {
		t.Fatalf("Move: %v", err)
	}
	want := map[string]int{"HeadObject": 1, "CreateMultipartUpload": 1, "UploadPartCopy": 2, "CompleteMultipartUpload": 1, "DeleteObject": 1}
	if ops := c.take(); !maps.Equal(ops, want) {
		t.Errorf("Move sent %v, want %v", ops, want)
	}
	if got, err := d.GetContent(ctx, "/blobs/x/data"); err != nil || !bytes.Equal(got, content) {
		t.Fatalf("moved content: %d bytes, %v; want %d", len(got), err, len(content))
	}
	if _, err := d.Stat(ctx, "/_uploads/u/data"); !errors.Is(err, driver.ErrNotFound) {
		t.Fatalf("source after Move: %v, want not found", err)
	}
}

// TestReaderRequests checks that a read from an offset is one ranged GET,
// also when the offset is past the end.
func TestReaderRequests(t *testing.T) {
	p := testParams(t)
	c := newCounter()
	p.Transport = c
	d := mustNew(t, p)
	ctx := context.Background()
	if err := d.PutContent(ctx, "/f", []byte("0123456789")); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		off  int64
		want string
	}{{0, "0123456789"}, {1, "123456789"}, {9, "9"}, {10, ""}, {11, "!"}} {
		c.take()
		r, err := d.Reader(ctx, "/f", tc.off)
		var got []byte
		if err == nil {
			got, err = io.ReadAll(r)
			r.Close()
		}
		var oe driver.InvalidOffsetError
		if tc.want == "!" {
			if !errors.As(err, &oe) {
				t.Errorf("Reader(%d): %v, want InvalidOffsetError", tc.off, err)
			}
		} else if err != nil || string(got) != tc.want {
			t.Errorf("Reader(%d) = %q, %v; want %q", tc.off, got, err, tc.want)
		}
		if ops := c.take(); !maps.Equal(ops, map[string]int{"GetObject": 1}) {
			t.Errorf("Reader(%d) sent %v, want one GetObject", tc.off, ops)
		}
	}
}

// TestStatFileRequests checks that StatFile is one HeadObject whatever the
// path is, also through a wrapper, where Stat lists after a 404 to look for
// a directory.
func TestStatFileRequests(t *testing.T) {
	p := testParams(t)
	c := newCounter()
	p.Transport = c
	d := mustNew(t, p)
	ctx := context.Background()
	if err := d.PutContent(ctx, "/dir/f", []byte("0123456789")); err != nil {
		t.Fatal(err)
	}
	wrapped := driver.NewCounting(d)
	for _, tc := range []struct {
		path  string
		found bool
	}{{"/dir/f", true}, {"/dir/missing", false}, {"/dir", false}, {"/nodir/missing", false}} {
		c.take()
		fi, err := driver.StatFile(ctx, wrapped, tc.path)
		if tc.found && (err != nil || fi.Size != 10) {
			t.Errorf("StatFile(%s) = %+v, %v; want a 10-byte file", tc.path, fi, err)
		}
		if !tc.found && !errors.Is(err, driver.ErrNotFound) {
			t.Errorf("StatFile(%s) = %+v, %v; want not found", tc.path, fi, err)
		}
		if ops := c.take(); !maps.Equal(ops, map[string]int{"HeadObject": 1}) {
			t.Errorf("StatFile(%s) sent %v, want one HeadObject", tc.path, ops)
		}
	}
	if got := wrapped.Counts()["stat"]; got != 4 {
		t.Errorf("the wrapper counted %d stats, want 4", got)
	}
	// What StatFile saves: Stat lists after the 404.
	if _, err := d.Stat(ctx, "/dir/missing"); !errors.Is(err, driver.ErrNotFound) {
		t.Errorf("Stat(/dir/missing) = %v, want not found", err)
	}
	if ops := c.take(); !maps.Equal(ops, map[string]int{"HeadObject": 1, "ListObjectsV2": 1}) {
		t.Errorf("Stat(/dir/missing) sent %v, want one HeadObject and one ListObjectsV2", ops)
	}
}

// TestReadRangeRequests checks that a range read is one GET with the range
// in its Range header, also when it starts past the end.
func TestReadRangeRequests(t *testing.T) {
	p := testParams(t)
	h := &testsuite.RangeRecorder{Next: http.DefaultTransport, Range: func(req *http.Request) string { return req.Header.Get("Range") }}
	p.Transport = h
	testsuite.ReadRangeRequests(t, mustNew(t, p), h.Take)
}

// TestReadRangeWholeObject: a server that ignores Range and answers 200
// with the whole object still yields exactly the range.
func TestReadRangeWholeObject(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodGet || r.Header.Get("Range") == "" {
			t.Errorf("unexpected request %s %s (Range %q)", r.Method, r.URL, r.Header.Get("Range"))
		}
		w.Header().Set("Content-Length", "10")
		io.WriteString(w, "0123456789")
	}))
	t.Cleanup(srv.Close)
	d := mustNew(t, Parameters{
		Bucket: "fake", RegionEndpoint: srv.URL, Region: "us-east-1",
		AccessKey: "k", SecretKey: "s", ForcePathStyle: true,
	})
	for _, tc := range testsuite.ReadRangeCases {
		testsuite.CheckReadRange(t, d, "/f", tc.Off, tc.N, tc.Want)
	}
}
