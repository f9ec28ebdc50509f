package server

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"math"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"

	"github.com/opencontainers/go-digest"

	"github.com/cairn-registry/cairn/internal/registry"
	"github.com/cairn-registry/cairn/internal/storage/driver/inmemory"
)

// Fuzz targets for what the HTTP front parses from requests: routes, Range
// and Content-Range. The header targets go through ServeHTTP over an
// in-memory registry, so they state the API's behaviour (status codes,
// headers, stored bytes) rather than one helper's, and keep holding when
// the helpers move.

const fuzzName = "fuzz/repo"

func newFuzzServer() *Server {
	return New(registry.New(inmemory.New(), registry.Options{}), Options{})
}

// serve runs one request through s and returns the recorded response.
// contentLength < 0 sends the body without a length, as a chunked request.
func serve(s *Server, method, target string, hdr map[string]string, body []byte, contentLength int64) *httptest.ResponseRecorder {
	req := httptest.NewRequest(method, target, bytes.NewReader(body))
	req.ContentLength = contentLength
	for k, v := range hdr {
		req.Header.Set(k, v)
	}
	w := httptest.NewRecorder()
	s.ServeHTTP(w, req)
	return w
}

func sha(b []byte) string {
	s := sha256.Sum256(b)
	return "sha256:" + hex.EncodeToString(s[:])
}

// FuzzParseRoute: a route parsed from any path rebuilds to a path that
// parses to the same route, and a valid repository name put into any
// endpoint's path is parsed back whole, even when it contains endpoint
// words ("blobs", "manifests", "tags/list", "uploads").
func FuzzParseRoute(f *testing.F) {
	d := string(digest.FromString("x"))
	for _, s := range []struct{ path, name, ref string }{
		{"/v2/", "a", "latest"},
		{"/v2/_catalog", "library/alpine", d},
		{"/v2/a/b/c/manifests/latest", "a/b/c", "v1"},
		{"/v2/blobs/manifests/manifests/x", "blobs/manifests", "x"},
		{"/v2/a/blobs/uploads/blobs/" + d, "a/blobs/uploads", d},
		{"/v2/tags/list/tags/list", "tags/list", "list"},
		{"/v2/a/blobs/uploads/", "a/blobs", "uploads"},
		{"/v2/a/blobs/uploads", "x/tags", "list"},
		{"/v2/a/referrers/" + d, "referrers/referrers", d},
		{"/v2//blobs/x", "a/manifests", "manifests"},
		{"/v2/a/blobs/uploads/0f3e-4b", "uploads/blobs", "0f3e-4b"},
	} {
		f.Add(s.path, s.name, s.ref)
	}
	f.Fuzz(func(t *testing.T, path, name, ref string) {
		rt := parseRoute(path)
		if rt.kind != routeNone {
			p, ok := routePath(rt)
			if !ok {
				t.Fatalf("parseRoute(%q) = %+v: a route with a slash in its reference", path, rt)
			}
			if got := parseRoute(p); got != rt {
				t.Fatalf("parseRoute(%q) = %+v, rebuilt as %q which parses as %+v", path, rt, p, got)
			}
		}

		if registry.ValidateName(name) != nil || ref == "" || strings.Contains(ref, "/") {
			return
		}
		_, refDigest, refErr := registry.ParseReference(ref)
		for kind := routeTags; kind <= routeUpload; kind++ {
			want := route{kind: kind, name: name}
			switch kind {
			case routeManifest:
				if refErr != nil {
					continue
				}
				want.ref = ref
			case routeReferrers, routeBlob:
				if refDigest == "" {
					continue
				}
				want.ref = ref
			case routeUpload:
				want.ref = ref
			}
			p, _ := routePath(want)
			if got := parseRoute(p); got != want {
				t.Fatalf("%q parses as %+v, want %+v", p, got, want)
			}
		}
	})
}

// routePath is the canonical request path of rt; false when rt's reference
// cannot be one path segment.
func routePath(rt route) (string, bool) {
	if strings.Contains(rt.ref, "/") {
		return "", false
	}
	base := "/v2/" + rt.name
	switch rt.kind {
	case routeBase:
		return "/v2/", true
	case routeCatalog:
		return "/v2/_catalog", true
	case routeTags:
		return base + "/tags/list", true
	case routeManifest:
		return base + "/manifests/" + rt.ref, true
	case routeReferrers:
		return base + "/referrers/" + rt.ref, true
	case routeBlob:
		return base + "/blobs/" + rt.ref, true
	case routeUploadStart:
		return base + "/blobs/uploads/", true
	case routeUpload:
		return base + "/blobs/uploads/" + rt.ref, true
	}
	return "", false
}

