package identity

import (
	"context"
	"crypto/rand"
	"crypto/rsa"
	"fmt"
	"net/http"
	"net/http/cookiejar"
	"net/url"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/go-jose/go-jose/v4"
	"github.com/go-jose/go-jose/v4/jwt"
	"github.com/google/go-containerregistry/pkg/authn"

	"github.com/cairn-registry/cairn/internal/testutil/clitool"
	"github.com/cairn-registry/cairn/internal/testutil/hydratest"
	"github.com/cairn-registry/cairn/internal/testutil/regtest"
)

// oidcPolicy gives OIDC groups actions: admins everything, builders push
// to team/**, readers pull there. No group is defined under groups: the
// provider's groups claim names the members.
const oidcPolicy = `  accesscontrol:
    repositories:
      "team/**":
        policies:
          - groups: [readers]
            actions: [pull]
          - groups: [builders]
            actions: [pull, push]
    adminpolicy:
      groups: [admins]
      actions: ["*"]
`

// startOIDC runs cairn with auth.oidc for Hydra's client c (its clientid
// and secret; audiences, when given, instead of the client ID), the token
// service, the group policy and extra top-level sections.
func startOIDC(t *testing.T, h *hydratest.Hydra, c hydratest.Client, oidcExtra string, top ...string) *registry {
	t.Helper()
	return startConfig(t, fmt.Sprintf("auth:\n  oidc:\n    issuer: %s\n    clientid: %s\n    clientsecret: %s\n%s  tokenservice:\n    service: %s\n%s%s",
		h.Issuer, c.ID, c.Secret, oidcExtra, service, oidcPolicy, strings.Join(top, "")))
}

// signed is a token with claims, signed by key.
func signed(t *testing.T, key jose.JSONWebKey, claims map[string]any) string {
	t.Helper()
	alg := jose.SignatureAlgorithm(key.Algorithm)
	if alg == "" {
		alg = jose.RS256
	}
	s, err := jose.NewSigner(jose.SigningKey{Algorithm: alg, Key: key}, (&jose.SignerOptions{}).WithType("JWT"))
	if err != nil {
		t.Fatal(err)
	}
	raw, err := jwt.Signed(s).Claims(claims).Serialize()
	if err != nil {
		t.Fatal(err)
	}
	return raw
}

