package e2e

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/cairn-registry/cairn/internal/testutil/regtest"
)

func TestErrorCodes(t *testing.T) {
	t.Parallel()
	e := start(t)
	const repo = "e2e/errors"
	img := e.pushRandom(repo+":v1", 1, 512)
	unknown := sha(randBytes(t, 8))
	hex64 := strings.Repeat("ab", 32)
	longName := strings.Repeat("a/", 150) + "a"

	for _, tc := range []struct {
		method, path string
		hdr          []string
		statuses     []int
		codes        []string
	}{
		// Names break the grammar [a-z0-9]+((\.|_|__|-+)[a-z0-9]+)*(/...)*.
		{"GET", "/v2/UPPER/tags/list", nil, []int{400}, []string{"NAME_INVALID"}},
		{"GET", "/v2/e2e/Errors/manifests/v1", nil, []int{400}, []string{"NAME_INVALID"}},
		{"GET", "/v2/a/../b/tags/list", nil, []int{400}, []string{"NAME_INVALID"}},
		{"GET", "/v2/e2e/../e2e/errors/manifests/v1", nil, []int{400}, []string{"NAME_INVALID"}},
		{"GET", "/v2/a/%2e%2e/b/tags/list", nil, []int{400}, []string{"NAME_INVALID"}},
		{"GET", "/v2/a/..b/tags/list", nil, []int{400}, []string{"NAME_INVALID"}},
		{"GET", "/v2/a___b/tags/list", nil, []int{400}, []string{"NAME_INVALID"}},
		{"GET", "/v2/a-/tags/list", nil, []int{400}, []string{"NAME_INVALID"}},
		{"GET", "/v2/" + longName + "/tags/list", nil, []int{400}, []string{"NAME_INVALID"}},
		{"POST", "/v2/UPPER/blobs/uploads/", nil, []int{400}, []string{"NAME_INVALID"}},
		{"POST", "/v2/a/../b/blobs/uploads/", nil, []int{400}, []string{"NAME_INVALID"}},
		{"PUT", "/v2/Bad/manifests/v1", []string{"Content-Type", mtOCIManifest}, []int{400}, []string{"NAME_INVALID"}},
		{"GET", "/v2/a/%2e%2e/b/blobs/" + unknown, nil, []int{400}, []string{"NAME_INVALID"}},

		// Unknown things.
		{"GET", "/v2/no/such/repo/tags/list", nil, []int{404}, []string{"NAME_UNKNOWN"}},
		{"GET", "/v2/no/such/repo/manifests/v1", nil, []int{404}, []string{"NAME_UNKNOWN", "MANIFEST_UNKNOWN"}},
		{"GET", "/v2/no/such/repo/blobs/" + unknown, nil, []int{404}, []string{"NAME_UNKNOWN", "BLOB_UNKNOWN"}},
		{"GET", "/v2/" + repo + "/blobs/" + unknown, nil, []int{404}, []string{"BLOB_UNKNOWN"}},
		{"GET", "/v2/" + repo + "/manifests/nosuchtag", nil, []int{404}, []string{"MANIFEST_UNKNOWN"}},
		{"GET", "/v2/" + repo + "/manifests/" + unknown, nil, []int{404}, []string{"MANIFEST_UNKNOWN"}},
		{"DELETE", "/v2/" + repo + "/manifests/" + unknown, nil, []int{404}, []string{"MANIFEST_UNKNOWN"}},
		{"GET", "/v2/" + repo + "/blobs/uploads/0b6bd0b4-6e43-4a6e-9f5c-3f6d2e0e1c11", nil, []int{404}, []string{"BLOB_UPLOAD_UNKNOWN"}},
		{"PATCH", "/v2/" + repo + "/blobs/uploads/0b6bd0b4-6e43-4a6e-9f5c-3f6d2e0e1c11", []string{"Content-Type", "application/octet-stream"}, []int{404}, []string{"BLOB_UPLOAD_UNKNOWN"}},
		{"PUT", "/v2/" + repo + "/blobs/uploads/0b6bd0b4-6e43-4a6e-9f5c-3f6d2e0e1c11?digest=" + unknown, nil, []int{404}, []string{"BLOB_UPLOAD_UNKNOWN"}},
		{"DELETE", "/v2/" + repo + "/blobs/uploads/0b6bd0b4-6e43-4a6e-9f5c-3f6d2e0e1c11", nil, []int{404}, []string{"BLOB_UPLOAD_UNKNOWN"}},
		// An upload id that tries to walk out of the uploads directory.
		{"GET", "/v2/" + repo + "/blobs/uploads/..%2F..%2F_layers", nil, []int{400, 404}, []string{"BLOB_UPLOAD_UNKNOWN", "BLOB_UPLOAD_INVALID", "NAME_INVALID", "UNSUPPORTED"}},
		{"PUT", "/v2/" + repo + "/blobs/uploads/..%2F..%2F_layers?digest=" + unknown, nil, []int{400, 404}, []string{"BLOB_UPLOAD_UNKNOWN", "BLOB_UPLOAD_INVALID", "NAME_INVALID", "UNSUPPORTED"}},

		// Malformed digests.
		{"GET", "/v2/" + repo + "/blobs/sha256:abc", nil, []int{400}, []string{"DIGEST_INVALID"}},
		{"GET", "/v2/" + repo + "/blobs/sha256:" + hex64[:63], nil, []int{400}, []string{"DIGEST_INVALID"}},
		{"GET", "/v2/" + repo + "/blobs/sha256:" + strings.ToUpper(hex64), nil, []int{400}, []string{"DIGEST_INVALID"}},
		{"GET", "/v2/" + repo + "/blobs/sha256:" + strings.Repeat("zz", 32), nil, []int{400}, []string{"DIGEST_INVALID"}},
		{"GET", "/v2/" + repo + "/blobs/sha512:" + hex64, nil, []int{400}, []string{"DIGEST_INVALID"}},
		{"GET", "/v2/" + repo + "/blobs/nodigest", nil, []int{400}, []string{"DIGEST_INVALID"}},
		{"DELETE", "/v2/" + repo + "/blobs/sha256:abc", nil, []int{400}, []string{"DIGEST_INVALID"}},
		{"GET", "/v2/" + repo + "/manifests/sha256:abc", nil, []int{400}, []string{"DIGEST_INVALID"}},
		{"GET", "/v2/" + repo + "/referrers/sha256:abc", nil, []int{400}, []string{"DIGEST_INVALID"}},
		{"POST", "/v2/" + repo + "/blobs/uploads/?digest=sha256:abc", []string{"Content-Type", "application/octet-stream"}, []int{400}, []string{"DIGEST_INVALID"}},
	} {
		t.Run(tc.method+" "+tc.path[:min(len(tc.path), 60)], func(t *testing.T) {
			e := e.with(t)
			var body []byte
			if tc.method == "PUT" && strings.Contains(tc.path, "/manifests/") {
				body, _ = img.RawManifest()
			}
			r := e.do(tc.method, tc.path, body, tc.hdr...)
			wantErrorIn(t, r, tc.statuses, tc.codes...)
		})
	}

	// A malformed digest on closing an upload.
	loc := e.startUpload(repo)
	r := e.do(http.MethodPut, withQuery(loc, "digest", "sha256:"+hex64[:63]), []byte("x"), "Content-Type", "application/octet-stream")
	wantError(t, r, http.StatusBadRequest, "DIGEST_INVALID")

	// Closing an upload without a digest.
	loc = e.startUpload(repo)
	r = e.do(http.MethodPut, loc, []byte("x"), "Content-Type", "application/octet-stream")
	wantErrorIn(t, r, []int{400}, "DIGEST_INVALID", "BLOB_UPLOAD_INVALID")

	// Range errors on a fresh upload.
	loc = e.startUpload(repo)
	r = e.do(http.MethodPatch, loc, []byte("hello"), "Content-Type", "application/octet-stream", "Content-Range", "5-9")
	wantError(t, r, http.StatusRequestedRangeNotSatisfiable, "RANGE_INVALID")
	r = e.do(http.MethodPatch, loc, []byte("hello"), "Content-Type", "application/octet-stream", "Content-Range", "0-99")
	wantErrorIn(t, r, []int{400, 416}, "RANGE_INVALID", "SIZE_INVALID", "BLOB_UPLOAD_INVALID")
	// None of that moved the upload: it is still empty and takes byte 0.
	loc = e.patchChunk(loc, 0, []byte("hello"))
	e.closeUpload(loc, sha([]byte("hello")), nil, 0)
	e.getBlob(repo, sha([]byte("hello")), 5)

	// The image is untouched by all of the above.
	e.verifyImage(repo, "v1", img)
}