// FuzzRange checks blob Range handling two ways. parseRange, for any blob
// size, either refuses or names a non-empty span inside the blob (the whole
// blob when not partial). And a GET and a HEAD of a stored blob with that
// Range header answer 200 with the blob, 206 with exactly the bytes its
// Content-Range names, or 416 with "bytes */size", never anything else.
func FuzzRange(f *testing.F) {
	blob := []byte("0123456789abcdefghijklmnopqrstuvwxyz")
	for _, h := range []string{
		"", "bytes=0-9", "bytes=10-", "bytes=30-200", "bytes=-5", "bytes=-500", "bytes=36-",
		"bytes=150-160", "bytes=-0", "bytes=0-1,5-6", "items=0-1", "bytes=5-2", "bytes=x-2",
		"bytes= 3-4 ", "bytes=-", "bytes=--1", "bytes=+1-+2", "bytes=0-9223372036854775807",
		"bytes=9223372036854775807-", "bytes=-9223372036854775808", "Bytes=0-1",
	} {
		f.Add(h, int64(len(blob)), blob)
		f.Add(h, int64(0), []byte{})
	}
	f.Add("bytes=-1", int64(math.MaxInt64), []byte("x"))
	f.Fuzz(func(t *testing.T, header string, size int64, blob []byte) {
		if size < 0 {
			size = -(size + 1) // storage sizes are never negative
		}
		start, length, partial, ok := parseRange(header, size)
		switch {
		case !ok:
		case !partial:
			if start != 0 || length != size {
				t.Fatalf("parseRange(%q, %d) = whole blob as %d+%d", header, size, start, length)
			}
		default:
			if start < 0 || length < 1 || start > size-length {
				t.Fatalf("parseRange(%q, %d) = partial span %d+%d outside the blob", header, size, start, length)
			}
		}
		if !strings.HasPrefix(header, "bytes=") && (!ok || partial) {
			t.Fatalf("parseRange(%q, %d) took a header without the bytes unit as a range", header, size)
		}

		blob = blob[:min(len(blob), 1<<16)]
		s := newFuzzServer()
		d := sha(blob)
		if w := serve(s, http.MethodPost, "/v2/"+fuzzName+"/blobs/uploads/?digest="+d, nil, blob, int64(len(blob))); w.Code != http.StatusCreated {
			t.Fatalf("monolithic upload: %d %s", w.Code, w.Body)
		}
		hdr := map[string]string{"Range": header}
		get := serve(s, http.MethodGet, "/v2/"+fuzzName+"/blobs/"+d, hdr, nil, 0)
		n := int64(len(blob))
		switch get.Code {
		case http.StatusOK:
			if !bytes.Equal(get.Body.Bytes(), blob) {
				t.Fatalf("Range %q: 200 with %d bytes, blob has %d", header, get.Body.Len(), n)
			}
		case http.StatusPartialContent:
			a, b, total, ok := parseContentRange(get.Header().Get("Content-Range"))
			if !ok || total != n || a < 0 || b < a || b >= n {
				t.Fatalf("Range %q on %d bytes: 206 with Content-Range %q", header, n, get.Header().Get("Content-Range"))
			}
			if !bytes.Equal(get.Body.Bytes(), blob[a:b+1]) {
				t.Fatalf("Range %q: 206 body differs from bytes %d-%d", header, a, b)
			}
		case http.StatusRequestedRangeNotSatisfiable:
			if cr := get.Header().Get("Content-Range"); cr != "bytes */"+strconv.FormatInt(n, 10) {
				t.Fatalf("Range %q on %d bytes: 416 with Content-Range %q", header, n, cr)
			}
		default:
			t.Fatalf("Range %q: status %d %s", header, get.Code, get.Body)
		}
		if get.Code != http.StatusRequestedRangeNotSatisfiable {
			if cl := get.Header().Get("Content-Length"); cl != strconv.Itoa(get.Body.Len()) {
				t.Fatalf("Range %q: Content-Length %s for a %d-byte body", header, cl, get.Body.Len())
			}
		}
		head := serve(s, http.MethodHead, "/v2/"+fuzzName+"/blobs/"+d, hdr, nil, 0)
		// A HEAD answered with an error body is fine: net/http drops it.
		if head.Code != get.Code || head.Code != http.StatusRequestedRangeNotSatisfiable && head.Body.Len() != 0 ||
			head.Header().Get("Content-Range") != get.Header().Get("Content-Range") ||
			head.Code != http.StatusRequestedRangeNotSatisfiable && head.Header().Get("Content-Length") != get.Header().Get("Content-Length") {
			t.Fatalf("Range %q: HEAD answered %d %v, GET %d %v", header, head.Code, head.Header(), get.Code, get.Header())
		}
	})
}

