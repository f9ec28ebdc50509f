package auth

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-jose/go-jose/v4"
	"github.com/go-jose/go-jose/v4/jwt"
	"golang.org/x/crypto/bcrypt"
)

// fakeProvider is an OIDC provider for the unit tests: discovery, JWKS,
// and a token endpoint that checks the PKCE verifier against the
// challenge of the authorization request the test hands it.
type fakeProvider struct {
	srv *httptest.Server
	key *ecdsa.PrivateKey
	kid string

	mu        sync.Mutex
	challenge string         // the code_challenge of the authorization request
	claims    map[string]any // of the ID token the token endpoint issues
	verifier  string         // the code_verifier the token endpoint got
}

func newFakeProvider(t *testing.T) *fakeProvider {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	p := &fakeProvider{key: key, kid: "k1"}
	mux := http.NewServeMux()
	mux.HandleFunc("GET /.well-known/openid-configuration", func(w http.ResponseWriter, r *http.Request) {
		json.NewEncoder(w).Encode(map[string]any{
			"issuer": p.srv.URL, "authorization_endpoint": p.srv.URL + "/auth", "token_endpoint": p.srv.URL + "/token",
			"jwks_uri": p.srv.URL + "/jwks", "id_token_signing_alg_values_supported": []string{"ES256"},
		})
	})
	mux.HandleFunc("GET /jwks", func(w http.ResponseWriter, r *http.Request) {
		json.NewEncoder(w).Encode(jose.JSONWebKeySet{Keys: []jose.JSONWebKey{{Key: &key.PublicKey, KeyID: p.kid, Algorithm: "ES256", Use: "sig"}}})
	})
	mux.HandleFunc("POST /token", func(w http.ResponseWriter, r *http.Request) {
		p.mu.Lock()
		defer p.mu.Unlock()
		p.verifier = r.FormValue("code_verifier")
		sum := sha256.Sum256([]byte(p.verifier))
		if r.FormValue("code") != "the-code" || base64.RawURLEncoding.EncodeToString(sum[:]) != p.challenge {
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(http.StatusBadRequest)
			w.Write([]byte(`{"error":"invalid_grant"}`))
			return
		}
		w.Header().Set("Content-Type", "application/json")
		json.NewEncoder(w).Encode(map[string]any{"access_token": "opaque", "token_type": "Bearer", "id_token": p.sign(t, p.claims)})
	})
	p.srv = httptest.NewServer(mux)
	t.Cleanup(p.srv.Close)
	return p
}

func (p *fakeProvider) sign(t *testing.T, claims map[string]any) string {
	s, err := jose.NewSigner(jose.SigningKey{Algorithm: jose.ES256, Key: jose.JSONWebKey{Key: p.key, KeyID: p.kid}}, nil)
	if err != nil {
		t.Error(err)
		return ""
	}
	raw, err := jwt.Signed(s).Claims(claims).Serialize()
	if err != nil {
		t.Error(err)
	}
	return raw
}

// idClaims are the claims of an ID token for user of client "cairn".
func (p *fakeProvider) idClaims(user string, now time.Time, groups ...string) map[string]any {
	return map[string]any{"iss": p.srv.URL, "sub": "sub-" + user, "aud": "cairn", "preferred_username": user,
		"groups": groups, "iat": now.Unix(), "exp": now.Add(time.Hour).Unix()}
}