// rawRequest writes a request by hand whose Content-Length promises more
// bytes than the body has, half-closes the connection and reads the answer.
func rawRequest(t *testing.T, addr, method, target string, declared int, body []byte) *http.Response {
	t.Helper()
	conn, err := net.DialTimeout("tcp", addr, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	conn.SetDeadline(time.Now().Add(30 * time.Second))
	fmt.Fprintf(conn, "%s %s HTTP/1.1\r\nHost: %s\r\nContent-Type: application/octet-stream\r\nContent-Length: %d\r\nConnection: close\r\n\r\n",
		method, target, addr, declared)
	conn.Write(body)
	conn.(*net.TCPConn).CloseWrite()
	resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
	if err != nil {
		t.Fatalf("%s %s with a short body: no response: %v", method, target, err)
	}
	return resp
}

func TestSizeInvalid(t *testing.T) {
	t.Parallel()
	e := start(t)
	const repo = "e2e/size"
	data := randBytes(t, 1000)
	d := sha(data)

	loc := e.startUpload(repo)
	u := e.abs(withQuery(loc, "digest", d))
	target := u[len(e.srv.URL):]
	for _, tc := range []struct{ method, target string }{
		{"PUT", target},
		{"POST", "/v2/" + repo + "/blobs/uploads/?digest=" + d},
	} {
		resp := rawRequest(t, e.srv.Addr, tc.method, tc.target, len(data)+100, data)
		b, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<16))
		resp.Body.Close()
		r := regtest.Response{Status: resp.StatusCode, Header: resp.Header, Body: b, Req: tc.method + " " + tc.target}
		wantError(t, r, http.StatusBadRequest, "SIZE_INVALID")
		wantStatus(t, e.do(http.MethodHead, "/v2/"+repo+"/blobs/"+d, nil), http.StatusNotFound)
	}
	// The registry still works and takes the same bytes honestly.
	e.uploadBlob(repo, data)
	e.getBlob(repo, d, int64(len(data)))
}
