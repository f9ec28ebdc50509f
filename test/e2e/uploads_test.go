package e2e

import (
	"bytes"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/google/go-containerregistry/pkg/v1/remote"

	"github.com/cairn-registry/cairn/internal/testutil/regtest"
)

// startUpload POSTs a new upload session and returns its Location.
func (e *env) startUpload(repo string) string {
	e.t.Helper()
	r := e.do(http.MethodPost, "/v2/"+repo+"/blobs/uploads/", nil)
	wantStatus(e.t, r, http.StatusAccepted)
	loc := r.Header.Get("Location")
	if loc == "" {
		e.t.Fatalf("%v: no Location", r)
	}
	return loc
}

// patchChunk PATCHes data at offset with a Content-Range and checks the 202,
// Location and Range headers; it returns the next Location.
func (e *env) patchChunk(loc string, offset int, data []byte) string {
	e.t.Helper()
	r := e.do(http.MethodPatch, loc, data,
		"Content-Type", "application/octet-stream",
		"Content-Range", fmt.Sprintf("%d-%d", offset, offset+len(data)-1))
	wantStatus(e.t, r, http.StatusAccepted)
	if got, want := r.Header.Get("Range"), fmt.Sprintf("0-%d", offset+len(data)-1); got != want {
		e.t.Errorf("%v: Range %q, want %q", r, got, want)
	}
	next := r.Header.Get("Location")
	if next == "" {
		e.t.Fatalf("%v: no Location", r)
	}
	return next
}

// wantUploadStatus GETs the upload and checks 204 with Range 0-(size-1).
func (e *env) wantUploadStatus(loc string, size int) string {
	e.t.Helper()
	r := e.do(http.MethodGet, loc, nil)
	wantStatus(e.t, r, http.StatusNoContent)
	if got, want := r.Header.Get("Range"), fmt.Sprintf("0-%d", size-1); got != want {
		e.t.Errorf("%v: Range %q, want %q", r, got, want)
	}
	if r.Header.Get("Location") == "" {
		e.t.Errorf("%v: no Location", r)
	}
	return r.Header.Get("Location")
}

// closeUpload PUTs ?digest= with an optional final chunk and checks the 201.
func (e *env) closeUpload(loc, digest string, final []byte, offset int) regtest.Response {
	e.t.Helper()
	hdr := []string{}
	if len(final) > 0 {
		hdr = append(hdr, "Content-Type", "application/octet-stream",
			"Content-Range", fmt.Sprintf("%d-%d", offset, offset+len(final)-1))
	}
	r := e.do(http.MethodPut, withQuery(loc, "digest", digest), final, hdr...)
	wantStatus(e.t, r, http.StatusCreated)
	if r.Header.Get("Location") == "" {
		e.t.Errorf("%v: no Location", r)
	}
	if got := r.Header.Get("Docker-Content-Digest"); got != digest {
		e.t.Errorf("%v: Docker-Content-Digest %q, want %q", r, got, digest)
	}
	return r
}

