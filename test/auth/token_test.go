package auth

import (
	"encoding/base64"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-jose/go-jose/v4"
	"github.com/go-jose/go-jose/v4/jwt"
	"github.com/google/go-containerregistry/pkg/authn"

	"github.com/cairn-registry/cairn/internal/testutil/cairnproc"
	"github.com/cairn-registry/cairn/internal/testutil/clitool"
	"github.com/cairn-registry/cairn/internal/testutil/regtest"
	"github.com/cairn-registry/cairn/internal/testutil/tokentest"
)

const (
	tokenService = "cairn-test-registry"
	tokenIssuer  = "cairn-test-token-server"
)

// tokenServer is a Docker token server: it authenticates users with Basic
// auth and grants each requested scope only the actions its policy allows.
type tokenServer struct {
	srv    *httptest.Server
	ca     *testCA
	signer *issued
	users  map[string]string              // user -> password
	policy map[string]map[string][]string // user -> "type:name" -> actions

	mu        sync.Mutex
	requested []string // scopes asked for, for diagnostics
}

func newTokenServer(t *testing.T, users map[string]string, policy map[string]map[string][]string) *tokenServer {
	t.Helper()
	ts := &tokenServer{ca: newCA(t, "token CA"), users: users, policy: policy}
	ts.signer = ts.ca.issue(t, "token signer")
	ts.srv = httptest.NewServer(http.HandlerFunc(ts.serveToken))
	t.Cleanup(ts.srv.Close)
	return ts
}

func (ts *tokenServer) realm() string { return ts.srv.URL + "/token" }

func (ts *tokenServer) serveToken(w http.ResponseWriter, r *http.Request) {
	user := ""
	if u, p, ok := r.BasicAuth(); ok {
		if want, known := ts.users[u]; !known || want != p {
			http.Error(w, `{"details":"bad credentials"}`, http.StatusUnauthorized)
			return
		}
		user = u
	}
	if r.URL.Query().Get("service") != tokenService {
		http.Error(w, "wrong service", http.StatusBadRequest)
		return
	}
	var granted []tokentest.Access
	for _, param := range r.URL.Query()["scope"] {
		for _, scope := range strings.Fields(param) {
			ts.mu.Lock()
			ts.requested = append(ts.requested, user+" "+scope)
			ts.mu.Unlock()
			i, j := strings.Index(scope, ":"), strings.LastIndex(scope, ":")
			if i < 0 || i == j {
				continue
			}
			typ, name, actions := scope[:i], scope[i+1:j], strings.Split(scope[j+1:], ",")
			allowed := ts.policy[user][typ+":"+name]
			var ok []string
			for _, a := range actions {
				if slices.Contains(allowed, a) {
					ok = append(ok, a)
				}
			}
			if len(ok) > 0 {
				granted = append(granted, tokentest.Access{Type: typ, Name: name, Actions: ok})
			}
		}
	}
	raw := ts.mint(nil, user, granted, time.Now(), 5*time.Minute, nil)
	w.Header().Set("Content-Type", "application/json")
	json.NewEncoder(w).Encode(map[string]any{
		"token": raw, "access_token": raw, "expires_in": 300, "issued_at": time.Now().UTC().Format(time.RFC3339),
	})
}

// mint signs a token for sub with the given access, valid from now for ttl
// (a negative ttl makes it already expired). signer nil means the server's
// trusted signing certificate; edit may change the claims before signing.
func (ts *tokenServer) mint(t *testing.T, sub string, acc []tokentest.Access, now time.Time, ttl time.Duration, signer *issued, edit ...func(*tokentest.Claims)) string {
	if signer == nil {
		signer = ts.signer
	}
	c := tokentest.Claims{
		Claims: jwt.Claims{
			Issuer: tokenIssuer, Subject: sub, Audience: jwt.Audience{tokenService},
			Expiry:    jwt.NewNumericDate(now.Add(ttl)),
			NotBefore: jwt.NewNumericDate(now.Add(-time.Minute)),
			IssuedAt:  jwt.NewNumericDate(now.Add(-time.Minute)),
			ID:        base64.RawURLEncoding.EncodeToString([]byte(now.String())),
		},
		Access: acc,
	}
	for _, e := range edit {
		e(&c)
	}
	raw, err := tokentest.Sign(jose.ES256, signer.key, c,
		map[jose.HeaderKey]any{"x5c": []string{base64.StdEncoding.EncodeToString(signer.cert.Raw)}})
	if err == nil {
		return raw
	}
	if t != nil {
		t.Fatal(err)
	}
	panic(err)
}