// TestOIDCLoginWithIDToken: users log in with the ID token Hydra gave them
// (through the authorization code flow with PKCE, as a browser would) as
// the password, go-containerregistry gets Bearer tokens from cairn's token
// service, and the access policy decides by the groups claim: a builder
// pushes, a reader pulls but may not push (403), nor pull outside team/**
// (403 alike for a repository that exists and one that does not). A token
// that is expired, signed by a key the provider does not publish, of
// another client (audience), of another issuer, or presented under
// another user name is refused with 401, alike for both repositories.
// Hydra's signing key changes midway (a new key in its ID-token set): the
// tokens of the new key are accepted (cairn fetches the new JWKS). crane,
// skopeo and podman log in with the token as the password; a JWT access token of
// an accepted audience is a password too.
//
// The OIDC tests do not run in parallel: Hydra's in-memory SQLite store
// refuses concurrent writes ("Unable to serialize access due to a
// concurrent update"), and every login writes.
func TestOIDCLoginWithIDToken(t *testing.T) {
	h := hydratest.New(t)
	c := h.CreateClient(t, "http://127.0.0.1/callback")
	other := h.CreateClient(t, "http://127.0.0.1/callback")
	r := startOIDC(t, h, c, "    audiences: ["+c.ID+", cairn-cli]\n")

	dave := h.ServeLogin(t, hydratest.User{Name: "dave", Groups: []string{"builders"}})
	erin := h.ServeLogin(t, hydratest.User{Name: "erin", Groups: []string{"readers"}})
	frank := h.ServeLogin(t, hydratest.User{Name: "frank", Groups: []string{"admins", "unrelated"}})
	daveTok, erinTok, frankTok := dave.IDToken(t, c), erin.IDToken(t, c), frank.IDToken(t, c)

	img := regtest.RandomImage(t, 2, 16<<10)
	rt := newSchemes()
	if err := r.push(t, "team/app", img, &authn.Basic{Username: "dave", Password: daveTok}, rt); err != nil {
		t.Fatalf("dave (builders) pushes team/app with his ID token: %v", err)
	}
	if rt.seen["Bearer"] == 0 || rt.seen["Basic"] != 0 {
		t.Errorf("Authorization schemes sent to /v2/: %v, want Bearer only", rt.seen)
	}
	if err := r.push(t, "other/app", img, &authn.Basic{Username: "frank", Password: frankTok}, nil); err != nil {
		t.Fatalf("frank (admins) pushes other/app: %v", err)
	}
	r.checkReader(t, "erin (readers)", &authn.Basic{Username: "erin", Password: erinTok})
	if s := status(r.pull(t, "team/app", &authn.Basic{Username: "erin", Password: ""})); s != 401 {
		t.Errorf("erin without a token: status %d, want 401", s)
	}

	// The CLI tools store the token as the password (docker login's way).
	t.Run("crane", func(t *testing.T) {
		crane := clitool.Path(t, "crane")
		builder := clitool.NewSession(t)
		builder.Run(t, crane, "auth", "login", r.Addr, "-u", "dave", "-p", daveTok)
		builder.Run(t, crane, "copy", "--insecure", r.Addr+"/team/app:v1", r.Addr+"/team/copy:v1")
		reader := clitool.NewSession(t)
		reader.Run(t, crane, "auth", "login", r.Addr, "-u", "erin", "-p", erinTok)
		reader.Run(t, crane, "digest", "--insecure", r.Addr+"/team/copy:v1")
		if out := reader.Fail(t, crane, "copy", "--insecure", r.Addr+"/team/app:v1", r.Addr+"/team/erin:v1"); !strings.Contains(out, "DENIED") {
			t.Errorf("crane copy by erin (readers): want DENIED, got:\n%s", out)
		}
	})
	t.Run("skopeo", func(t *testing.T) {
		skopeo := clitool.Path(t, "skopeo")
		e := clitool.NewSession(t)
		ref := "docker://" + r.Addr + "/team/app:v1"
		if out := string(e.Run(t, skopeo, "--insecure-policy", "inspect", "--raw", "--tls-verify=false", "--creds", "erin:"+erinTok, ref)); !strings.Contains(out, "schemaVersion") {
			t.Errorf("skopeo inspect as erin: %s", out)
		}
		if out := e.Fail(t, skopeo, "--insecure-policy", "inspect", "--raw", "--tls-verify=false", "--creds", "frank:"+erinTok, ref); !strings.Contains(out, "401") && !strings.Contains(strings.ToLower(out), "unauthorized") {
			t.Errorf("skopeo with erin's token as frank: want 401, got:\n%s", out)
		}
	})
	t.Run("podman", func(t *testing.T) {
		podman := clitool.Path(t, "podman")
		e := clitool.NewSession(t)
		e.Run(t, podman, "login", "--tls-verify=false", "-u", "erin", "-p", erinTok, r.Addr)
		if out := e.Fail(t, podman, "login", "--tls-verify=false", "-u", "frank", "-p", erinTok, r.Addr); !strings.Contains(strings.ToLower(out), "unauthorized") && !strings.Contains(strings.ToLower(out), "invalid") {
			t.Errorf("podman login with erin's token as frank: want a refusal, got:\n%s", out)
		}
	})

	// Hydra rotates: a new key signs its ID tokens from now on.
	key := h.NewIDTokenKey(t)
	rotated := erin.IDToken(t, c)
	if kid := tokenKID(t, rotated); kid != key.KeyID {
		t.Fatalf("after the rotation Hydra signs with %q, want the new key %q", kid, key.KeyID)
	}
	if err := r.pull(t, "team/app", &authn.Basic{Username: "erin", Password: rotated}); err != nil {
		t.Errorf("erin pulls team/app with a token of Hydra's new key: %v", err)
	}

	now := time.Now()
	claims := func(mod func(map[string]any)) map[string]any {
		m := map[string]any{
			"iss": h.Issuer, "sub": "erin", "aud": []string{c.ID}, "preferred_username": "erin", "groups": []string{"readers"},
			"iat": now.Unix(), "exp": now.Add(time.Hour).Unix(),
		}
		mod(m)
		return m
	}
	// A key Hydra does not publish, of the algorithm and key ID Hydra
	// signs with: only the signature is wrong.
	foreign, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		t.Fatal(err)
	}
	// The same token signed with Hydra's own key passes: the refusals
	// below are for what each changes, not for how the test signs.
	if err := r.pull(t, "team/app", &authn.Basic{Username: "erin", Password: signed(t, key, claims(func(map[string]any) {}))}); err != nil {
		t.Fatalf("erin with a token the test signed with Hydra's key: %v", err)
	}
	bad := []struct {
		what, user, token string
	}{
		{"an expired token", "erin", signed(t, key, claims(func(m map[string]any) {
			m["iat"], m["exp"] = now.Add(-2*time.Hour).Unix(), now.Add(-time.Hour).Unix()
		}))},
		{"a token signed by a key Hydra does not publish", "erin", signed(t, jose.JSONWebKey{Key: foreign, KeyID: key.KeyID, Algorithm: string(jose.RS256)}, claims(func(map[string]any) {}))},
		{"a token of another client (audience)", "erin", erin.IDToken(t, other)},
		{"a token of another issuer", "erin", signed(t, key, claims(func(m map[string]any) { m["iss"] = "https://idp.example" }))},
		{"erin's token under frank's name", "frank", erinTok},
		{"a token whose groups claim is not a list of names", "erin", signed(t, key, claims(func(m map[string]any) { m["groups"] = map[string]any{"admins": true} }))},
	}
	for _, b := range bad {
		for _, repo := range []string{"team/app", "team/missing"} {
			if s := status(r.pull(t, repo, &authn.Basic{Username: b.user, Password: b.token})); s != 401 {
				t.Errorf("%s pulls %s: status %d, want 401", b.what, repo, s)
			}
		}
		if s, _ := r.token(t, b.user, b.token, scopeQuery("repository:team/app:pull")); s != 401 {
			t.Errorf("token service, %s: status %d, want 401", b.what, s)
		}
	}
	// An access token (a JWT) of an accepted audience is a password too;
	// of an audience cairn does not accept, it is refused.
	cli := h.CreateClient(t, "http://127.0.0.1/callback", "cairn-cli", "elsewhere")
	at := erin.AccessToken(t, cli, "cairn-cli")
	if err := r.pull(t, "team/app", &authn.Basic{Username: "erin", Password: at}); err != nil {
		t.Errorf("erin pulls team/app with an access token for cairn-cli: %v", err)
	}
	at = erin.AccessToken(t, cli, "elsewhere")
	if s := status(r.pull(t, "team/app", &authn.Basic{Username: "erin", Password: at})); s != 401 {
		t.Errorf("erin's access token for another audience: status %d, want 401", s)
	}

	// cairn's own tokens name the user and hold what the groups give.
	s, tok := r.token(t, "dave", daveTok, scopeQuery("repository:team/app:pull,push", "repository:other/app:pull"))
	if s != 200 {
		t.Fatalf("token for dave: %d", s)
	}
	if resp := r.bearer(t, http.MethodGet, "/v2/team/app/manifests/v1", tok.Token); resp.Status != 200 {
		t.Errorf("dave's token on team/app: %v", resp)
	}
	if resp := r.bearer(t, http.MethodGet, "/v2/other/app/manifests/v1", tok.Token); resp.Status != 403 {
		t.Errorf("dave's token on other/app: %v, want 403", resp)
	}
	// docker login asks for a refresh token: an OIDC login gets none (its
	// user logs in again with a fresh token from the provider), and the
	// login itself still works.
	if s, off := r.token(t, "dave", daveTok, scopeQuery()+"&offline_token=true&client_id=docker"); s != 200 || off.RefreshToken != "" {
		t.Errorf("offline token for an OIDC user: %d, refresh token %q; want 200 and none", s, off.RefreshToken)
	}
}

