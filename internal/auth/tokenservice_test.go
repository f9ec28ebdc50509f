package auth

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"net/url"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/go-jose/go-jose/v4"
	"github.com/go-jose/go-jose/v4/jwt"
)

type ownService struct {
	*TokenService
	now   time.Time
	robot string // robot$ci's key: team/**:pull,push
	path  string // the robot file
}

func newOwnService(t *testing.T) *ownService {
	t.Helper()
	acc, _, path := testAccounts(t, nil)
	key, created, err := LoadSigningKey(filepath.Join(t.TempDir(), "key.pem"), true)
	if err != nil || !created {
		t.Fatalf("LoadSigningKey: %v, created %v", err, created)
	}
	ts := &ownService{now: time.Now(), path: path}
	ts.robot = addRobot(t, path, "ci", time.Time{}, "team/**:pull,push")
	s, err := NewTokenService(TokenServiceOptions{
		Service: "reg", Issuer: "cairn", Expiration: 5 * time.Minute, RefreshExpiration: time.Hour,
		Key: key, Accounts: acc,
		AccessControl: &AccessControl{
			Repositories: map[string]RepositoryPolicy{"team/**": {Policies: []Policy{{Users: []string{"bob"}, Actions: []string{"pull"}}}}},
			Admin:        Policy{Users: []string{"alice"}, Actions: []string{"*"}},
		},
		Now: func() time.Time { return ts.now },
	})
	if err != nil {
		t.Fatal(err)
	}
	ts.TokenService = s
	return ts
}

type tokenReply struct {
	status int
	tokenResponse
}

func (ts *ownService) get(t *testing.T, user, pass string, query string) tokenReply {
	t.Helper()
	r := httptest.NewRequestWithContext(t.Context(), http.MethodGet, TokenPath+"?"+query, nil)
	if user != "" {
		r.SetBasicAuth(user, pass)
	}
	return ts.serve(t, r)
}

func (ts *ownService) post(t *testing.T, form url.Values) tokenReply {
	t.Helper()
	r := httptest.NewRequestWithContext(t.Context(), http.MethodPost, TokenPath, strings.NewReader(form.Encode()))
	r.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	return ts.serve(t, r)
}

func (ts *ownService) serve(t *testing.T, r *http.Request) tokenReply {
	t.Helper()
	w := httptest.NewRecorder()
	ts.ServeHTTP(w, r)
	out := tokenReply{status: w.Code}
	if w.Code == http.StatusOK {
		if err := json.Unmarshal(w.Body.Bytes(), &out.tokenResponse); err != nil {
			t.Fatalf("token response %s: %v", w.Body, err)
		}
	}
	return out
}

// use authorizes need with the Bearer token raw and returns the status (0
// allowed).
func (ts *ownService) use(t *testing.T, raw string, need ...Access) int {
	t.Helper()
	r := httptest.NewRequestWithContext(t.Context(), http.MethodGet, "/v2/", nil)
	r.Header.Set("Authorization", "Bearer "+raw)
	_, err := ts.Authorize(r, need)
	var ch *Challenge
	if errors.As(err, &ch) {
		return ch.Status()
	}
	if err != nil {
		t.Fatal(err)
	}
	return 0
}

func pull(repo string) Access { return Access{Type: TypeRepository, Name: repo, Action: ActionPull} }
func push(repo string) Access { return Access{Type: TypeRepository, Name: repo, Action: ActionPush} }

// claimsOf decodes a token's claims without verifying it.
func claimsOf(t *testing.T, raw string) issuedClaims {
	t.Helper()
	tok, err := jwt.ParseSigned(raw, []jose.SignatureAlgorithm{jose.ES256})
	if err != nil {
		t.Fatal(err)
	}
	var c issuedClaims
	if err := tok.UnsafeClaimsWithoutVerification(&c); err != nil {
		t.Fatal(err)
	}
	return c
}