func (ts *tokenServer) config() string {
	return "auth:\n  token:\n    realm: " + ts.realm() + "\n    service: " + tokenService +
		"\n    issuer: " + tokenIssuer + "\n    rootcertbundle: " + ts.ca.pemPath + "\n"
}

// startTokenRegistry starts a token server with the standard policy and
// cairn trusting its tokens.
func startTokenRegistry(t *testing.T) (*tokenServer, *cairnproc.Server) {
	t.Helper()
	ts := standardTokenServer(t)
	return ts, startConfig(t, ts.config())
}

// standardPolicy: pusher may push team/app and pull team/base; puller may
// only pull team/app; admin may list the catalog and do anything to
// team/app and team/base.
func standardTokenServer(t *testing.T) *tokenServer {
	return newTokenServer(t,
		map[string]string{"pusher": "push-pw", "puller": "pull-pw", "admin": "admin-pw"},
		map[string]map[string][]string{
			"pusher": {"repository:team/app": {"pull", "push"}, "repository:team/base": {"pull"}},
			"puller": {"repository:team/app": {"pull"}},
			"admin": {
				"registry:catalog":     {"*"},
				"repository:team/app":  {"pull", "push", "delete"},
				"repository:team/base": {"pull", "push", "delete"},
			},
		})
}

func TestTokenCrane(t *testing.T) {
	t.Parallel()
	crane := clitool.Path(t, "crane")
	_, srv := startTokenRegistry(t)
	img := newImage(t, 2)
	login := func(user, pass string) *clitool.Session {
		e := clitool.NewSession(t)
		e.Run(t, crane, "auth", "login", srv.Addr, "-u", user, "-p", pass)
		return e
	}
	ref := srv.Addr + "/team/app:v1"

	pusher := login("pusher", "push-pw")
	pusher.Run(t, crane, "push", "--insecure", img.dir, ref)
	// pusher may pull team/base, not push to it.
	if out := pusher.Fail(t, crane, "push", "--insecure", img.dir, srv.Addr+"/team/base:v1"); !strings.Contains(out, "DENIED") {
		t.Errorf("push to team/base with a pull-only grant: want DENIED, got:\n%s", out)
	}

	puller := login("puller", "pull-pw")
	pulled := filepath.Join(t.TempDir(), "pulled")
	puller.Run(t, crane, "pull", "--insecure", "--format=oci", ref, pulled)
	if got := ociDigest(t, pulled); got != img.digest.String() {
		t.Errorf("puller pulled %s, want %s", got, img.digest)
	}
	if out := puller.Fail(t, crane, "push", "--insecure", img.dir, srv.Addr+"/team/app:v2"); !strings.Contains(out, "DENIED") {
		t.Errorf("push with a pull token: want DENIED, got:\n%s", out)
	}
	if out := puller.Fail(t, crane, "tag", "--insecure", ref, "v3"); !strings.Contains(out, "DENIED") {
		t.Errorf("tag with a pull token: want DENIED, got:\n%s", out)
	}
	// Cross-repository: team/base exists after admin pushes it, and the
	// puller's token for team/app does not open it.
	admin := login("admin", "admin-pw")
	admin.Run(t, crane, "push", "--insecure", img.dir, srv.Addr+"/team/base:v1")
	if out := puller.Fail(t, crane, "manifest", "--insecure", srv.Addr+"/team/base:v1"); !strings.Contains(out, "DENIED") {
		t.Errorf("pull of team/base with a team/app token: want DENIED, got:\n%s", out)
	}
	if out := puller.Fail(t, crane, "catalog", "--insecure", srv.Addr); !strings.Contains(out, "DENIED") {
		t.Errorf("catalog with a pull token: want DENIED, got:\n%s", out)
	}
	if out := string(admin.Run(t, crane, "catalog", "--insecure", srv.Addr)); !strings.Contains(out, "team/app") || !strings.Contains(out, "team/base") {
		t.Errorf("admin catalog = %q", out)
	}
	// The refused push and tag changed nothing.
	tags := string(admin.Run(t, crane, "ls", "--insecure", srv.Addr+"/team/app"))
	if strings.TrimSpace(tags) != "v1" {
		t.Errorf("tags of team/app = %q, want only v1", tags)
	}
	wrong := login("puller", "not-the-password")
	wrong.Fail(t, crane, "manifest", "--insecure", ref)
}