// tokenKID is the kid of a JWT's header.
func tokenKID(t *testing.T, raw string) string {
	t.Helper()
	tok, err := jwt.ParseSigned(raw, []jose.SignatureAlgorithm{jose.RS256, jose.ES256})
	if err != nil || len(tok.Headers) == 0 {
		t.Fatalf("parsing a token: %v", err)
	}
	return tok.Headers[0].KeyID
}

// TestOIDCWebLogin: headless Chromium opens the web page, is sent to
// cairn's OIDC login, on to Hydra, to the login app (which accepts), back
// to Hydra and to cairn's callback, and the page shows the logged-in user
// (and a logout link) and the repositories the user's groups may pull, not
// the others; the login is audited. The same login with Go's client shows
// the session cookie: alone it is the visitor's identity on the page,
// tampered with (or garbage, or absent) it sends the browser to log in
// again, on the registry API it is no credential, and logout drops it.
func TestOIDCWebLogin(t *testing.T) {
	bin := clitool.Path(t, "chromium")
	h := hydratest.New(t)
	// Hydra must know the redirect URI, on cairn's address, before the
	// login; cairn reaches the provider only at the first login: so the
	// client is registered once cairn runs, with the ID and secret cairn
	// was configured with.
	id, secret := hydratest.NewClientID(), rand.Text()
	r := startOIDC(t, h, hydratest.Client{ID: id, Secret: secret}, "    weblogin: true\n", "ui:\n  enabled: true\n")
	created := h.CreateClientWith(t, id, secret, r.URL+"/auth/oidc/callback")

	frank := h.ServeLogin(t, hydratest.User{Name: "frank", Groups: []string{"admins"}})
	img := regtest.RandomImage(t, 1, 4<<10)
	if err := r.push(t, "team/app", img, &authn.Basic{Username: "frank", Password: frank.IDToken(t, created)}, nil); err != nil {
		t.Fatalf("frank pushes team/app: %v", err)
	}
	if err := r.push(t, "other/app", img, &authn.Basic{Username: "frank", Password: frank.IDToken(t, created)}, nil); err != nil {
		t.Fatalf("frank pushes other/app: %v", err)
	}

	erin := h.ServeLogin(t, hydratest.User{Name: "erin", Groups: []string{"readers"}})
	dom := browse(t, bin, erin, filepath.Join(t.ArtifactDir(), "oidc-erin.png"), r.URL+"/ui/")
	if !strings.Contains(dom, `id="user">erin<`) {
		t.Fatalf("the page after the OIDC login does not show erin logged in:\n%s", dom)
	}
	if !strings.Contains(dom, "team/app") || strings.Contains(dom, "other/app") {
		t.Errorf("erin (readers) should see team/app and not other/app:\n%s", dom)
	}
	if !strings.Contains(dom, `id="logout"`) {
		t.Errorf("the page has no logout link:\n%s", dom)
	}
	// The login is in the audit trail, as any login.
	if logs, ok := r.LogsWith("action=login user=erin robot=false source=oidc addr=127.0.0.1 via=web"); !ok {
		t.Errorf("no audit line of erin's web login:\n%s", logs)
	}

	// The same login with Go's client, to look at the cookie.
	jar, err := cookiejar.New(nil)
	if err != nil {
		t.Fatal(err)
	}
	web := &http.Client{Transport: erin.Transport(), Jar: jar, Timeout: 30 * time.Second}
	t.Cleanup(web.CloseIdleConnections)
	page := regtest.Do(t, web, http.MethodGet, r.URL+"/ui/repo/team/app", nil)
	if page.Status != 200 || !strings.Contains(string(page.Body), `id="user">erin<`) || page.Header.Get("Cache-Control") != "no-store" {
		t.Fatalf("the repository page after the login: %v\n%s", page, page.Body)
	}
	u, _ := url.Parse(r.URL)
	var session *http.Cookie
	for _, ck := range jar.Cookies(u) {
		if ck.Name == "cairn_session" {
			session = ck
		}
	}
	if session == nil {
		t.Fatalf("no session cookie after the login: %v", jar.Cookies(u))
	}
	noRedirect := &http.Client{Timeout: 30 * time.Second, CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	t.Cleanup(noRedirect.CloseIdleConnections)
	withCookie := func(value string) regtest.Response {
		req, err := http.NewRequestWithContext(t.Context(), http.MethodGet, r.URL+"/ui/", nil)
		if err != nil {
			t.Fatal(err)
		}
		req.AddCookie(&http.Cookie{Name: "cairn_session", Value: value})
		return regtest.Send(t, noRedirect, req)
	}
	if resp := withCookie(session.Value); resp.Status != 200 || !strings.Contains(string(resp.Body), `id="user">erin<`) {
		t.Errorf("the session cookie alone: %v", resp)
	}
	// One character changed, anywhere: refused, as no cookie at all is.
	b := []byte(session.Value)
	b[len(b)/2] ^= 1
	for what, v := range map[string]string{"a tampered session cookie": string(b), "no session": "", "garbage": "x.y.z"} {
		resp := withCookie(v)
		if resp.Status != http.StatusSeeOther || !strings.HasPrefix(resp.Header.Get("Location"), "/auth/oidc/login?") || strings.Contains(string(resp.Body), "team/app") {
			t.Errorf("/ui/ with %s: %v (Location %q), want 303 to the login", what, resp, resp.Header.Get("Location"))
		}
	}
	// A session cookie sent to the registry API is no credential.
	req, err := http.NewRequestWithContext(t.Context(), http.MethodGet, r.URL+"/v2/team/app/manifests/v1", nil)
	if err != nil {
		t.Fatal(err)
	}
	req.AddCookie(session)
	if resp := regtest.Send(t, noRedirect, req); resp.Status != 401 {
		t.Errorf("the API with a session cookie: %v, want 401", resp)
	}
	// Logout drops the cookie: the page sends the browser to log in.
	out := regtest.Do(t, web, http.MethodGet, r.URL+"/auth/oidc/logout", nil)
	if out.Status != 200 || !strings.Contains(string(out.Body), `id="logged-out"`) {
		t.Errorf("logout: %v", out)
	}
	for _, ck := range jar.Cookies(u) {
		if ck.Name == "cairn_session" {
			t.Errorf("the session cookie is still there after logout")
		}
	}
}

// browse opens url in headless Chromium whose LoginHost leads to login's
// app, and returns the DOM once loaded, redirects followed; with shot, it
// also saves a screenshot there (a login of its own).
func browse(t *testing.T, bin string, login *hydratest.Login, shot string, url string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute) // a hang guard
	defer cancel()
	args := func() []string {
		return []string{"--headless", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage", "--no-first-run",
			"--user-data-dir=" + t.TempDir(), "--window-size=1280,1000", "--host-resolver-rules=" + login.ResolverRule()}
	}
	if shot != "" {
		if out, err := exec.CommandContext(ctx, bin, append(args(), "--screenshot="+shot, url)...).CombinedOutput(); err != nil {
			t.Fatalf("chromium --screenshot: %v\n%s", err, out)
		}
	}
	out, err := exec.CommandContext(ctx, bin, append(args(), "--dump-dom", url)...).Output()
	if err != nil {
		t.Fatalf("chromium --dump-dom %s: %v", url, err)
	}
	return string(out)
}

