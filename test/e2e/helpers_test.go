// Package e2e tests a real `cairn serve` process over HTTP, against the OCI
// distribution-spec v1.1 and the Docker Registry HTTP API v2. Every pulled
// byte is checked against the digest that named it.
package e2e

import (
	"bytes"
	"crypto/rand"
	"crypto/sha256"
	"crypto/sha512"
	"encoding/hex"
	"encoding/json"
	"hash"
	"io"
	"net/http"
	"net/url"
	"os"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/cairn-registry/cairn/internal/testutil/cairnproc"
	"github.com/cairn-registry/cairn/internal/testutil/regtest"
)

// TestMain builds cairn once for the package.
func TestMain(m *testing.M) { os.Exit(cairnproc.Main(m)) }

// env is one running server and a plain HTTP client that does not follow
// redirects (a redirect is an answer we want to see, not hide).
type env struct {
	t   *testing.T
	srv *cairnproc.Server
	tr  *http.Transport // this server's connections, for raw requests and ggcr
	hc  *http.Client
}

// start runs a fresh server on its own temp root.
func start(t *testing.T, args ...string) *env {
	t.Helper()
	return startRoot(t, "", args...)
}

func startRoot(t *testing.T, root string, args ...string) *env {
	t.Helper()
	return newEnv(t, cairnproc.Start(t, root, args...))
}

// newEnv returns an env for a started server.
func newEnv(t *testing.T, srv *cairnproc.Server) *env {
	tr := http.DefaultTransport.(*http.Transport).Clone()
	// Runs before the server's Stop: a connection the client dialled but
	// never used would hold up the server's graceful shutdown.
	t.Cleanup(tr.CloseIdleConnections)
	return &env{t: t, srv: srv, tr: tr, hc: &http.Client{
		Transport:     tr,
		Timeout:       2 * time.Minute,
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
	}}
}

// stop closes the client's idle connections and stops the server.
func (e *env) stop() {
	e.tr.CloseIdleConnections()
	e.srv.Stop()
}

// with returns a copy of e that reports to t (a subtest).
func (e *env) with(t *testing.T) *env {
	c := *e
	c.t = t
	return &c
}

// abs resolves a path or a Location header value against the server URL.
// An absolute path is appended as it is: URL resolution would remove the
// "." and ".." segments that some tests send on purpose.
func (e *env) abs(target string) string {
	e.t.Helper()
	if strings.HasPrefix(target, "/") && !strings.HasPrefix(target, "//") {
		return e.srv.URL + target
	}
	base, err := url.Parse(e.srv.URL + "/")
	if err != nil {
		e.t.Fatal(err)
	}
	u, err := url.Parse(target)
	if err != nil {
		e.t.Fatalf("parse %q: %v", target, err)
	}
	return base.ResolveReference(u).String()
}

// do sends one request with an in-memory body (nil means none) and
// headers given as key, value pairs.
func (e *env) do(method, target string, body []byte, hdr ...string) regtest.Response {
	e.t.Helper()
	return regtest.Do(e.t, e.hc, method, e.abs(target), body, hdr...)
}

// send performs req and reads the whole body.
func (e *env) send(req *http.Request) regtest.Response {
	e.t.Helper()
	return regtest.Send(e.t, e.hc, req)
}

// wantStatus fails the test now when r has another status.
func wantStatus(t *testing.T, r regtest.Response, status int) {
	t.Helper()
	if r.Status != status {
		t.Fatalf("%v: want status %d", r, status)
	}
}

// errorBody is the spec's error envelope.
type errorBody struct {
	Errors []struct {
		Code    string          `json:"code"`
		Message *string         `json:"message"`
		Detail  json.RawMessage `json:"detail"`
	} `json:"errors"`
}

var codeRE = regexp.MustCompile(`^[A-Z_]+$`)

// errorCodes parses r's body as the spec's error envelope and returns its
// codes; a body of another shape is an error of the test.
func errorCodes(t *testing.T, r regtest.Response) []string {
	t.Helper()
	var eb errorBody
	dec := json.NewDecoder(bytes.NewReader(r.Body))
	if err := dec.Decode(&eb); err != nil {
		t.Errorf("%v: error body is not JSON: %v", r, err)
		return nil
	}
	if len(eb.Errors) == 0 {
		t.Errorf("%v: error body has no errors[]", r)
	}
	var codes []string
	for _, x := range eb.Errors {
		if !codeRE.MatchString(x.Code) {
			t.Errorf("%v: error code %q is not upper-case letters and underscores", r, x.Code)
		}
		codes = append(codes, x.Code)
	}
	return codes
}