func TestTokenSkopeo(t *testing.T) {
	t.Parallel()
	s, fail := skopeoSession(t)
	_, srv := startTokenRegistry(t)
	img := newImage(t, 2)
	ref := "docker://" + srv.Addr + "/team/app:v1"

	skopeoRoundTrip(t, s, img, ref, "pusher:push-pw", "puller:pull-pw")
	if o := fail("copy", "--dest-tls-verify=false", "--dest-creds", "puller:pull-pw", "oci:"+img.dir+":v1", "docker://"+srv.Addr+"/team/app:v2"); !strings.Contains(strings.ToLower(o), "denied") {
		t.Errorf("skopeo push with a pull token: want denied, got:\n%s", o)
	}
	fail("inspect", "--raw", "--tls-verify=false", "--creds", "puller:pull-pw", "docker://"+srv.Addr+"/team/base:v1")
}

// TestTokenEnforcement sends hand-made tokens: the registry checks scope,
// repository, expiry, signature, issuer and audience, and refusals look the
// same whether or not the repository exists.
func TestTokenEnforcement(t *testing.T) {
	t.Parallel()
	ts, srv := startTokenRegistry(t)
	img := newImage(t, 1)
	pushImage(t, srv.Addr+"/team/app:v1", img, &authn.Basic{Username: "admin", Password: "admin-pw"})
	pushImage(t, srv.Addr+"/team/base:v1", img, &authn.Basic{Username: "admin", Password: "admin-pw"})
	m, err := img.img.Manifest()
	if err != nil {
		t.Fatal(err)
	}
	layer := m.Layers[0].Digest.String()
	manifestBody, err := img.img.RawManifest()
	if err != nil {
		t.Fatal(err)
	}

	now := time.Now()
	tok := func(acc ...tokentest.Access) string { return ts.mint(t, "tester", acc, now, 5*time.Minute, nil) }
	pullApp := tok(tokentest.Access{Type: "repository", Name: "team/app", Actions: []string{"pull"}})
	pushApp := tok(tokentest.Access{Type: "repository", Name: "team/app", Actions: []string{"pull", "push"}})
	catalog := tok(tokentest.Access{Type: "registry", Name: "catalog", Actions: []string{"*"}})
	other := newCA(t, "untrusted CA").issue(t, "untrusted signer")
	forged := ts.mint(t, "tester", []tokentest.Access{{Type: "repository", Name: "team/app", Actions: []string{"pull"}}}, now, 5*time.Minute, other)
	// A trusted certificate in x5c, but the signature made with another key.
	stolenCert := &issued{cert: ts.signer.cert, key: other.key}
	wrongKey := ts.mint(t, "tester", []tokentest.Access{{Type: "repository", Name: "team/app", Actions: []string{"pull"}}}, now, 5*time.Minute, stolenCert)

	hc := &http.Client{Timeout: 30 * time.Second}
	defer hc.CloseIdleConnections()
	bearer := func(tok string) []string { return []string{"Authorization", "Bearer " + tok} }
	challenge := func(scope, errCode string) string {
		c := `Bearer realm="` + ts.realm() + `",service="` + tokenService + `"`
		if scope != "" {
			c += `,scope="` + scope + `"`
		}
		if errCode != "" {
			c += `,error="` + errCode + `"`
		}
		return c
	}
	cases := []struct {
		name, method, path string
		body               []byte
		hdr                []string
		status             int
		code               string // OCI error code, "" for success
		challenge          string // exact WWW-Authenticate, "" for any
	}{
		{"base without token", "GET", "/v2/", nil, nil, 401, "UNAUTHORIZED", challenge("", "")},
		{"pull without token", "GET", "/v2/team/app/manifests/v1", nil, nil, 401, "UNAUTHORIZED", challenge("repository:team/app:pull", "")},
		{"push without token", "POST", "/v2/team/app/blobs/uploads/", nil, nil, 401, "UNAUTHORIZED", challenge("repository:team/app:pull,push", "")},
		{"catalog without token", "GET", "/v2/_catalog", nil, nil, 401, "UNAUTHORIZED", challenge("registry:catalog:*", "")},
		{"base with a token", "GET", "/v2/", nil, bearer(pullApp), 200, "", ""},
		{"pull token pulls the manifest", "GET", "/v2/team/app/manifests/v1", nil, bearer(pullApp), 200, "", ""},
		{"pull token pulls a blob", "GET", "/v2/team/app/blobs/" + layer, nil, bearer(pullApp), 200, "", ""},
		{"pull token lists tags", "GET", "/v2/team/app/tags/list", nil, bearer(pullApp), 200, "", ""},
		{"pull token lists referrers", "GET", "/v2/team/app/referrers/" + img.digest.String(), nil, bearer(pullApp), 200, "", ""},
		{"pull token pushes a manifest", "PUT", "/v2/team/app/manifests/v2", manifestBody, append(bearer(pullApp), "Content-Type", string(m.MediaType)),
			403, "DENIED", challenge("repository:team/app:pull,push", "insufficient_scope")},
		{"pull token starts an upload", "POST", "/v2/team/app/blobs/uploads/", nil, bearer(pullApp), 403, "DENIED", challenge("repository:team/app:pull,push", "insufficient_scope")},
		{"pull token deletes", "DELETE", "/v2/team/app/manifests/" + img.digest.String(), nil, bearer(pullApp), 403, "DENIED", challenge("repository:team/app:delete", "insufficient_scope")},
		{"push token deletes", "DELETE", "/v2/team/app/manifests/" + img.digest.String(), nil, bearer(pushApp), 403, "DENIED", ""},
		{"app token reads base", "GET", "/v2/team/base/manifests/v1", nil, bearer(pullApp), 403, "DENIED", challenge("repository:team/base:pull", "insufficient_scope")},
		{"app token reads a missing repository", "GET", "/v2/team/missing/manifests/v1", nil, bearer(pullApp), 403, "DENIED", challenge("repository:team/missing:pull", "insufficient_scope")},
		{"app token pushes to base", "POST", "/v2/team/base/blobs/uploads/", nil, bearer(pushApp), 403, "DENIED", ""},
		{"pull token lists the catalog", "GET", "/v2/_catalog", nil, bearer(pullApp), 403, "DENIED", challenge("registry:catalog:*", "insufficient_scope")},
		{"catalog token lists the catalog", "GET", "/v2/_catalog", nil, bearer(catalog), 200, "", ""},
		{"expired token", "GET", "/v2/team/app/manifests/v1", nil, bearer(ts.mint(t, "tester", []tokentest.Access{{Type: "repository", Name: "team/app", Actions: []string{"pull"}}}, now, -5*time.Minute, nil)),
			401, "UNAUTHORIZED", challenge("repository:team/app:pull", "invalid_token")},
		{"expired token on the base", "GET", "/v2/", nil, bearer(ts.mint(t, "tester", nil, now, -5*time.Minute, nil)), 401, "UNAUTHORIZED", challenge("", "invalid_token")},
		{"token not valid yet", "GET", "/v2/team/app/manifests/v1", nil, bearer(ts.mint(t, "tester", []tokentest.Access{{Type: "repository", Name: "team/app", Actions: []string{"pull"}}}, now.Add(10*time.Minute), 5*time.Minute, nil,
			func(c *tokentest.Claims) {
				c.NotBefore = jwt.NewNumericDate(now.Add(10 * time.Minute))
				c.IssuedAt = nil
			})), 401, "UNAUTHORIZED", ""},
		{"token signed by an untrusted CA", "GET", "/v2/team/app/manifests/v1", nil, bearer(forged), 401, "UNAUTHORIZED", challenge("repository:team/app:pull", "invalid_token")},
		{"trusted certificate, wrong signing key", "GET", "/v2/team/app/manifests/v1", nil, bearer(wrongKey), 401, "UNAUTHORIZED", ""},
		{"token for another service", "GET", "/v2/team/app/manifests/v1", nil, bearer(ts.mint(t, "tester", []tokentest.Access{{Type: "repository", Name: "team/app", Actions: []string{"pull"}}}, now, 5*time.Minute, nil,
			func(c *tokentest.Claims) { c.Audience = jwt.Audience{"another-registry"} })), 401, "UNAUTHORIZED", ""},
		{"token from another issuer", "GET", "/v2/team/app/manifests/v1", nil, bearer(ts.mint(t, "tester", []tokentest.Access{{Type: "repository", Name: "team/app", Actions: []string{"pull"}}}, now, 5*time.Minute, nil,
			func(c *tokentest.Claims) { c.Issuer = "someone-else" })), 401, "UNAUTHORIZED", ""},
		{"tampered token", "GET", "/v2/team/base/manifests/v1", nil, bearer(tamper(t, pullApp, "team/app", "team/base")), 401, "UNAUTHORIZED", ""},
		{"basic credentials instead of a token", "GET", "/v2/team/app/manifests/v1", nil, []string{"Authorization", "Basic cHVsbGVyOnB1bGwtcHc="}, 401, "UNAUTHORIZED", ""},
	}
	for _, c := range cases {
		r := regtest.Do(t, hc, c.method, srv.URL+c.path, c.body, c.hdr...)
		if r.Status != c.status || r.ErrorCode() != c.code {
			t.Errorf("%s: %s %s = %v, want %d %s", c.name, c.method, c.path, r, c.status, c.code)
			continue
		}
		if c.challenge != "" && r.Header.Get("WWW-Authenticate") != c.challenge {
			t.Errorf("%s: WWW-Authenticate\n got %s\nwant %s", c.name, r.Header.Get("WWW-Authenticate"), c.challenge)
		}
		if c.status >= 400 && strings.Contains(string(r.Body), "NAME_UNKNOWN") {
			t.Errorf("%s: a refusal tells whether the repository exists: %s", c.name, string(r.Body))
		}
	}

	// The refused PUT and DELETE changed nothing.
	admin := bearer(tok(tokentest.Access{Type: "repository", Name: "team/app", Actions: []string{"pull"}}))
	if r := regtest.Do(t, hc, "GET", srv.URL+"/v2/team/app/manifests/v2", nil, admin...); r.Status != 404 {
		t.Errorf("tag v2 after a refused push: %v", r)
	}
	if r := regtest.Do(t, hc, "GET", srv.URL+"/v2/team/app/manifests/"+img.digest.String(), nil, admin...); r.Status != 200 {
		t.Errorf("manifest after refused deletes: %v", r)
	}
	// Refusals for a repository that exists and one that does not carry
	// the same body, apart from the name.
	a := regtest.Do(t, hc, "GET", srv.URL+"/v2/team/base/tags/list", nil, bearer(pullApp)...)
	b := regtest.Do(t, hc, "GET", srv.URL+"/v2/team/nope/tags/list", nil, bearer(pullApp)...)
	if a.Status != b.Status || strings.ReplaceAll(string(a.Body), "team/base", "X") != strings.ReplaceAll(string(b.Body), "team/nope", "X") {
		t.Errorf("refusals differ between an existing and a missing repository:\n%v\n%v", a, b)
	}
}