func newTestOIDC(t *testing.T, p *fakeProvider, now *time.Time) (*OIDC, *OIDCWeb) {
	t.Helper()
	o, err := NewOIDC(OIDCOptions{Issuer: p.srv.URL, ClientID: "cairn", ClientSecret: "s", Now: func() time.Time { return *now }})
	if err != nil {
		t.Fatal(err)
	}
	key := make([]byte, 32)
	rand.Read(key)
	// The accounts: alice is a local user; readers may pull team/**.
	hash, err := bcrypt.GenerateFromPassword([]byte("pw"), bcrypt.MinCost)
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "htpasswd")
	if err := os.WriteFile(path, []byte("alice:"+string(hash)+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	users, err := LoadHtpasswd("cairn", path)
	if err != nil {
		t.Fatal(err)
	}
	ac := &AccessControl{SourceGroups: true, Repositories: map[string]RepositoryPolicy{
		"team/**": {Policies: []Policy{{Groups: []string{"readers"}, Actions: []string{ActionPull}}}},
	}}
	policy, err := NewBasic("cairn", NewAccounts(users, nil, nil, o), ac, false)
	if err != nil {
		t.Fatal(err)
	}
	w, err := NewOIDCWeb(o, OIDCWebOptions{Key: key, Landing: "/ui/", RedirectURL: "https://registry.example/auth/oidc/callback", Policy: NewSwappable(policy)})
	if err != nil {
		t.Fatal(err)
	}
	return o, w
}

func TestOIDCSourceAuthenticate(t *testing.T) {
	p := newFakeProvider(t)
	now := time.Now()
	o, _ := newTestOIDC(t, p, &now)
	ctx := t.Context()
	good := p.sign(t, p.idClaims("erin", now, "readers", "builders"))
	groups, err := o.Authenticate(ctx, "erin", good)
	if err != nil || strings.Join(groups, ",") != "readers,builders" {
		t.Fatalf("erin's token: groups %q, %v", groups, err)
	}
	if _, err := o.Authenticate(ctx, "frank", good); err == nil || errors.Is(err, ErrUnknownUser) {
		t.Errorf("erin's token as frank: %v, want a refusal (not unknown user: the token is ours)", err)
	}
	for what, pass := range map[string]string{
		"a password":                "hunter2",
		"a token of another issuer": p.sign(t, func() map[string]any { c := p.idClaims("erin", now); c["iss"] = "https://other.example"; return c }()),
	} {
		if _, err := o.Authenticate(ctx, "erin", pass); !errors.Is(err, ErrUnknownUser) {
			t.Errorf("%s: %v, want ErrUnknownUser (the next source's to judge)", what, err)
		}
	}
	for what, mod := range map[string]func(map[string]any){
		"expired":          func(c map[string]any) { c["exp"] = now.Add(-time.Minute).Unix() },
		"other audience":   func(c map[string]any) { c["aud"] = "someone-else" },
		"no user name":     func(c map[string]any) { delete(c, "preferred_username") },
		"groups not names": func(c map[string]any) { c["groups"] = []any{"a", 3} },
	} {
		c := p.idClaims("erin", now)
		mod(c)
		if _, err := o.Authenticate(ctx, "erin", p.sign(t, c)); err == nil || errors.Is(err, ErrUnknownUser) {
			t.Errorf("%s: %v, want a refusal", what, err)
		}
	}
	// A valid token, its signature broken.
	if _, err := o.Authenticate(ctx, "erin", good[:len(good)-4]+"AAAA"); err == nil || errors.Is(err, ErrUnknownUser) {
		t.Errorf("a broken signature: %v, want a refusal", err)
	}
}

// login runs the web login's first step and returns the flow cookie and the
// authorization request's query.
func login(t *testing.T, w *OIDCWeb, next string) (*http.Cookie, url.Values) {
	t.Helper()
	rec := httptest.NewRecorder()
	w.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, LoginURL(next), nil))
	if rec.Code != http.StatusFound {
		t.Fatalf("login: %d %s", rec.Code, rec.Body)
	}
	loc, err := url.Parse(rec.Header().Get("Location"))
	if err != nil {
		t.Fatal(err)
	}
	q := loc.Query()
	for _, k := range []string{"state", "nonce", "code_challenge"} {
		if q.Get(k) == "" {
			t.Fatalf("the authorization request has no %s: %s", k, loc)
		}
	}
	if q.Get("code_challenge_method") != "S256" || q.Get("redirect_uri") != "https://registry.example/auth/oidc/callback" || !strings.Contains(q.Get("scope"), "openid") {
		t.Fatalf("authorization request %s", loc)
	}
	cookies := rec.Result().Cookies()
	if len(cookies) != 1 || cookies[0].Name != flowCookie || !cookies[0].HttpOnly || cookies[0].SameSite != http.SameSiteLaxMode || cookies[0].Path != OIDCPath+"/" {
		t.Fatalf("flow cookie: %+v", cookies)
	}
	return cookies[0], q
}