// wantError checks status and that the JSON error body carries one of codes.
func wantError(t *testing.T, r regtest.Response, status int, codes ...string) {
	t.Helper()
	wantErrorIn(t, r, []int{status}, codes...)
}

// wantErrorIn is wantError where the spec allows several statuses.
func wantErrorIn(t *testing.T, r regtest.Response, statuses []int, codes ...string) {
	t.Helper()
	if !slices.Contains(statuses, r.Status) {
		t.Errorf("%v: want status in %v (codes %v)", r, statuses, codes)
		return
	}
	got := errorCodes(t, r)
	for _, c := range got {
		if slices.Contains(codes, c) {
			return
		}
	}
	t.Errorf("%v: want error code in %v, got %v", r, codes, got)
}

// randBytes returns n random bytes.
func randBytes(t testing.TB, n int) []byte {
	t.Helper()
	b := make([]byte, n)
	if _, err := rand.Read(b); err != nil {
		t.Fatal(err)
	}
	return b
}

func newHash(t testing.TB, alg string) hash.Hash {
	t.Helper()
	switch alg {
	case "sha256":
		return sha256.New()
	case "sha512":
		return sha512.New()
	}
	t.Fatalf("unsupported digest algorithm %q", alg)
	return nil
}

// digestOf returns "<alg>:<hex>" of b.
func digestOf(t testing.TB, alg string, b []byte) string {
	t.Helper()
	h := newHash(t, alg)
	h.Write(b)
	return alg + ":" + hex.EncodeToString(h.Sum(nil))
}

func sha(b []byte) string { s := sha256.Sum256(b); return "sha256:" + hex.EncodeToString(s[:]) }

// verifyStream reads all of rd, hashing it with digest's algorithm, and
// checks the digest and (when size >= 0) the length.
func verifyStream(t testing.TB, what string, rd io.Reader, digest string, size int64) {
	t.Helper()
	alg, _, ok := strings.Cut(digest, ":")
	if !ok {
		t.Fatalf("%s: bad digest %q", what, digest)
	}
	h := newHash(t, alg)
	n, err := io.Copy(h, rd)
	if err != nil {
		t.Errorf("%s: read after %d bytes: %v", what, n, err)
		return
	}
	if got := alg + ":" + hex.EncodeToString(h.Sum(nil)); got != digest {
		t.Errorf("%s: content hashes to %s, want %s (%d bytes)", what, got, digest, n)
	}
	if size >= 0 && n != size {
		t.Errorf("%s: got %d bytes, want %d", what, n, size)
	}
}

// getBlob streams GET /v2/<repo>/blobs/<digest> through its hash; size < 0
// skips the length check.
func (e *env) getBlob(repo, digest string, size int64) {
	e.t.Helper()
	req, err := http.NewRequestWithContext(e.t.Context(), http.MethodGet, e.abs("/v2/"+repo+"/blobs/"+digest), nil)
	if err != nil {
		e.t.Fatal(err)
	}
	resp, err := e.hc.Do(req)
	if err != nil {
		e.t.Fatalf("GET blob %s: %v", digest, err)
	}
	defer resp.Body.Close()
	if got := resp.Header.Get("Docker-Content-Digest"); got != "" && got != digest {
		e.t.Errorf("GET blob %s: Docker-Content-Digest %s", digest, got)
	}
	if resp.StatusCode == http.StatusTemporaryRedirect {
		// An object store's presigned URL (blob redirects): follow it as
		// a client does, without cairn's credentials.
		loc := resp.Header.Get("Location")
		if resp, err = http.Get(loc); err != nil {
			e.t.Fatalf("GET blob %s at %s: %v", digest, loc, err)
		}
		defer resp.Body.Close()
	}
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(resp.Body)
		e.t.Fatalf("GET /v2/%s/blobs/%s -> %d %s", repo, digest, resp.StatusCode, b)
	}
	verifyStream(e.t, "blob "+repo+"@"+digest, resp.Body, digest, size)
}