func TestChunkedUpload(t *testing.T) {
	t.Parallel()
	e := start(t)
	const repo = "e2e/chunked"

	t.Run("final chunk in PUT", func(t *testing.T) {
		e := e.with(t)
		data := randBytes(t, 3000)
		d := sha(data)
		loc := e.startUpload(repo)
		loc = e.patchChunk(loc, 0, data[:1000])
		loc = e.wantUploadStatus(loc, 1000)
		loc = e.patchChunk(loc, 1000, data[1000:2000])

		// Out of order: a chunk that skips ahead, and one that repeats.
		for _, start := range []int{2500, 500} {
			r := e.do(http.MethodPatch, loc, data[start:start+100],
				"Content-Type", "application/octet-stream",
				"Content-Range", fmt.Sprintf("%d-%d", start, start+99))
			wantError(t, r, http.StatusRequestedRangeNotSatisfiable, "RANGE_INVALID", "BLOB_UPLOAD_INVALID")
			if got := r.Header.Get("Range"); got != "" && got != "0-1999" {
				t.Errorf("%v: Range %q, want 0-1999", r, got)
			}
		}
		loc = e.wantUploadStatus(loc, 2000)
		// The closing PUT's chunk must continue the upload too.
		r := e.do(http.MethodPut, withQuery(loc, "digest", d), data[2100:],
			"Content-Type", "application/octet-stream", "Content-Range", fmt.Sprintf("2100-%d", len(data)-1))
		wantError(t, r, http.StatusRequestedRangeNotSatisfiable, "RANGE_INVALID", "BLOB_UPLOAD_INVALID")
		loc = e.wantUploadStatus(loc, 2000)
		r = e.closeUpload(loc, d, data[2000:], 2000)
		e.getBlob(repo, d, int64(len(data)))
		e.getBlob(repo, d, int64(len(data)))
		r = e.do(http.MethodGet, r.Header.Get("Location"), nil)
		wantStatus(t, r, http.StatusOK)
		if !bytes.Equal(r.Body, data) {
			t.Errorf("GET of the PUT's Location returned other bytes")
		}
	})

	t.Run("all chunks by PATCH", func(t *testing.T) {
		e := e.with(t)
		data := randBytes(t, 2500)
		d := sha(data)
		loc := e.startUpload(repo)
		for off := 0; off < len(data); off += 1000 {
			loc = e.patchChunk(loc, off, data[off:min(off+1000, len(data))])
		}
		loc = e.wantUploadStatus(loc, len(data))
		e.closeUpload(loc, d, nil, 0)
		e.getBlob(repo, d, int64(len(data)))
	})

	t.Run("final chunk in PUT without Content-Range", func(t *testing.T) {
		e := e.with(t)
		data := randBytes(t, 2000)
		loc := e.startUpload(repo)
		loc = e.patchChunk(loc, 0, data[:1000])
		r := e.do(http.MethodPut, withQuery(loc, "digest", sha(data)), data[1000:], "Content-Type", "application/octet-stream")
		wantStatus(t, r, http.StatusCreated)
		e.getBlob(repo, sha(data), int64(len(data)))
	})

	t.Run("wrong digest", func(t *testing.T) {
		e := e.with(t)
		data := randBytes(t, 1500)
		other := sha(randBytes(t, 10))
		loc := e.startUpload(repo)
		loc = e.patchChunk(loc, 0, data)
		r := e.do(http.MethodPut, withQuery(loc, "digest", other), nil)
		wantError(t, r, http.StatusBadRequest, "DIGEST_INVALID")
		for _, d := range []string{other, sha(data)} {
			wantError(t, e.do(http.MethodGet, "/v2/"+repo+"/blobs/"+d, nil), http.StatusNotFound, "BLOB_UNKNOWN")
		}
	})

	t.Run("cancel", func(t *testing.T) {
		e := e.with(t)
		loc := e.startUpload(repo)
		loc = e.patchChunk(loc, 0, randBytes(t, 100))
		r := e.do(http.MethodDelete, loc, nil)
		wantStatus(t, r, http.StatusNoContent)
		wantError(t, e.do(http.MethodGet, loc, nil), http.StatusNotFound, "BLOB_UPLOAD_UNKNOWN")
		wantError(t, e.do(http.MethodPatch, loc, randBytes(t, 10),
			"Content-Type", "application/octet-stream", "Content-Range", "100-109"),
			http.StatusNotFound, "BLOB_UPLOAD_UNKNOWN")
		wantError(t, e.do(http.MethodPut, withQuery(loc, "digest", sha(nil)), nil), http.StatusNotFound, "BLOB_UPLOAD_UNKNOWN")
		wantError(t, e.do(http.MethodDelete, loc, nil), http.StatusNotFound, "BLOB_UPLOAD_UNKNOWN")
	})

	t.Run("completed session is gone", func(t *testing.T) {
		e := e.with(t)
		data := randBytes(t, 10)
		loc := e.startUpload(repo)
		e.closeUpload(loc, sha(data), data, 0)
		wantError(t, e.do(http.MethodGet, loc, nil), http.StatusNotFound, "BLOB_UPLOAD_UNKNOWN")
	})

	t.Run("sha512", func(t *testing.T) {
		e := e.with(t)
		data := randBytes(t, 4096)
		d := digestOf(t, "sha512", data)
		loc := e.startUpload(repo)
		loc = e.patchChunk(loc, 0, data[:2048])
		e.closeUpload(loc, d, data[2048:], 2048)
		e.getBlob(repo, d, int64(len(data)))
		r := e.do(http.MethodHead, "/v2/"+repo+"/blobs/"+d, nil)
		wantStatus(t, r, http.StatusOK)
		if got := r.Header.Get("Docker-Content-Digest"); got != d {
			t.Errorf("HEAD sha512 blob: Docker-Content-Digest %q, want %q", got, d)
		}
		// The same algorithm by monolithic POST+PUT.
		d2 := e.uploadBlobAlg(repo, randBytes(t, 777), "sha512")
		e.getBlob(repo, d2, 777)
	})
}