// callback sends the provider's redirect back with the flow cookie.
func callback(w *OIDCWeb, flow *http.Cookie, query string) *httptest.ResponseRecorder {
	req := httptest.NewRequest(http.MethodGet, OIDCPath+"/callback?"+query, nil)
	if flow != nil {
		req.AddCookie(flow)
	}
	rec := httptest.NewRecorder()
	w.ServeHTTP(rec, req)
	return rec
}

func sessionCookie(rec *httptest.ResponseRecorder) *http.Cookie {
	for _, c := range rec.Result().Cookies() {
		if c.Name == SessionCookie && c.MaxAge > 0 {
			return c
		}
	}
	return nil
}

func TestOIDCWebLoginFlow(t *testing.T) {
	p := newFakeProvider(t)
	now := time.Now()
	_, w := newTestOIDC(t, p, &now)
	flow, q := login(t, w, "/ui/repo/team/app")
	p.challenge = q.Get("code_challenge")
	p.claims = p.idClaims("erin", now, "readers")
	p.claims["nonce"] = q.Get("nonce")

	rec := callback(w, flow, url.Values{"code": {"the-code"}, "state": {q.Get("state")}}.Encode())
	if rec.Code != http.StatusSeeOther || rec.Header().Get("Location") != "/ui/repo/team/app" {
		t.Fatalf("callback: %d %s %s", rec.Code, rec.Header().Get("Location"), rec.Body)
	}
	if p.verifier == "" {
		t.Fatal("the token endpoint got no PKCE verifier")
	}
	sc := sessionCookie(rec)
	// Secure: the redirect URL is https (TLS at a proxy in front).
	if sc == nil || !sc.HttpOnly || sc.SameSite != http.SameSiteLaxMode || sc.Path != "/" || !sc.Secure {
		t.Fatalf("session cookie: %+v", sc)
	}
	req := httptest.NewRequest(http.MethodGet, "/ui/", nil)
	req.AddCookie(sc)
	id, ok := w.Session(req)
	if !ok || id.Name != "erin" || len(id.Groups) != 1 || id.Groups[0] != "readers" || id.Source != SourceOIDC {
		t.Fatalf("session: %+v %v", id, ok)
	}
	// The page authorizes the session under the accounts' policy.
	page := w.Authorizer(w.opts.Policy)
	g, err := page.Authorize(req, nil)
	if err != nil || g.Subject != "erin" || !g.Allows(Access{TypeRepository, "team/app", ActionPull}) || g.Allows(Access{TypeRepository, "other/app", ActionPull}) {
		t.Errorf("the session's grant: %+v, %v", g, err)
	}
	if _, err := page.Authorize(httptest.NewRequest(http.MethodGet, "/ui/", nil), nil); err == nil {
		t.Error("a request without the session was authorized")
	}

	// The session, tampered, under another purpose, or expired, is
	// refused.
	b, _ := base64.RawURLEncoding.DecodeString(sc.Value)
	b[len(b)-1] ^= 1
	for what, value := range map[string]string{
		"tampered":        base64.RawURLEncoding.EncodeToString(b),
		"the flow cookie": flow.Value,
		"empty":           "",
		"not base64":      "!!!",
	} {
		req := httptest.NewRequest(http.MethodGet, "/ui/", nil)
		req.AddCookie(&http.Cookie{Name: SessionCookie, Value: value})
		if id, ok := w.Session(req); ok {
			t.Errorf("%s session cookie: accepted as %+v", what, id)
		}
	}
	_, other := newTestOIDC(t, p, &now)
	if _, ok := other.Session(req); ok {
		t.Error("a session sealed with another registry's key was accepted")
	}
	now = now.Add(DefaultSessionLifetime + time.Second)
	if _, ok := w.Session(req); ok {
		t.Error("an expired session was accepted")
	}
}