// uploadBlob pushes data by POST then PUT ?digest= and returns the digest.
func (e *env) uploadBlob(repo string, data []byte) string {
	e.t.Helper()
	return e.uploadBlobAlg(repo, data, "sha256")
}

func (e *env) uploadBlobAlg(repo string, data []byte, alg string) string {
	e.t.Helper()
	d := digestOf(e.t, alg, data)
	r := e.do(http.MethodPost, "/v2/"+repo+"/blobs/uploads/", nil)
	wantStatus(e.t, r, http.StatusAccepted)
	loc := r.Header.Get("Location")
	if loc == "" {
		e.t.Fatalf("%v: no Location", r)
	}
	r = e.do(http.MethodPut, withQuery(loc, "digest", d), data, "Content-Type", "application/octet-stream")
	wantStatus(e.t, r, http.StatusCreated)
	if got := r.Header.Get("Docker-Content-Digest"); got != d {
		e.t.Errorf("%v: Docker-Content-Digest %q, want %q", r, got, d)
	}
	return d
}

// withQuery adds key=value to a (possibly relative) URL that may already
// carry critical query parameters.
func withQuery(loc, key, value string) string {
	u, err := url.Parse(loc)
	if err != nil {
		panic(err)
	}
	q := u.Query()
	q.Add(key, value)
	u.RawQuery = q.Encode()
	return u.String()
}

// putManifest PUTs body as a manifest of the given media type.
func (e *env) putManifest(repo, reference, mediaType string, body []byte) regtest.Response {
	e.t.Helper()
	return e.do(http.MethodPut, "/v2/"+repo+"/manifests/"+reference, body, "Content-Type", mediaType)
}

// getManifest GETs a manifest with every type accepted and checks the
// status is 200, the body hashes to wantDigest and the headers agree.
func (e *env) getManifest(repo, reference, wantDigest, wantType string) []byte {
	e.t.Helper()
	r := e.do(http.MethodGet, "/v2/"+repo+"/manifests/"+reference, nil, "Accept", regtest.ManifestAccept)
	wantStatus(e.t, r, http.StatusOK)
	alg, _, _ := strings.Cut(wantDigest, ":")
	if got := digestOf(e.t, alg, r.Body); got != wantDigest {
		e.t.Errorf("GET manifest %s:%s: body hashes to %s, want %s", repo, reference, got, wantDigest)
	}
	if got := r.Header.Get("Docker-Content-Digest"); got != "" && got != wantDigest {
		e.t.Errorf("GET manifest %s:%s: Docker-Content-Digest %s, want %s", repo, reference, got, wantDigest)
	}
	if got := r.Header.Get("Content-Type"); wantType != "" && got != wantType {
		e.t.Errorf("GET manifest %s:%s: Content-Type %q, want %q", repo, reference, got, wantType)
	}
	return r.Body
}

// tagsList GETs /v2/<repo>/tags/list with the query and decodes it.
func (e *env) tagsList(repo, query string) (tags []string, r regtest.Response) {
	e.t.Helper()
	r = e.do(http.MethodGet, "/v2/"+repo+"/tags/list"+query, nil)
	if r.Status != http.StatusOK {
		return nil, r
	}
	var body struct {
		Name string   `json:"name"`
		Tags []string `json:"tags"`
	}
	if err := json.Unmarshal(r.Body, &body); err != nil {
		e.t.Fatalf("%v: %v", r, err)
	}
	if body.Name != repo {
		e.t.Errorf("%v: name %q, want %q", r, body.Name, repo)
	}
	return body.Tags, r
}

var linkRE = regexp.MustCompile(`^<([^>]+)>;\s*rel="?next"?$`)

// nextLink returns the target of r's Link rel="next" header, or "".
func nextLink(t *testing.T, r regtest.Response) string {
	t.Helper()
	l := r.Header.Get("Link")
	if l == "" {
		return ""
	}
	m := linkRE.FindStringSubmatch(strings.TrimSpace(l))
	if m == nil {
		t.Fatalf("%v: Link header %q is not <url>; rel=\"next\"", r, l)
	}
	return m[1]
}