// TestOIDCCannotShadowLocalUsers: beside htpasswd, a provider's user who
// bears a local user's name (alice, the admin) is not alice: their token is
// refused as alice's password (401), and their web login is refused (403,
// no session), while alice's own password still works.
func TestOIDCCannotShadowLocalUsers(t *testing.T) {
	h := hydratest.New(t)
	id, secret := hydratest.NewClientID(), rand.Text()
	r := start(t, fmt.Sprintf("  oidc:\n    issuer: %s\n    clientid: %s\n    clientsecret: %s\n    weblogin: true\n", h.Issuer, id, secret), "ui:\n  enabled: true\n")
	c := h.CreateClientWith(t, id, secret, r.URL+"/auth/oidc/callback")
	img := regtest.RandomImage(t, 1, 4<<10)
	if err := r.push(t, "other/app", img, &authn.Basic{Username: "alice", Password: "wonderland"}, nil); err != nil {
		t.Fatalf("alice pushes with her password: %v", err)
	}
	mallory := h.ServeLogin(t, hydratest.User{Name: "alice", Groups: []string{"admins"}})
	if s := status(r.pull(t, "other/app", &authn.Basic{Username: "alice", Password: mallory.IDToken(t, c)})); s != 401 {
		t.Errorf("a provider's alice pulls with her token as alice: status %d, want 401", s)
	}
	jar, err := cookiejar.New(nil)
	if err != nil {
		t.Fatal(err)
	}
	web := &http.Client{Transport: mallory.Transport(), Jar: jar, Timeout: 30 * time.Second}
	t.Cleanup(web.CloseIdleConnections)
	page := regtest.Do(t, web, http.MethodGet, r.URL+"/ui/", nil)
	u, _ := url.Parse(r.URL)
	for _, ck := range jar.Cookies(u) {
		if ck.Name == "cairn_session" {
			t.Errorf("a session cookie for the provider's alice")
		}
	}
	if page.Status != http.StatusForbidden || strings.Contains(string(page.Body), "other/app") {
		t.Errorf("the web login of the provider's alice: %v, want 403", page)
	}
}