func TestTokenServiceGrantsTheIntersection(t *testing.T) {
	ts := newOwnService(t)
	q := "service=reg&scope=repository:team/app:pull,push,delete&scope=repository:other/app:pull"
	bob := ts.get(t, "bob", "builder", q)
	if bob.status != 200 {
		t.Fatalf("bob: %d", bob.status)
	}
	c := claimsOf(t, bob.Token)
	if len(c.Access) != 1 || c.Access[0].Name != "team/app" || !slices.Equal(c.Access[0].Actions, []string{"pull"}) {
		t.Errorf("bob's access %+v, want team/app pull only", c.Access)
	}
	if c.Subject != "bob" || bob.AccessToken != bob.Token || bob.ExpiresIn != 300 {
		t.Errorf("bob's reply %+v", bob)
	}
	// The token works for what it names, and only there: a token for
	// team/app is no use on team/other, nor for a push.
	if s := ts.use(t, bob.Token, pull("team/app")); s != 0 {
		t.Errorf("pull with bob's token: %d", s)
	}
	if s := ts.use(t, bob.Token, push("team/app")); s != 403 {
		t.Errorf("push with bob's pull token: %d, want 403", s)
	}
	if s := ts.use(t, bob.Token, pull("team/other")); s != 403 {
		t.Errorf("bob's team/app token on team/other: %d, want 403", s)
	}
	// A "*" yields what is allowed of it; the catalog only to admins.
	alice := ts.get(t, "alice", "wonderland", "service=reg&scope=repository:x/y:*&scope=registry:catalog:*")
	ac := claimsOf(t, alice.Token)
	if len(ac.Access) != 2 || !slices.Equal(ac.Access[0].Actions, []string{"*"}) || ac.Access[1].Type != TypeRegistry {
		t.Errorf("alice's access %+v", ac.Access)
	}
	bobStar := claimsOf(t, ts.get(t, "bob", "builder", "scope=repository:team/x:*").Token)
	if len(bobStar.Access) != 1 || !slices.Equal(bobStar.Access[0].Actions, []string{"pull"}) {
		t.Errorf("bob asking * got %+v, want pull", bobStar.Access)
	}
	// Wrong credentials, unknown users: 401 alike. Another service: 400.
	for _, up := range [][2]string{{"bob", "nope"}, {"mallory", "builder"}, {"robot$ci", "cairn_rk_nope"}, {"robot$nobody", ts.robot}} {
		if r := ts.get(t, up[0], up[1], q); r.status != 401 {
			t.Errorf("%s:%s: %d, want 401", up[0], up[1], r.status)
		}
	}
	if r := ts.get(t, "bob", "builder", "service=elsewhere"); r.status != 400 {
		t.Errorf("another service: %d, want 400", r.status)
	}
	// Without credentials: an anonymous token with what anyone may do
	// (nothing here), and it asks the client to log in (401, not 403).
	anon := ts.get(t, "", "", q)
	if anon.status != 200 || len(claimsOf(t, anon.Token).Access) != 0 {
		t.Fatalf("anonymous: %+v", anon)
	}
	if s := ts.use(t, anon.Token, pull("team/app")); s != 401 {
		t.Errorf("anonymous token lacking pull: %d, want 401", s)
	}
}