func TestStreamedAndMonolithicUpload(t *testing.T) {
	t.Parallel()
	e := start(t)
	const repo = "e2e/stream"

	t.Run("streamed PATCH", func(t *testing.T) {
		e := e.with(t)
		data := randBytes(t, 300<<10)
		loc := e.startUpload(repo)
		for _, part := range [][]byte{data[:100<<10], data[100<<10:]} {
			// Unknown length: the body goes chunked, with no Content-Range.
			req, err := http.NewRequestWithContext(t.Context(), http.MethodPatch, e.abs(loc), io.MultiReader(bytes.NewReader(part)))
			if err != nil {
				t.Fatal(err)
			}
			req.Header.Set("Content-Type", "application/octet-stream")
			r := e.send(req)
			wantStatus(t, r, http.StatusAccepted)
			loc = r.Header.Get("Location")
		}
		loc = e.wantUploadStatus(loc, len(data))
		e.closeUpload(loc, sha(data), nil, 0)
		e.getBlob(repo, sha(data), int64(len(data)))
	})

	t.Run("POST then PUT", func(t *testing.T) {
		e := e.with(t)
		data := randBytes(t, 5000)
		d := e.uploadBlob(repo, data)
		e.getBlob(repo, d, int64(len(data)))
	})

	t.Run("single POST", func(t *testing.T) {
		e := e.with(t)
		data := randBytes(t, 5000)
		d := sha(data)
		r := e.do(http.MethodPost, "/v2/"+repo+"/blobs/uploads/?digest="+d, data, "Content-Type", "application/octet-stream")
		wantStatus(t, r, http.StatusCreated)
		if r.Header.Get("Location") == "" || r.Header.Get("Docker-Content-Digest") != d {
			t.Errorf("%v: Location %q, Docker-Content-Digest %q", r, r.Header.Get("Location"), r.Header.Get("Docker-Content-Digest"))
		}
		e.getBlob(repo, d, int64(len(data)))
		r = e.do(http.MethodPost, "/v2/"+repo+"/blobs/uploads/?digest="+sha(data[1:]), data, "Content-Type", "application/octet-stream")
		wantError(t, r, http.StatusBadRequest, "DIGEST_INVALID")
		wantStatus(t, e.do(http.MethodHead, "/v2/"+repo+"/blobs/"+sha(data[1:]), nil), http.StatusNotFound)
	})

	t.Run("empty blob", func(t *testing.T) {
		e := e.with(t)
		d := e.uploadBlob(repo, []byte{})
		e.getBlob(repo, d, 0)
	})

	t.Run("same blob twice in parallel", func(t *testing.T) {
		e := e.with(t)
		data := randBytes(t, 200<<10)
		var wg sync.WaitGroup
		for range 4 {
			wg.Go(func() {
				// Only the goroutine-safe parts of env are used here.
				r, err := e.hc.Post(e.abs("/v2/"+repo+"/blobs/uploads/"), "", nil)
				if err != nil {
					t.Error(err)
					return
				}
				r.Body.Close()
				req, _ := http.NewRequest(http.MethodPut, e.abs(withQuery(r.Header.Get("Location"), "digest", sha(data))), bytes.NewReader(data))
				req.Header.Set("Content-Type", "application/octet-stream")
				resp, err := e.hc.Do(req)
				if err != nil {
					t.Error(err)
					return
				}
				resp.Body.Close()
				if resp.StatusCode != http.StatusCreated {
					t.Errorf("parallel PUT: %d", resp.StatusCode)
				}
			})
		}
		wg.Wait()
		e.getBlob(repo, sha(data), int64(len(data)))
	})
}

func TestLargeBlobChunked(t *testing.T) {
	t.Parallel()
	e := start(t)
	const repo = "e2e/large"
	const size, chunk = 64 << 20, 5 << 20
	data := randBytes(t, size)
	d := sha(data)
	loc := e.startUpload(repo)
	off := 0
	for ; off+chunk < size; off += chunk {
		loc = e.patchChunk(loc, off, data[off:off+chunk])
	}
	e.closeUpload(loc, d, data[off:], off)
	e.getBlob(repo, d, size)

	r := e.do(http.MethodHead, "/v2/"+repo+"/blobs/"+d, nil)
	wantStatus(t, r, http.StatusOK)
	if got := r.Header.Get("Content-Length"); got != strconv.Itoa(size) {
		t.Errorf("HEAD: Content-Length %q, want %d", got, size)
	}
	lo, hi := size-chunk-17, size-3
	r = e.do(http.MethodGet, "/v2/"+repo+"/blobs/"+d, nil, "Range", fmt.Sprintf("bytes=%d-%d", lo, hi))
	wantStatus(t, r, http.StatusPartialContent)
	if !bytes.Equal(r.Body, data[lo:hi+1]) {
		t.Errorf("range %d-%d: %d bytes that differ from the blob's", lo, hi, len(r.Body))
	}
}

