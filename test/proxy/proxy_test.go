// Package proxy tests cairn as a pull-through cache: a second cairn with
// token authentication is the upstream, behind a front in the test that
// counts its requests and can play dead.
package proxy

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-jose/go-jose/v4"
	"github.com/go-jose/go-jose/v4/jwt"
	"github.com/google/go-containerregistry/pkg/authn"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/remote"

	"github.com/cairn-registry/cairn/internal/testutil/cairnproc"
	"github.com/cairn-registry/cairn/internal/testutil/clitool"
	"github.com/cairn-registry/cairn/internal/testutil/regtest"
	"github.com/cairn-registry/cairn/internal/testutil/tokentest"
)

func TestMain(m *testing.M) { os.Exit(cairnproc.Main(m)) }

const (
	tokenService = "upstream"
	tokenIssuer  = "upstream-token-server"
)

// tokenServer issues tokens for the upstream: "pusher" may push and pull
// everything, "mirror" (the cache's credentials) pull everything.
type tokenServer struct {
	srv  *httptest.Server
	key  *ecdsa.PrivateKey
	jwks string // path of the JWKS file the upstream trusts
}

func newTokenServer(t *testing.T) *tokenServer {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	set := jose.JSONWebKeySet{Keys: []jose.JSONWebKey{{Key: key.Public(), KeyID: "k1", Algorithm: string(jose.ES256), Use: "sig"}}}
	b, err := json.Marshal(set)
	if err != nil {
		t.Fatal(err)
	}
	ts := &tokenServer{key: key, jwks: filepath.Join(t.TempDir(), "jwks.json")}
	if err := os.WriteFile(ts.jwks, b, 0o600); err != nil {
		t.Fatal(err)
	}
	users := map[string]struct {
		pass    string
		actions []string
	}{"pusher": {"pusher-pw", []string{"pull", "push"}}, "mirror": {"mirror-pw", []string{"pull"}}}
	ts.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		u, p, _ := r.BasicAuth()
		user, ok := users[u]
		if !ok || user.pass != p {
			http.Error(w, "bad credentials", http.StatusUnauthorized)
			return
		}
		var acc []tokentest.Access
		for _, scope := range strings.Fields(strings.Join(r.URL.Query()["scope"], " ")) {
			parts := strings.Split(scope, ":")
			if len(parts) == 3 && parts[0] == "repository" {
				acc = append(acc, tokentest.Access{Type: "repository", Name: parts[1], Actions: user.actions})
			}
		}
		now := time.Now()
		raw, err := tokentest.Sign(jose.ES256, key, tokentest.Claims{
			Claims: jwt.Claims{Issuer: tokenIssuer, Subject: u, Audience: jwt.Audience{tokenService},
				Expiry: jwt.NewNumericDate(now.Add(5 * time.Minute)), NotBefore: jwt.NewNumericDate(now.Add(-time.Minute)),
				IssuedAt: jwt.NewNumericDate(now)},
			Access: acc,
		}, map[jose.HeaderKey]any{"kid": "k1"})
		if err != nil {
			http.Error(w, err.Error(), http.StatusInternalServerError)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		json.NewEncoder(w).Encode(map[string]any{"token": raw, "expires_in": 300})
	}))
	t.Cleanup(ts.srv.Close)
	return ts
}

// front stands before the upstream: it counts the requests the upstream
// answered (not its 401 challenges) by method and kind and, when down,
// fails them all with 503.
type front struct {
	srv  *httptest.Server
	down atomic.Bool
	mu   sync.Mutex
	hits map[string]int // "GET blob sha256:..." etc.
}

func newFront(t *testing.T, upstream string) *front {
	t.Helper()
	target, err := url.Parse(upstream)
	if err != nil {
		t.Fatal(err)
	}
	f := &front{hits: map[string]int{}}
	rp := httputil.NewSingleHostReverseProxy(target)
	f.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		kind := "other"
		parts := strings.Split(r.URL.Path, "/")
		if n := len(parts); n >= 4 && (parts[n-2] == "blobs" || parts[n-2] == "manifests") {
			kind = strings.TrimSuffix(parts[n-2], "s") + " " + parts[n-1]
		}
		if f.down.Load() {
			http.Error(w, "upstream down", http.StatusServiceUnavailable)
			return
		}
		sw := &statusWriter{ResponseWriter: w, status: http.StatusOK}
		rp.ServeHTTP(sw, r)
		if sw.status != http.StatusUnauthorized {
			f.mu.Lock()
			f.hits[r.Method+" "+kind]++
			f.mu.Unlock()
		}
	}))
	t.Cleanup(f.srv.Close)
	return f
}

type statusWriter struct {
	http.ResponseWriter
	status int
}

func (w *statusWriter) WriteHeader(code int) {
	w.status = code
	w.ResponseWriter.WriteHeader(code)
}

// count is how many requests matched method and kind prefix ("blob",
// "manifest sha256:...").
func (f *front) count(method, kind string) int {
	f.mu.Lock()
	defer f.mu.Unlock()
	n := 0
	for k, v := range f.hits {
		if strings.HasPrefix(k, method+" "+kind) {
			n += v
		}
	}
	return n
}