func TestTokenServiceRefusesForeignAndExpiredTokens(t *testing.T) {
	ts := newOwnService(t)
	good := ts.get(t, "alice", "wonderland", "scope=repository:a/b:pull").Token
	if s := ts.use(t, good, pull("a/b")); s != 0 {
		t.Fatalf("good token: %d", s)
	}
	// The same claims signed by another key.
	other, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	c := claimsOf(t, good)
	for _, kid := range []string{ts.kid, keyIDs(other.Public())[0]} {
		s, err := jose.NewSigner(jose.SigningKey{Algorithm: jose.ES256, Key: other}, (&jose.SignerOptions{}).WithType("JWT").WithHeader("kid", kid))
		if err != nil {
			t.Fatal(err)
		}
		forged, err := jwt.Signed(s).Claims(c).Serialize()
		if err != nil {
			t.Fatal(err)
		}
		if st := ts.use(t, forged, pull("a/b")); st != 401 {
			t.Errorf("token signed by another key (kid %s): %d, want 401", kid, st)
		}
	}
	// Past its expiry and the leeway.
	ts.now = ts.now.Add(5*time.Minute + tokenLeeway + time.Second)
	if st := ts.use(t, good, pull("a/b")); st != 401 {
		t.Errorf("expired token: %d, want 401", st)
	}
	// A refresh token is not an access token.
	ts.now = time.Now()
	r := ts.get(t, "alice", "wonderland", "scope=repository:a/b:pull&offline_token=true&client_id=test")
	if r.RefreshToken == "" {
		t.Fatal("no refresh token with offline_token=true")
	}
	if st := ts.use(t, r.RefreshToken, pull("a/b")); st != 401 {
		t.Errorf("refresh token used as an access token: %d, want 401", st)
	}
}

func TestTokenServiceOAuthAndRefresh(t *testing.T) {
	ts := newOwnService(t)
	r := ts.post(t, url.Values{"grant_type": {"password"}, "username": {"bob"}, "password": {"builder"},
		"service": {"reg"}, "client_id": {"test"}, "access_type": {"offline"}, "scope": {"repository:team/app:pull,push"}})
	if r.status != 200 || r.AccessToken == "" || r.RefreshToken == "" || r.Scope != "repository:team/app:pull" {
		t.Fatalf("password grant: %+v", r)
	}
	if r := ts.post(t, url.Values{"grant_type": {"password"}, "username": {"bob"}, "password": {"nope"}, "service": {"reg"}}); r.status != 401 {
		t.Errorf("password grant, wrong password: %d", r.status)
	}
	rr := ts.post(t, url.Values{"grant_type": {"refresh_token"}, "refresh_token": {r.RefreshToken}, "service": {"reg"}, "scope": {"repository:team/x:pull"}})
	if rr.status != 200 || claimsOf(t, rr.AccessToken).Subject != "bob" {
		t.Fatalf("refresh grant: %+v", rr)
	}
	// An access token is not a refresh token.
	if r := ts.post(t, url.Values{"grant_type": {"refresh_token"}, "refresh_token": {r.AccessToken}, "service": {"reg"}}); r.status != 401 {
		t.Errorf("access token as a refresh token: %d, want 401", r.status)
	}
	// A new password ends the refresh tokens of the old one.
	ts.opts.Accounts.users.users["bob"] = hashAt(t, "new", 4)
	if r := ts.post(t, url.Values{"grant_type": {"refresh_token"}, "refresh_token": {r.RefreshToken}, "service": {"reg"}}); r.status != 401 {
		t.Errorf("refresh after a password change: %d, want 401", r.status)
	}
}

func TestTokenServiceRobotKeys(t *testing.T) {
	ts := newOwnService(t)
	r := ts.get(t, "robot$ci", ts.robot, "scope=repository:team/app:pull,push,delete&offline_token=true")
	if r.status != 200 {
		t.Fatalf("robot: %d", r.status)
	}
	c := claimsOf(t, r.Token)
	if c.Subject != "robot$ci" || c.Robot == "" || len(c.Access) != 1 || !slices.Equal(c.Access[0].Actions, []string{"pull", "push"}) {
		t.Errorf("robot token claims %+v", c)
	}
	if s := ts.use(t, r.Token, push("team/app")); s != 0 {
		t.Errorf("robot push: %d", s)
	}
	// Basic with the key works on the registry directly too.
	b := httptest.NewRequestWithContext(t.Context(), http.MethodGet, "/v2/", nil)
	b.SetBasicAuth("robot$ci", ts.robot)
	if _, err := ts.Authorize(b, []Access{pull("team/app")}); err != nil {
		t.Errorf("robot Basic: %v", err)
	}
	// Revoked: its token (cached as verified), its refresh token and its
	// key stop working on the next request.
	revoke(t, ts.path, "ci")
	if s := ts.use(t, r.Token, push("team/app")); s != 401 {
		t.Errorf("token of a revoked key: %d, want 401", s)
	}
	if rr := ts.post(t, url.Values{"grant_type": {"refresh_token"}, "refresh_token": {r.RefreshToken}}); rr.status != 401 {
		t.Errorf("refresh token of a revoked key: %d, want 401", rr.status)
	}
	if _, err := ts.Authorize(b, []Access{pull("team/app")}); err == nil {
		t.Error("revoked key on Basic still works")
	}
	// A token never outlives its key.
	ts.now = time.Now()
	short := addRobot(t, ts.path, "short", ts.now.Add(time.Minute), "team/**:pull")
	sr := ts.get(t, "robot$short", short, "scope=repository:team/a:pull")
	if exp := claimsOf(t, sr.Token).Expiry.Time(); sr.status != 200 || exp.After(ts.now.Add(time.Minute)) {
		t.Errorf("token of a key expiring in a minute: %d, expires %v", sr.status, exp)
	}
}