func TestMounts(t *testing.T) {
	t.Parallel()
	e := start(t)
	data := randBytes(t, 10000)
	d := e.uploadBlob("e2e/mount/src", data)
	// Blobs are scoped to repositories: the target does not have it yet.
	e.pushRandom("e2e/mount/dst:seed", 1, 100)
	wantError(t, e.do(http.MethodGet, "/v2/e2e/mount/dst/blobs/"+d, nil), http.StatusNotFound, "BLOB_UNKNOWN")

	r := e.do(http.MethodPost, "/v2/e2e/mount/dst/blobs/uploads/?mount="+d+"&from=e2e/mount/src", nil)
	wantStatus(t, r, http.StatusCreated)
	if r.Header.Get("Location") == "" {
		t.Errorf("%v: no Location", r)
	}
	if got := r.Header.Get("Docker-Content-Digest"); got != "" && got != d {
		t.Errorf("%v: Docker-Content-Digest %q", r, got)
	}
	e.getBlob("e2e/mount/dst", d, int64(len(data)))
	e.getBlob("e2e/mount/src", d, int64(len(data)))

	// A source that lacks the blob: the server opens an upload instead.
	other := randBytes(t, 500)
	e.pushRandom("e2e/mount/empty:seed", 1, 100)
	r = e.do(http.MethodPost, "/v2/e2e/mount/dst2/blobs/uploads/?mount="+sha(other)+"&from=e2e/mount/empty", nil)
	wantStatus(t, r, http.StatusAccepted)
	loc := r.Header.Get("Location")
	if loc == "" {
		t.Fatalf("%v: no Location for the upload session", r)
	}
	e.closeUpload(loc, sha(other), other, 0)
	e.getBlob("e2e/mount/dst2", sha(other), int64(len(other)))

	// A from that lacks a blob the registry has elsewhere: the spec allows
	// a registry-wide mount (201) or an upload session (202), nothing else.
	r = e.do(http.MethodPost, "/v2/e2e/mount/dst4/blobs/uploads/?mount="+d+"&from=e2e/mount/empty", nil)
	if r.Status != http.StatusAccepted && r.Status != http.StatusCreated {
		t.Errorf("%v: want 202 (or 201 for a registry-wide mount)", r)
	}

	// No from: the registry may mount from wherever the blob is.
	r = e.do(http.MethodPost, "/v2/e2e/mount/dst3/blobs/uploads/?mount="+d, nil)
	wantStatus(t, r, http.StatusCreated)
	e.getBlob("e2e/mount/dst3", d, int64(len(data)))

	// ggcr copies an image pulled from one repo into another by mounting.
	img := randomImage(t, false, 3, 20000)
	e.push(img, "e2e/mount/a:v1")
	pulled, err := remote.Image(e.ref("e2e/mount/a:v1"), e.ropts()...)
	if err != nil {
		t.Fatal(err)
	}
	rec := &recorder{rt: e.tr}
	if err := remote.Write(e.ref("e2e/mount/b:v1"), pulled, e.ropts(remote.WithTransport(rec))...); err != nil {
		t.Fatal(err)
	}
	layers, _ := img.Layers()
	for _, l := range layers {
		ld, _ := l.Digest()
		if !rec.saw(http.MethodPost, "mount="+ld.String(), http.StatusCreated) {
			t.Errorf("layer %s was not mounted (201) by remote.Write; requests: %v", ld, rec.list())
		}
	}
	if rec.saw(http.MethodPatch, "", 0) {
		t.Errorf("remote.Write uploaded bytes although every blob could be mounted: %v", rec.list())
	}
	e.verifyImage("e2e/mount/b", "v1", img)
}

// recorder is an http.RoundTripper that remembers each request's method,
// URL and status.
type recorder struct {
	rt   http.RoundTripper
	mu   sync.Mutex
	seen []string
}