type env struct {
	ts       *tokenServer
	upstream *cairnproc.Server
	front    *front
	cache    *cairnproc.Server
}

// start runs the upstream (token auth) behind a front, and a cache
// mirroring it under prefix "up" (tags revalidated after revalidate) and
// serving other repositories as its own.
func start(t *testing.T, revalidate string) *env {
	t.Helper()
	e := &env{ts: newTokenServer(t)}
	e.upstream = cairnproc.Start(t, "", "--config", cairnproc.WriteConfig(t, "storage:\n  delete:\n    enabled: true\nauth:\n  token:\n    realm: "+e.ts.srv.URL+
		"/token\n    service: "+tokenService+"\n    issuer: "+tokenIssuer+"\n    jwks: "+e.ts.jwks+"\n"))
	e.front = newFront(t, e.upstream.URL)
	e.cache = cairnproc.Start(t, "", "--config", cairnproc.WriteConfig(t, "proxy:\n  upstreams:\n    - prefix: up\n      remoteurl: "+e.front.srv.URL+
		"\n      username: mirror\n      password: mirror-pw\n      revalidate: "+revalidate+"\n"))
	return e
}

// push writes img to the upstream as repo:tag.
func (e *env) push(t *testing.T, repo, tag string, img v1.Image) string {
	t.Helper()
	if err := remote.Write(regtest.Ref(t, e.upstream.Addr, repo+":"+tag), img,
		remote.WithAuth(&authn.Basic{Username: "pusher", Password: "pusher-pw"}), remote.WithContext(t.Context())); err != nil {
		t.Fatal(err)
	}
	d, err := img.Digest()
	if err != nil {
		t.Fatal(err)
	}
	return d.String()
}

// TestPullThrough: crane, skopeo and go-containerregistry pull byte-exact
// through the cache; a second pull asks the upstream for no blob; with the
// upstream down, cached images still pull; pushes to the mirror are
// refused while other repositories take them.
func TestPullThrough(t *testing.T) {
	t.Parallel()
	e := start(t, "1h")
	img := regtest.RandomImage(t, 3, 200<<10)
	want := e.push(t, "library/app", "v1", img)
	ref := regtest.Ref(t, e.cache.Addr, "up/library/app:v1")

	crane := clitool.Path(t, "crane")
	s := clitool.NewSession(t)
	pulled := filepath.Join(t.TempDir(), "pulled")
	s.Run(t, crane, "pull", "--insecure", "--format=oci", e.cache.Addr+"/up/library/app:v1", pulled)
	blobs := e.front.count("GET", "blob")
	if blobs != 4 { // three layers and the config
		t.Errorf("first pull: %d upstream blob GETs, want 4", blobs)
	}
	if err := regtest.CheckPull(t.Context(), ref, want); err != nil {
		t.Fatal(err)
	}
	if got := strings.TrimSpace(string(s.Run(t, crane, "digest", "--insecure", e.cache.Addr+"/up/library/app:v1"))); got != want {
		t.Errorf("crane digest through the cache = %s, want %s", got, want)
	}
	skopeo := clitool.Path(t, "skopeo")
	out := filepath.Join(t.TempDir(), "skopeo")
	s.Run(t, skopeo, "--insecure-policy", "copy", "--preserve-digests", "--src-tls-verify=false", "docker://"+e.cache.Addr+"/up/library/app:v1", "oci:"+out+":v1")
	if n := e.front.count("GET", "blob"); n != blobs {
		t.Errorf("later pulls made %d more upstream blob GETs, want none", n-blobs)
	}

	// The upstream down: the cached tag and digest still pull.
	e.front.down.Store(true)
	if err := regtest.CheckPull(t.Context(), ref, want); err != nil {
		t.Errorf("pull with the upstream down: %v", err)
	}
	s.Run(t, crane, "manifest", "--insecure", e.cache.Addr+"/up/library/app@"+want)
	// Something never cached is a clear error, not a hang.
	hc := &http.Client{Timeout: time.Minute}
	defer hc.CloseIdleConnections()
	if r := regtest.Do(t, hc, http.MethodGet, e.cache.URL+"/v2/up/library/other/manifests/v1", nil); r.Status != http.StatusServiceUnavailable || r.ErrorCode() != "UNAVAILABLE" {
		t.Errorf("uncached manifest with the upstream down: %v, want 503 UNAVAILABLE", r)
	}
	e.front.down.Store(false)

	// Pushes: refused under the mirrored prefix, accepted elsewhere.
	layout := filepath.Join(t.TempDir(), "layout")
	s.Run(t, crane, "pull", "--insecure", "--format=oci", e.cache.Addr+"/up/library/app:v1", layout)
	if o := s.Fail(t, crane, "push", "--insecure", layout, e.cache.Addr+"/up/library/app:mine"); !strings.Contains(o, "UNSUPPORTED") && !strings.Contains(o, "405") {
		t.Errorf("push to the mirror: want UNSUPPORTED, got:\n%s", o)
	}
	s.Run(t, crane, "push", "--insecure", layout, e.cache.Addr+"/local/app:v1")
}