func TestParseScopes(t *testing.T) {
	got, err := ParseScopes([]string{"repository:a/b:pull,push registry:catalog:*", "repository(plugin):p:pull", "repository:localhost:5000/x:pull"})
	if err != nil {
		t.Fatal(err)
	}
	want := []Access{
		{TypeRepository, "a/b", "pull"}, {TypeRepository, "a/b", "push"}, {TypeRegistry, "catalog", "*"},
		{TypeRepository, "p", "pull"}, {TypeRepository, "localhost:5000/x", "pull"},
	}
	if !slices.Equal(got, want) {
		t.Errorf("got %v, want %v", got, want)
	}
	for _, bad := range []string{"repository", "repository:x", "::pull"} {
		if _, err := ParseScopes([]string{bad}); err == nil {
			t.Errorf("%q parsed", bad)
		}
	}
	if _, err := ParseScopes([]string{strings.Repeat("repository:a:pull ", maxScopes+1)}); err == nil {
		t.Error("no bound on scopes")
	}
}

func TestLoadSigningKeyKeepsTheFirst(t *testing.T) {
	path := filepath.Join(t.TempDir(), "k", "key.pem")
	a, created, err := LoadSigningKey(path, true)
	if err != nil || !created {
		t.Fatal(err, created)
	}
	b, created, err := LoadSigningKey(path, true)
	if err != nil || created {
		t.Fatal(err, created)
	}
	if !a.Public().(*ecdsa.PublicKey).Equal(b.Public()) {
		t.Error("a second load made another key")
	}
	if _, _, err := LoadSigningKey(filepath.Join(t.TempDir(), "none.pem"), false); err == nil {
		t.Error("a missing configured key loaded")
	}
}

// TestTokenServiceChallenges: the registry's refusals challenge Bearer
// with the realm on the request's host; the web page's (PreferBasic)
// challenge Basic, since browsers prompt only for that.
func TestTokenServiceChallenges(t *testing.T) {
	ts := newOwnService(t)
	r := httptest.NewRequestWithContext(t.Context(), http.MethodGet, "http://reg.example:5000/v2/team/app/tags/list", nil)
	_, err := ts.Authorize(r, []Access{pull("team/app")})
	var ch *Challenge
	want := `Bearer realm="http://reg.example:5000/auth/token",service="reg",scope="repository:team/app:pull"`
	if !errors.As(err, &ch) || ch.Status() != 401 || ch.Header() != want {
		t.Errorf("registry refusal: %v %q, want 401 %s", err, ch.Header(), want)
	}
	r = r.WithContext(PreferBasic(r.Context()))
	_, err = ts.Authorize(r, nil)
	if !errors.As(err, &ch) || ch.Status() != 401 || !strings.HasPrefix(ch.Header(), "Basic realm=") {
		t.Errorf("web page refusal: %v %q, want a Basic challenge", err, ch.Header())
	}
}