func TestOIDCWebCallbackRefusals(t *testing.T) {
	p := newFakeProvider(t)
	now := time.Now()
	_, w := newTestOIDC(t, p, &now)
	for _, tc := range []struct {
		what   string
		mod    func(q url.Values, flow **http.Cookie, claims map[string]any)
		status int
	}{
		{"another state", func(q url.Values, _ **http.Cookie, _ map[string]any) { q.Set("state", "forged") }, http.StatusBadRequest},
		{"no flow cookie (a login started elsewhere)", func(_ url.Values, f **http.Cookie, _ map[string]any) { *f = nil }, http.StatusBadRequest},
		{"another nonce (a replayed ID token)", func(_ url.Values, _ **http.Cookie, c map[string]any) { c["nonce"] = "replayed" }, http.StatusUnauthorized},
		{"another code (the verifier does not match)", func(q url.Values, _ **http.Cookie, _ map[string]any) { q.Set("code", "stolen") }, http.StatusUnauthorized},
		{"an ID token of another client", func(_ url.Values, _ **http.Cookie, c map[string]any) { c["aud"] = "other" }, http.StatusUnauthorized},
		{"the provider's refusal", func(q url.Values, _ **http.Cookie, _ map[string]any) { q.Set("error", "access_denied") }, http.StatusUnauthorized},
		{"a local user's name (htpasswd)", func(_ url.Values, _ **http.Cookie, c map[string]any) { c["preferred_username"] = "alice" }, http.StatusForbidden},
		{"a robot's name", func(_ url.Values, _ **http.Cookie, c map[string]any) { c["preferred_username"] = "robot$ci" }, http.StatusForbidden},
	} {
		flow, q := login(t, w, "/ui/")
		p.challenge = q.Get("code_challenge")
		p.claims = p.idClaims("erin", now)
		p.claims["nonce"] = q.Get("nonce")
		cb := url.Values{"code": {"the-code"}, "state": {q.Get("state")}}
		tc.mod(cb, &flow, p.claims)
		rec := callback(w, flow, cb.Encode())
		if rec.Code != tc.status || sessionCookie(rec) != nil {
			t.Errorf("%s: %d (session cookie %v), want %d and none", tc.what, rec.Code, sessionCookie(rec) != nil, tc.status)
		}
	}
	// A flow is used once: its cookie is dropped by the callback.
	flow, _ := login(t, w, "/ui/")
	rec := callback(w, flow, url.Values{"state": {"x"}, "code": {"y"}}.Encode())
	if cs := rec.Result().Cookies(); len(cs) != 1 || cs[0].Name != flowCookie || cs[0].MaxAge >= 0 {
		t.Errorf("the flow cookie after a callback: %+v", cs)
	}
}

func TestOIDCLoginNextStaysLocal(t *testing.T) {
	for next, want := range map[string]string{
		"/ui/repo/a":           "/ui/repo/a",
		"//evil.example/x":     "/ui/",
		"/\\evil.example":      "/ui/",
		"https://evil.example": "/ui/",
		"":                     "/ui/",
		"/\t/evil.example":     "/ui/",
		"/ui/\nSet-Cookie: x":  "/ui/",
		"ui/":                  "/ui/",
	} {
		if got := localPath(next, "/ui/"); got != want {
			t.Errorf("localPath(%q) = %q, want %q", next, got, want)
		}
	}
}