// tamper rewrites a name inside a token's claims, keeping its signature.
func tamper(t *testing.T, raw, from, to string) string {
	t.Helper()
	parts := strings.Split(raw, ".")
	claims, err := base64.RawURLEncoding.DecodeString(parts[1])
	if err != nil {
		t.Fatal(err)
	}
	parts[1] = base64.RawURLEncoding.EncodeToString([]byte(strings.ReplaceAll(string(claims), from, to)))
	return strings.Join(parts, ".")
}

// TestTokenMount: a cross-repository mount needs pull on the source; without
// it the registry opens a plain upload instead, so the caller learns
// nothing about the source and must send the bytes. A mount that names no
// source searches only repositories the caller may pull (issue 10, item 2):
// on the old code a caller with push on its own repository mounted any
// blob or manifest of the registry by digest and then read it, and 201 vs
// 202 told it whether a digest existed.
func TestTokenMount(t *testing.T) {
	t.Parallel()
	ts, srv := startTokenRegistry(t)
	img := newImage(t, 1)
	pushImage(t, srv.Addr+"/team/app:v1", img, &authn.Basic{Username: "admin", Password: "admin-pw"})
	m, err := img.img.Manifest()
	if err != nil {
		t.Fatal(err)
	}
	manifest, err := img.img.Digest()
	if err != nil {
		t.Fatal(err)
	}
	layer := m.Layers[0].Digest.String()
	now := time.Now()
	token := func(acc ...tokentest.Access) string { return ts.mint(t, "tester", acc, now, 5*time.Minute, nil) }
	copyOnly := token(tokentest.Access{Type: "repository", Name: "team/copy", Actions: []string{"pull", "push"}})
	withSource := token(tokentest.Access{Type: "repository", Name: "team/copy", Actions: []string{"pull", "push"}}, tokentest.Access{Type: "repository", Name: "team/app", Actions: []string{"pull"}})
	hc := &http.Client{Timeout: 30 * time.Second, CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	defer hc.CloseIdleConnections()
	post := func(query, tok string) regtest.Response {
		return regtest.Do(t, hc, "POST", srv.URL+"/v2/team/copy/blobs/uploads/?"+query, nil, "Authorization", "Bearer "+tok)
	}
	wantUpload := func(r regtest.Response, what string) {
		t.Helper()
		if r.Status != http.StatusAccepted || !strings.Contains(r.Header.Get("Location"), "/v2/team/copy/blobs/uploads/") {
			t.Errorf("%s: %v, want 202 and an upload session", what, r)
		}
	}
	blobStatus := func(d string) int {
		return regtest.Do(t, hc, "GET", srv.URL+"/v2/team/copy/blobs/"+d, nil, "Authorization", "Bearer "+copyOnly).Status
	}

	// From a named source: needs pull on it.
	wantUpload(post("mount="+layer+"&from=team/app", copyOnly), "mount without pull on the source")
	if st := blobStatus(layer); st != http.StatusNotFound {
		t.Errorf("blob in team/copy after a refused mount: %d", st)
	}
	// Without a source: nothing of what the caller may not pull, not even
	// whether it exists.
	for _, d := range []string{layer, m.Config.Digest.String(), manifest.String(), "sha256:" + strings.Repeat("0", 64)} {
		wantUpload(post("mount="+d, copyOnly), "mount of "+d+" without from, no pull on its repository")
		if st := blobStatus(d); st != http.StatusNotFound {
			t.Errorf("GET %s from team/copy after a refused mount: %d, want 404", d, st)
		}
	}
	// With pull on the repository that holds it, both find it.
	if r := post("mount="+layer, withSource); r.Status != http.StatusCreated {
		t.Fatalf("mount without from, pull on team/app: %v, want 201", r)
	}
	if r := post("mount="+m.Config.Digest.String()+"&from=team/app", withSource); r.Status != http.StatusCreated {
		t.Fatalf("mount with pull on the source: %v, want 201", r)
	}
	for _, d := range []string{layer, m.Config.Digest.String()} {
		if st := blobStatus(d); st != http.StatusOK {
			t.Errorf("blob %s in team/copy after the mount: %d", d, st)
		}
	}
}

// TestTokenJWKS verifies tokens by kid against a JWKS file, with go-
// containerregistry doing the token dance as a client would.
func TestTokenJWKS(t *testing.T) {
	t.Parallel()
	ts := standardTokenServer(t)
	key := ts.signer.key
	jwks := jose.JSONWebKeySet{Keys: []jose.JSONWebKey{{Key: &key.PublicKey, KeyID: "signer-1", Algorithm: "ES256", Use: "sig"}}}
	b, err := json.Marshal(jwks)
	if err != nil {
		t.Fatal(err)
	}
	cfg := "auth:\n  token:\n    realm: " + ts.realm() + "\n    service: " + tokenService + "\n    issuer: " + tokenIssuer +
		"\n    jwks: " + writeFile(t, "jwks.json", string(b)) + "\n    signingalgorithms: [ES256]\n"
	srv := startConfig(t, cfg)

	sign := func(kid string) string {
		c := tokentest.Claims{Claims: jwt.Claims{Issuer: tokenIssuer, Audience: jwt.Audience{tokenService},
			Expiry: jwt.NewNumericDate(time.Now().Add(time.Minute))},
			Access: []tokentest.Access{{Type: "repository", Name: "team/app", Actions: []string{"pull"}}}}
		s, err := jose.NewSigner(jose.SigningKey{Algorithm: jose.ES256, Key: key}, (&jose.SignerOptions{}).WithHeader("kid", kid))
		if err != nil {
			t.Fatal(err)
		}
		raw, err := jwt.Signed(s).Claims(c).Serialize()
		if err != nil {
			t.Fatal(err)
		}
		return raw
	}
	hc := &http.Client{Timeout: 30 * time.Second}
	defer hc.CloseIdleConnections()
	if r := regtest.Do(t, hc, "GET", srv.URL+"/v2/team/app/tags/list", nil, "Authorization", "Bearer "+sign("signer-1")); r.Status != 404 || r.ErrorCode() != "NAME_UNKNOWN" {
		t.Errorf("JWKS kid: %v, want the registry's own answer (NAME_UNKNOWN)", r)
	}
	if r := regtest.Do(t, hc, "GET", srv.URL+"/v2/team/app/tags/list", nil, "Authorization", "Bearer "+sign("unknown")); r.Status != 401 {
		t.Errorf("unknown kid: %v, want 401", r)
	}
}