// TestPullThroughPodman: podman pulls through the cache.
func TestPullThroughPodman(t *testing.T) {
	t.Parallel()
	podman := clitool.Path(t, "podman")
	e := start(t, "1h")
	img := regtest.RandomImage(t, 2, 100<<10)
	e.push(t, "tools/podman", "v1", img)
	cfg, err := img.ConfigName()
	if err != nil {
		t.Fatal(err)
	}
	state := t.TempDir()
	policy := filepath.Join(state, "policy.json")
	if err := os.WriteFile(policy, []byte(`{"default":[{"type":"insecureAcceptAnything"}]}`), 0o644); err != nil {
		t.Fatal(err)
	}
	global := []string{"--root", filepath.Join(state, "root"), "--runroot", filepath.Join(state, "runroot"),
		"--tmpdir", filepath.Join(state, "tmp"), "--storage-driver", "vfs", "--events-backend", "none", "--cgroup-manager", "cgroupfs"}
	s := clitool.NewSession(t)
	t.Cleanup(func() { s.Exec(podman, append(global, "rmi", "--all", "--force")...) })
	out := strings.Fields(string(s.Run(t, podman, append(global, "pull", "-q", "--tls-verify=false", "--signature-policy", policy, e.cache.Addr+"/up/tools/podman:v1")...)))
	if len(out) == 0 || out[len(out)-1] != cfg.Hex {
		t.Errorf("podman pull printed %q, want image ID %s", out, cfg.Hex)
	}
}

// TestPullThroughConcurrentFirstPulls: many clients pulling one layer for
// the first time cause one upstream fetch, and all get its bytes; a layer
// already cached for another repository is linked with no fetch.
func TestPullThroughConcurrentFirstPulls(t *testing.T) {
	t.Parallel()
	e := start(t, "1h")
	img := regtest.RandomImage(t, 1, 8<<20)
	want := e.push(t, "big/app", "v1", img)
	e.push(t, "big/copy", "v1", img)
	layers, err := img.Layers()
	if err != nil {
		t.Fatal(err)
	}
	ld, err := layers[0].Digest()
	if err != nil {
		t.Fatal(err)
	}
	hc := &http.Client{Timeout: 5 * time.Minute}
	defer hc.CloseIdleConnections()
	const n = 12
	var wg sync.WaitGroup
	for range n {
		wg.Go(func() {
			r := regtest.Do(t, hc, http.MethodGet, e.cache.URL+"/v2/up/big/app/blobs/"+ld.String(), nil)
			if r.Status != http.StatusOK || !strings.EqualFold("sha256:"+sha256Hex(r.Body), ld.String()) {
				t.Errorf("concurrent GET: %d, %d bytes not matching %s", r.Status, len(r.Body), ld)
			}
		})
	}
	wg.Wait()
	if got := e.front.count("GET", "blob "+ld.String()); got != 1 {
		t.Errorf("%d concurrent first pulls made %d upstream fetches, want 1", n, got)
	}
	// The same layer under another mirrored repository: linked, not fetched.
	if err := regtest.CheckPull(t.Context(), regtest.Ref(t, e.cache.Addr, "up/big/copy:v1"), want); err != nil {
		t.Fatal(err)
	}
	if got := e.front.count("GET", "blob "+ld.String()); got != 1 {
		t.Errorf("pull of the layer under another repository fetched it again (%d fetches)", got)
	}
}

// TestPullThroughRevalidates: a tag moved upstream is served moved once
// the revalidation interval passed (here: always), with a HEAD; unchanged,
// no manifest GET is made.
func TestPullThroughRevalidates(t *testing.T) {
	t.Parallel()
	e := start(t, "1ns")
	one := e.push(t, "moving/app", "latest", regtest.RandomImage(t, 1, 10<<10))
	ref := regtest.Ref(t, e.cache.Addr, "up/moving/app:latest")
	if err := regtest.CheckPull(t.Context(), ref, one); err != nil {
		t.Fatal(err)
	}
	gets := e.front.count("GET", "manifest")
	if err := regtest.CheckPull(t.Context(), ref, one); err != nil {
		t.Fatal(err)
	}
	if n := e.front.count("GET", "manifest"); n != gets {
		t.Errorf("unchanged tag: %d more upstream manifest GETs, want none (a HEAD suffices)", n-gets)
	}
	if e.front.count("HEAD", "manifest latest") == 0 {
		t.Error("the tag was not revalidated with a HEAD")
	}
	two := e.push(t, "moving/app", "latest", regtest.RandomImage(t, 1, 10<<10))
	if err := regtest.CheckPull(t.Context(), ref, two); err != nil {
		t.Fatalf("after the tag moved upstream: %v", err)
	}
	// The old image stays pullable by digest from the cache.
	if err := regtest.CheckPull(t.Context(), regtest.Ref(t, e.cache.Addr, "up/moving/app@"+one), one); err != nil {
		t.Fatal(err)
	}
}

func sha256Hex(b []byte) string {
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:])
}