func (r *recorder) RoundTrip(req *http.Request) (*http.Response, error) {
	resp, err := r.rt.RoundTrip(req)
	status := 0
	if resp != nil {
		status = resp.StatusCode
	}
	r.mu.Lock()
	// Query values are compared decoded ("mount=sha256:...").
	uri, err2 := url.QueryUnescape(req.URL.RequestURI())
	if err2 != nil {
		uri = req.URL.RequestURI()
	}
	r.seen = append(r.seen, fmt.Sprintf("%s %s %d", req.Method, uri, status))
	r.mu.Unlock()
	return resp, err
}

// saw reports whether a request with method, whose URL contains substr,
// got status (0 means any).
func (r *recorder) saw(method, substr string, status int) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, s := range r.seen {
		f := strings.Fields(s)
		if f[0] == method && strings.Contains(f[1], substr) && (status == 0 || f[2] == strconv.Itoa(status)) {
			return true
		}
	}
	return false
}

func (r *recorder) list() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]string(nil), r.seen...)
}

func TestBlobs(t *testing.T) {
	t.Parallel()
	e := start(t)
	const repo = "e2e/blobs"
	data := randBytes(t, 1000)
	d := e.uploadBlob(repo, data)

	r := e.do(http.MethodHead, "/v2/"+repo+"/blobs/"+d, nil)
	wantStatus(t, r, http.StatusOK)
	if r.Header.Get("Content-Length") != "1000" || r.Header.Get("Docker-Content-Digest") != d || len(r.Body) != 0 {
		t.Errorf("HEAD: Content-Length %q, Docker-Content-Digest %q, %d body bytes",
			r.Header.Get("Content-Length"), r.Header.Get("Docker-Content-Digest"), len(r.Body))
	}

	for _, tc := range []struct {
		rng    string
		lo, hi int
	}{{"bytes=10-99", 10, 99}, {"bytes=900-", 900, 999}, {"bytes=-10", 990, 999}, {"bytes=500-5000", 500, 999}} {
		r := e.do(http.MethodGet, "/v2/"+repo+"/blobs/"+d, nil, "Range", tc.rng)
		wantStatus(t, r, http.StatusPartialContent)
		if want := fmt.Sprintf("bytes %d-%d/1000", tc.lo, tc.hi); r.Header.Get("Content-Range") != want {
			t.Errorf("%s: Content-Range %q, want %q", tc.rng, r.Header.Get("Content-Range"), want)
		}
		if !bytes.Equal(r.Body, data[tc.lo:tc.hi+1]) {
			t.Errorf("%s: got %d bytes that differ from the blob's [%d:%d]", tc.rng, len(r.Body), tc.lo, tc.hi+1)
		}
	}
	r = e.do(http.MethodGet, "/v2/"+repo+"/blobs/"+d, nil, "Range", "bytes=1000-")
	if r.Status != http.StatusRequestedRangeNotSatisfiable {
		t.Errorf("%v: want 416", r)
	}
	if cr := r.Header.Get("Content-Range"); cr != "" && cr != "bytes */1000" {
		t.Errorf("416: Content-Range %q, want bytes */1000", cr)
	}

	unknown := sha(randBytes(t, 8))
	wantError(t, e.do(http.MethodGet, "/v2/"+repo+"/blobs/"+unknown, nil), http.StatusNotFound, "BLOB_UNKNOWN")
	r = e.do(http.MethodHead, "/v2/"+repo+"/blobs/"+unknown, nil)
	wantStatus(t, r, http.StatusNotFound)
	wantError(t, e.do(http.MethodDelete, "/v2/"+repo+"/blobs/"+unknown, nil), http.StatusNotFound, "BLOB_UNKNOWN")

	// The blob is also in a second repository; deleting it from the first
	// leaves the second one's copy whole.
	r = e.do(http.MethodPost, "/v2/e2e/blobs2/blobs/uploads/?mount="+d+"&from="+repo, nil)
	wantStatus(t, r, http.StatusCreated)
	r = e.do(http.MethodDelete, "/v2/"+repo+"/blobs/"+d, nil)
	wantStatus(t, r, http.StatusAccepted)
	wantError(t, e.do(http.MethodGet, "/v2/"+repo+"/blobs/"+d, nil), http.StatusNotFound, "BLOB_UNKNOWN")
	wantStatus(t, e.do(http.MethodHead, "/v2/"+repo+"/blobs/"+d, nil), http.StatusNotFound)
	wantError(t, e.do(http.MethodDelete, "/v2/"+repo+"/blobs/"+d, nil), http.StatusNotFound, "BLOB_UNKNOWN")
	e.getBlob("e2e/blobs2", d, int64(len(data)))

	// And it can be pushed to the first one again.
	e.uploadBlob(repo, data)
	e.getBlob(repo, d, int64(len(data)))
}