// parseContentRange reads "bytes a-b/total" strictly.
func parseContentRange(s string) (a, b, total int64, ok bool) {
	n, err := fmt.Sscanf(s, "bytes %d-%d/%d", &a, &b, &total)
	if err != nil || n != 3 || fmt.Sprintf("bytes %d-%d/%d", a, b, total) != s {
		return 0, 0, 0, false
	}
	return a, b, total, true
}

// FuzzUploadChunk sends a chunk with an arbitrary Content-Range to an
// upload already holding len(prefix) bytes, as a PATCH or as the closing
// PUT, with or without a Content-Length. The server must never answer 5xx;
// it may accept the chunk only when it continues the upload (no
// Content-Range, or one that starts where the upload ends and spans exactly
// the body), and must accept such a chunk when its length is known; an
// accepted chunk is what the upload then holds, and a refused one leaves
// the upload as it was.
func FuzzUploadChunk(f *testing.F) {
	for _, s := range []struct {
		prefix, cr, body string
	}{
		{"", "0-4", "hello"},
		{"", "bytes=0-4", "hello"},
		{"", "bytes 0-4/5", "hello"},
		{"", "0-4/*", "hello"},
		{"abc", "3-7", "hello"},
		{"abc", "0-4", "hello"},
		{"abc", "4-8", "hello"},
		{"abc", "3-6", "hello"},
		{"abc", "3-9", "hello"},
		{"abc", "", "hello"},
		{"abc", "3-2", ""},
		{"", "", ""},
		{"abc", "-3-7", "hello"},
		{"abc", "3-+7", "hello"},
		{"abc", "3-", "hello"},
		{"abc", "0-9223372036854775807", "x"},
		{"abc", "3-9223372036854775807", "x"},
		{"abc", "03-07", "hello"},
		{"abc", "3 - 7", "hello"},
	} {
		for mode := range uint8(8) {
			f.Add([]byte(s.prefix), s.cr, []byte(s.body), mode)
		}
	}
	f.Fuzz(func(t *testing.T, prefix []byte, contentRange string, body []byte, mode uint8) {
		finish := mode&1 != 0      // the chunk is the closing PUT
		chunked := mode&2 != 0     // the chunk has no Content-Length
		rangedFirst := mode&4 != 0 // the prefix itself was sent with a Content-Range
		s := newFuzzServer()
		w := serve(s, http.MethodPost, "/v2/"+fuzzName+"/blobs/uploads/", nil, nil, 0)
		if w.Code != http.StatusAccepted {
			t.Fatalf("start upload: %d %s", w.Code, w.Body)
		}
		loc := w.Header().Get("Location")
		if len(prefix) > 0 {
			var hdr map[string]string
			if rangedFirst {
				hdr = map[string]string{"Content-Range": fmt.Sprintf("0-%d", len(prefix)-1)}
			}
			w = serve(s, http.MethodPatch, loc, hdr, prefix, int64(len(prefix)))
			if w.Code != http.StatusAccepted || w.Header().Get("Range") != fmt.Sprintf("0-%d", len(prefix)-1) {
				t.Fatalf("first chunk: %d, Range %q", w.Code, w.Header().Get("Range"))
			}
			loc = w.Header().Get("Location")
		}

		var hdr map[string]string
		if contentRange != "" {
			hdr = map[string]string{"Content-Range": contentRange}
		}
		cl := int64(len(body))
		if chunked {
			cl = -1
		}
		whole := append(append([]byte{}, prefix...), body...)
		target, accepted := loc, http.StatusAccepted
		if finish {
			target, accepted = withQuery(loc, "digest="+sha(whole)), http.StatusCreated
		}
		method := map[bool]string{false: http.MethodPatch, true: http.MethodPut}[finish]
		w = serve(s, method, target, hdr, body, cl)
		if w.Code >= 500 {
			t.Fatalf("%s with Content-Range %q: %d %s", method, contentRange, w.Code, w.Body)
		}
		// An empty closing PUT carries no chunk; its Content-Range is moot.
		noChunk := finish && cl == 0
		cont := contentRange == "" || noChunk || continues(contentRange, int64(len(prefix)), int64(len(body)))
		switch {
		case w.Code == accepted && !cont:
			t.Fatalf("%s with Content-Range %q on an upload of %d bytes accepted a %d-byte chunk", method, contentRange, len(prefix), len(body))
		case w.Code != accepted && cont && (contentRange == "" || !chunked) && (len(body) > 0 || contentRange == ""):
			t.Fatalf("%s with Content-Range %q on an upload of %d bytes refused a %d-byte chunk that continues it: %d %s",
				method, contentRange, len(prefix), len(body), w.Code, w.Body)
		}

		// What the upload may hold now: everything after an accepted chunk;
		// the prefix after a refused one, plus, for a chunk without
		// Content-Length (refused only once its body was read), what
		// reached storage before, as after a body cut short.
		lo, hi := len(prefix), len(prefix)
		if w.Code == accepted {
			lo, hi = len(whole), len(whole)
			if finish {
				if got := serve(s, http.MethodGet, "/v2/"+fuzzName+"/blobs/"+sha(whole), nil, nil, 0); got.Code != http.StatusOK || !bytes.Equal(got.Body.Bytes(), whole) {
					t.Fatalf("finished upload: GET %d, %d bytes, want %d", got.Code, got.Body.Len(), len(whole))
				}
				return
			}
			if r := w.Header().Get("Range"); r != rangeHeader(int64(len(whole))) {
				t.Fatalf("accepted chunk: Range %q for an upload of %d bytes", r, len(whole))
			}
			loc = w.Header().Get("Location")
		} else if chunked {
			hi = len(whole)
		}
		st := serve(s, http.MethodGet, loc, nil, nil, 0)
		if st.Code == http.StatusNotFound && w.Code != accepted {
			return // a refusal may end the session
		}
		var held []int
		for m := lo; m <= hi; m++ {
			if rangeHeader(int64(m)) == st.Header().Get("Range") {
				held = append(held, m)
			}
		}
		if st.Code != http.StatusNoContent || len(held) == 0 {
			t.Fatalf("upload status after %s answered %d: %d, Range %q; it may hold %d to %d bytes",
				method, w.Code, st.Code, st.Header().Get("Range"), lo, hi)
		}
		if len(held) > 1 {
			return // "0-0": empty or one byte; a wrong digest would cancel the upload
		}
		// Closing the upload yields the bytes its Range says it holds.
		fin := serve(s, http.MethodPut, withQuery(loc, "digest="+sha(whole[:held[0]])), nil, nil, 0)
		if fin.Code != http.StatusCreated {
			t.Fatalf("closing the upload of %d bytes: %d %s", held[0], fin.Code, fin.Body)
		}
	})
}

func withQuery(loc, q string) string {
	if strings.Contains(loc, "?") {
		return loc + "&" + q
	}
	return loc + "?" + q
}

// continues reports whether Content-Range cr names the n bytes that follow
// the size bytes an upload holds. It accepts the forms clients send:
// "a-b", "bytes=a-b", "bytes a-b", each optionally followed by "/total".
func continues(cr string, size, n int64) bool {
	cr = strings.TrimPrefix(strings.TrimPrefix(cr, "bytes="), "bytes ")
	if i := strings.IndexByte(cr, '/'); i >= 0 {
		cr = cr[:i]
	}
	first, last, ok := strings.Cut(cr, "-")
	a, err1 := strconv.ParseInt(first, 10, 64)
	b, err2 := strconv.ParseInt(last, 10, 64)
	return ok && err1 == nil && err2 == nil && n > 0 && a == size && b == size+n-1
}
