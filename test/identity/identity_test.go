package identity

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/go-jose/go-jose/v4"
	"github.com/go-jose/go-jose/v4/jwt"
	"github.com/google/go-containerregistry/pkg/authn"

	"github.com/cairn-registry/cairn/internal/notify"
	"github.com/cairn-registry/cairn/internal/testutil/clitool"
	"github.com/cairn-registry/cairn/internal/testutil/hydratest"
	"github.com/cairn-registry/cairn/internal/testutil/regtest"
	"github.com/cairn-registry/cairn/internal/testutil/testenv"
	"github.com/cairn-registry/cairn/internal/testutil/tokentest"
)

// TestUsersLogInWithTokens: go-containerregistry, challenged with Bearer,
// gets its tokens from cairn's /auth/token as htpasswd users, and the
// access-control policy decides: carol pushes, bob pulls but may not
// push (403), a wrong password or an unknown user is 401; bob is refused
// alike for a repository that exists and one that does not.
func TestUsersLogInWithTokens(t *testing.T) {
	t.Parallel()
	r := start(t, "")
	ch := regtest.Do(t, r.hc, http.MethodGet, r.URL+"/v2/", nil)
	want := `Bearer realm="` + r.URL + `/auth/token",service="` + service + `"`
	if ch.Status != 401 || ch.Header.Get("WWW-Authenticate") != want {
		t.Fatalf("GET /v2/ without credentials: %v, want 401 with %s", ch, want)
	}

	img := regtest.RandomImage(t, 2, 16<<10)
	rt := newSchemes()
	carol := &authn.Basic{Username: "carol", Password: "singer"}
	if err := r.push(t, "team/app", img, carol, rt); err != nil {
		t.Fatalf("carol pushes team/app: %v", err)
	}
	if rt.seen["Bearer"] == 0 || rt.seen["Basic"] != 0 {
		t.Errorf("Authorization schemes sent to /v2/: %v, want Bearer only", rt.seen)
	}
	alice := &authn.Basic{Username: "alice", Password: "wonderland"}
	if err := r.push(t, "other/app", img, alice, nil); err != nil {
		t.Fatalf("alice (admin) pushes other/app: %v", err)
	}
	r.checkReader(t, "bob", &authn.Basic{Username: "bob", Password: "builder"})
	for _, a := range []*authn.Basic{{Username: "bob", Password: "nope"}, {Username: "mallory", Password: "builder"}} {
		if s := status(r.pull(t, "team/app", a)); s != 401 {
			t.Errorf("%s with a bad password pulls: status %d, want 401", a.Username, s)
		}
	}
	// The same statuses on raw HTTP with the tokens themselves.
	_, tok := r.token(t, "bob", "builder", scopeQuery("repository:other/app:pull", "repository:other/missing:pull"))
	for _, repo := range []string{"other/app", "other/missing"} {
		if resp := r.bearer(t, http.MethodGet, "/v2/"+repo+"/manifests/v1", tok.Token); resp.Status != 403 || resp.ErrorCode() != "DENIED" {
			t.Errorf("bob's token on %s: %v, want 403 DENIED", repo, resp)
		}
	}
	if s, _ := r.token(t, "mallory", "builder", scopeQuery("repository:team/app:pull")); s != 401 {
		t.Errorf("token for an unknown user: %d, want 401", s)
	}
	// Basic straight to the registry is served under the same policy.
	if resp := r.basic(t, http.MethodGet, "/v2/team/app/manifests/v1", "bob", "builder"); resp.Status != 200 {
		t.Errorf("bob with Basic on team/app: %v", resp)
	}
	if resp := r.basic(t, http.MethodGet, "/v2/other/app/manifests/v1", "bob", "builder"); resp.Status != 403 {
		t.Errorf("bob with Basic on other/app: %v, want 403", resp)
	}
	// A refresh token (docker login asks offline_token=true) logs
	// go-containerregistry in through the OAuth2 refresh grant.
	s, off := r.token(t, "bob", "builder", scopeQuery()+"&offline_token=true&client_id=test")
	if s != 200 || off.RefreshToken == "" {
		t.Fatalf("offline token: %d %+v", s, off)
	}
	refresh := authn.FromConfig(authn.AuthConfig{IdentityToken: off.RefreshToken})
	if err := r.pull(t, "team/app", refresh); err != nil {
		t.Errorf("pull with bob's refresh token: %v", err)
	}
	if s := status(r.pull(t, "other/app", refresh)); s != 403 {
		t.Errorf("pull of other/app with bob's refresh token: %d, want 403", s)
	}
}

// TestTokenIsBoundToItsRepository: a token for team/a cannot be used on
// team/b, nor for more than its actions, though its holder may pull both.
func TestTokenIsBoundToItsRepository(t *testing.T) {
	t.Parallel()
	r := start(t, "")
	img := regtest.RandomImage(t, 1, 4<<10)
	alice := &authn.Basic{Username: "alice", Password: "wonderland"}
	for _, repo := range []string{"team/a", "team/b"} {
		if err := r.push(t, repo, img, alice, nil); err != nil {
			t.Fatal(err)
		}
	}
	s, tok := r.token(t, "carol", "singer", scopeQuery("repository:team/a:pull"))
	if s != 200 {
		t.Fatalf("token: %d", s)
	}
	if resp := r.bearer(t, http.MethodGet, "/v2/team/a/manifests/v1", tok.Token); resp.Status != 200 {
		t.Errorf("token for team/a on team/a: %v", resp)
	}
	if resp := r.bearer(t, http.MethodGet, "/v2/team/b/manifests/v1", tok.Token); resp.Status != 403 ||
		!strings.Contains(resp.Header.Get("WWW-Authenticate"), `scope="repository:team/b:pull"`) {
		t.Errorf("token for team/a on team/b: %v, want 403 asking for team/b's scope", resp)
	}
	if resp := r.bearer(t, http.MethodPost, "/v2/team/a/blobs/uploads/", tok.Token); resp.Status != 403 {
		t.Errorf("pull token for a push: %v, want 403", resp)
	}
}

// TestForeignAndExpiredTokens: a token is accepted only signed by cairn's
// own key and unexpired. The positive control signs with cairn's key (read
// from the root, where it was made at first start) to show the minting is
// right; the same claims expired, or signed by another key (under cairn's
// kid or its own), are 401.
func TestForeignAndExpiredTokens(t *testing.T) {
	t.Parallel()
	r := start(t, "")
	img := regtest.RandomImage(t, 1, 4<<10)
	if err := r.push(t, "team/app", img, &authn.Basic{Username: "alice", Password: "wonderland"}, nil); err != nil {
		t.Fatal(err)
	}
	key := r.signingKey(t)
	other, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	mint := func(signer any, keyID string, exp time.Time) string {
		now := time.Now()
		c := tokentest.Claims{
			Claims: jwt.Claims{Issuer: "cairn", Subject: "alice", Audience: jwt.Audience{service},
				Expiry: jwt.NewNumericDate(exp), NotBefore: jwt.NewNumericDate(now.Add(-time.Hour)), IssuedAt: jwt.NewNumericDate(now.Add(-time.Hour))},
			Access: []tokentest.Access{{Type: "repository", Name: "team/app", Actions: []string{"pull"}}},
		}
		raw, err := tokentest.Sign(jose.ES256, signer, c, map[jose.HeaderKey]any{"kid": keyID})
		if err != nil {
			t.Fatal(err)
		}
		return raw
	}
	ours := kid(t, key.Public())
	for _, c := range []struct {
		what  string
		token string
		want  int
	}{
		{"cairn's key, valid", mint(key, ours, time.Now().Add(time.Minute)), 200},
		{"cairn's key, expired 2 minutes ago (past the leeway)", mint(key, ours, time.Now().Add(-2*time.Minute)), 401},
		{"another key under cairn's kid", mint(other, ours, time.Now().Add(time.Minute)), 401},
		{"another key under its own kid", mint(other, kid(t, other.Public()), time.Now().Add(time.Minute)), 401},
	} {
		resp := r.bearer(t, http.MethodGet, "/v2/team/app/manifests/v1", c.token)
		if resp.Status != c.want {
			t.Errorf("%s: %v, want %d", c.what, resp, c.want)
		}
		if c.want == 401 && !strings.Contains(resp.Header.Get("WWW-Authenticate"), `error="invalid_token"`) {
			t.Errorf("%s: challenge %q, want invalid_token", c.what, resp.Header.Get("WWW-Authenticate"))
		}
	}
}

// TestRobotKeys: a key made with `cairn robot create` logs
// go-containerregistry in through the token service and works as a
// Basic password too, within its scopes (403 outside them, alike for
// repositories that exist and those that do not); `cairn robot revoke`
// ends the key, its tokens and its refresh tokens on the next request,
// with no reload.
func TestRobotKeys(t *testing.T) {
	t.Parallel()
	r := start(t, "")
	key := r.createRobot(t, "ci", "team/**:pull,push")
	if out := r.cairn(t, "robot", "list"); !strings.Contains(out, "robot$ci") || !strings.Contains(out, "team/**:pull,push") || strings.Contains(out, key) {
		t.Errorf("cairn robot list:\n%s", out)
	}
	robot := &authn.Basic{Username: "robot$ci", Password: key}
	img := regtest.RandomImage(t, 1, 8<<10)
	rt := newSchemes()
	if err := r.push(t, "team/robot", img, robot, rt); err != nil {
		t.Fatalf("robot pushes team/robot: %v", err)
	}
	if rt.seen["Bearer"] == 0 || rt.seen["Basic"] != 0 {
		t.Errorf("Authorization schemes sent to /v2/: %v, want Bearer only", rt.seen)
	}
	if err := r.push(t, "other/app", img, &authn.Basic{Username: "alice", Password: "wonderland"}, nil); err != nil {
		t.Fatal(err)
	}
	for _, repo := range []string{"other/app", "other/missing"} {
		if s := status(r.pull(t, repo, robot)); s != 403 {
			t.Errorf("robot pulls %s: %d, want 403", repo, s)
		}
	}
	if s := status(r.pull(t, "team/robot", &authn.Basic{Username: "robot$ci", Password: key + "x"})); s != 401 {
		t.Errorf("robot with a wrong key: %d, want 401", s)
	}
	if s := status(r.pull(t, "team/robot", &authn.Basic{Username: "robot$nobody", Password: key})); s != 401 {
		t.Errorf("unknown robot: %d, want 401", s)
	}
	if resp := r.basic(t, http.MethodGet, "/v2/team/robot/manifests/v1", "robot$ci", key); resp.Status != 200 {
		t.Errorf("robot key as a Basic password: %v", resp)
	}
	s, tok := r.token(t, "robot$ci", key, scopeQuery("repository:team/robot:pull")+"&offline_token=true")
	if s != 200 {
		t.Fatalf("robot token: %d", s)
	}
	if resp := r.bearer(t, http.MethodGet, "/v2/team/robot/manifests/v1", tok.Token); resp.Status != 200 {
		t.Fatalf("robot token before the revocation: %v", resp)
	}

	r.cairn(t, "robot", "revoke", "ci")
	// Not a poll: the very next request is refused.
	if resp := r.bearer(t, http.MethodGet, "/v2/team/robot/manifests/v1", tok.Token); resp.Status != 401 {
		t.Errorf("token of a revoked key: %v, want 401", resp)
	}
	if resp := r.basic(t, http.MethodGet, "/v2/team/robot/manifests/v1", "robot$ci", key); resp.Status != 401 {
		t.Errorf("revoked key as a Basic password: %v, want 401", resp)
	}
	if s := status(r.pull(t, "team/robot", robot)); s != 401 {
		t.Errorf("go-containerregistry with a revoked key: %d, want 401", s)
	}
	if s := status(r.pull(t, "team/robot", authn.FromConfig(authn.AuthConfig{IdentityToken: tok.RefreshToken}))); s != 401 {
		t.Errorf("refresh token of a revoked key: %d, want 401", s)
	}
	// The same name again is a new key; the old one stays dead.
	again := r.createRobot(t, "ci", "team/**:pull")
	if resp := r.bearer(t, http.MethodGet, "/v2/team/robot/manifests/v1", tok.Token); resp.Status != 401 {
		t.Errorf("old token once the name is reused: %v, want 401", resp)
	}
	if err := r.pull(t, "team/robot", &authn.Basic{Username: "robot$ci", Password: again}); err != nil {
		t.Errorf("re-created key: %v", err)
	}
	logs := r.Logs()
	for _, want := range []string{"action=login ", "action=login.failed", "user=robot$ci"} {
		if !strings.Contains(logs, want) {
			t.Errorf("no audit line with %q in the log", want)
		}
	}
}

// TestFailedLoginsLimited counts responses: with a burst of 5 and a refill
// too slow to matter, an address's first 5 failed logins are 401, the
// next attempts 429 even with the right password (on the token endpoint
// and with Basic on the registry), and nothing was granted meanwhile.
func TestFailedLoginsLimited(t *testing.T) {
	t.Parallel()
	r := start(t, "  failedlogins:\n    burst: 5\n    perminute: 0.001\n")
	q := scopeQuery("repository:team/app:pull")
	for i := range 3 {
		if s, _ := r.token(t, "bob", "builder", q); s != 200 {
			t.Fatalf("right password %d: %d", i, s)
		}
	}
	var got []int
	for range 5 {
		s, _ := r.token(t, "bob", "nope", q)
		got = append(got, s)
	}
	s, _ := r.token(t, "bob", "nope", q)
	got = append(got, s)
	s, _ = r.token(t, "bob", "builder", q)
	got = append(got, s)
	got = append(got, r.basic(t, http.MethodGet, "/v2/", "bob", "builder").Status)
	want := []int{401, 401, 401, 401, 401, 429, 429, 429}
	for i := range want {
		if got[i] != want[i] {
			t.Fatalf("statuses %v, want %v", got, want)
		}
	}
	if !strings.Contains(r.Logs(), "action=login.held") {
		t.Error("no audit line for the held-back address")
	}
}

// TestUnknownNamesCostTheSame: a refusal takes as long for an unknown
// user as for a known user's wrong password, on the token endpoint (bcrypt
// at the file's cost 5 against the dummy hash), and for an unknown robot as
// for a known robot's wrong key. Measured as test/auth measures htpasswd:
// the fastest of alternating samples on one connection, a factor of 4
// either way. Not parallel: the package's other tests wait while it
// measures.
func TestUnknownNamesCostTheSame(t *testing.T) {
	r := start(t, "")
	key := r.createRobot(t, "ci", "team/**:pull")
	q := scopeQuery("repository:team/app:pull")
	refusal := func(user, pass string) time.Duration { return r.refusalTime(t, q, user, pass) }
	refusal("alice", "warm-up")
	for _, c := range []struct{ what, unknown, known, pass string }{
		{"users", "mallory", "alice", "looking-glass"},
		{"robots", "robot$nobody", "robot$ci", key + "x"},
	} {
		regtest.CheckSameCost(t, c.what, 7,
			func() time.Duration { return refusal(c.unknown, c.pass) },
			func() time.Duration { return refusal(c.known, c.pass) })
	}
}

// TestAuditEventsNotified: logins, failed logins and the creation and
// revocation of robot keys reach a notification endpoint as events
// (the CLI's through the spool the serving process drains).
func TestAuditEventsNotified(t *testing.T) {
	t.Parallel()
	hook := newEventHook(t)
	r := start(t, "  audit:\n    events: true\n", "notifications:\n  endpoints:\n    - name: audit\n      url: "+hook.URL+"/hook\n")
	key := r.createRobot(t, "ci", "team/**:pull")
	if s, _ := r.token(t, "robot$ci", key, scopeQuery("repository:team/app:pull")); s != 200 {
		t.Fatalf("robot token: %d", s)
	}
	if s, _ := r.token(t, "mallory", "x", scopeQuery()); s != 401 {
		t.Fatalf("mallory: %d", s)
	}
	r.cairn(t, "robot", "revoke", "ci")
	hook.waitFor(t, []actionBy{
		{"robot.create", "robot$ci"}, {"login", "robot$ci"}, {"login.failed", "mallory"}, {"robot.revoke", "robot$ci"},
	})
	for _, e := range hook.received() {
		if e.Action == "login.failed" && e.Request.Addr != "127.0.0.1" {
			t.Errorf("failed login event from %q, want the source address", e.Request.Addr)
		}
	}
	// The login events name the identity source, as the audit line does.
	if s, _ := r.token(t, "bob", "builder", scopeQuery("repository:team/app:pull")); s != 200 {
		t.Fatalf("bob's token: %d", s)
	}
	hook.waitFor(t, []actionBy{{"login", "bob"}})
	wantLogin(t, hook, "login", "robot$ci", notify.Login{Source: "robot", Via: "token", Robot: true})
	wantLogin(t, hook, "login", "bob", notify.Login{Source: "htpasswd", Via: "token"})
	wantLogin(t, hook, "login.failed", "mallory", notify.Login{Source: "htpasswd", Via: "token"})
}

// TestLDAPAuditEventsNotified: a directory user's login event names ldap
// as its identity source (cairn.login.source), not only the audit line.
func TestLDAPAuditEventsNotified(t *testing.T) {
	t.Parallel()
	srv := testenv.LDAPServer(t)
	hook := newEventHook(t)
	r := startLDAP(t, ldapSection(t, srv, ldapStartTLS), false,
		"  audit:\n    events: true\nnotifications:\n  endpoints:\n    - name: audit\n      url: "+hook.URL+"/hook\n")
	if s, _ := r.token(t, "bob", "bob-secret", scopeQuery("repository:team/app:pull")); s != 200 {
		t.Fatalf("bob's token: %d", s)
	}
	hook.waitFor(t, []actionBy{{"login", "bob"}})
	wantLogin(t, hook, "login", "bob", notify.Login{Source: "ldap", Via: "token"})
	if logs, ok := r.LogsWith("action=login user=bob robot=false source=ldap"); !ok {
		t.Errorf("no audit line of bob's login with source=ldap:\n%s", logs)
	}
}

// TestOIDCAuditEventsNotified: a login with an ID token as the password
// is an event naming oidc as its identity source (cairn.login.source).
// Not parallel: see TestOIDCLoginWithIDToken.
func TestOIDCAuditEventsNotified(t *testing.T) {
	h := hydratest.New(t)
	c := h.CreateClient(t, "http://127.0.0.1/callback")
	hook := newEventHook(t)
	r := startOIDC(t, h, c, "", "  audit:\n    events: true\nnotifications:\n  endpoints:\n    - name: audit\n      url: "+hook.URL+"/hook\n")
	erin := h.ServeLogin(t, hydratest.User{Name: "erin", Groups: []string{"readers"}})
	if s, _ := r.token(t, "erin", erin.IDToken(t, c), scopeQuery("repository:team/app:pull")); s != 200 {
		t.Fatalf("erin's token: %d", s)
	}
	hook.waitFor(t, []actionBy{{"login", "erin"}})
	wantLogin(t, hook, "login", "erin", notify.Login{Source: "oidc", Via: "token"})
}

// wantLogin requires the events of action by actor that hook received to
// carry want as cairn.login.
func wantLogin(t *testing.T, hook *eventHook, action, actor string, want notify.Login) {
	t.Helper()
	n := 0
	for _, e := range hook.received() {
		if e.Action != action || e.Actor.Name != actor {
			continue
		}
		n++
		if e.Cairn == nil || e.Cairn.Login == nil {
			t.Errorf("%s event of %s: no cairn.login (cairn %+v), want %+v", action, actor, e.Cairn, want)
		} else if *e.Cairn.Login != want {
			t.Errorf("%s event of %s: cairn.login %+v, want %+v", action, actor, *e.Cairn.Login, want)
		}
	}
	if n == 0 {
		t.Errorf("no %s event of %s", action, actor)
	}
}

// TestCLIClients: crane, skopeo and podman log in through cairn's token service
// with a robot key and with an htpasswd user, under the same policy.
// Each is skipped when missing from PATH (unless CAIRN_REQUIRE_CLIENTS=1).
func TestCLIClients(t *testing.T) {
	t.Parallel()
	r := start(t, "")
	img := regtest.RandomImage(t, 1, 8<<10)
	alice := &authn.Basic{Username: "alice", Password: "wonderland"}
	for _, repo := range []string{"team/app", "other/app"} {
		if err := r.push(t, repo, img, alice, nil); err != nil {
			t.Fatal(err)
		}
	}
	d, err := img.Digest()
	if err != nil {
		t.Fatal(err)
	}
	key := r.createRobot(t, "ci", "team/**:pull,push")
	t.Run("crane", func(t *testing.T) {
		crane := clitool.Path(t, "crane")
		robot := clitool.NewSession(t)
		robot.Run(t, crane, "auth", "login", r.Addr, "-u", "robot$ci", "-p", key)
		if got := strings.TrimSpace(string(robot.Run(t, crane, "digest", "--insecure", r.Addr+"/team/app:v1"))); got != d.String() {
			t.Errorf("crane digest as the robot: %s, want %s", got, d)
		}
		robot.Run(t, crane, "copy", "--insecure", r.Addr+"/team/app:v1", r.Addr+"/team/copy:v1")
		if out := robot.Fail(t, crane, "digest", "--insecure", r.Addr+"/other/app:v1"); !strings.Contains(out, "DENIED") {
			t.Errorf("crane digest outside the robot's scope: want DENIED, got:\n%s", out)
		}
		bob := clitool.NewSession(t)
		bob.Run(t, crane, "auth", "login", r.Addr, "-u", "bob", "-p", "builder")
		bob.Run(t, crane, "digest", "--insecure", r.Addr+"/team/app:v1")
		if out := bob.Fail(t, crane, "copy", "--insecure", r.Addr+"/team/app:v1", r.Addr+"/team/bob:v1"); !strings.Contains(out, "DENIED") {
			t.Errorf("crane copy by bob (pull only): want DENIED, got:\n%s", out)
		}
		wrong := clitool.NewSession(t)
		wrong.Run(t, crane, "auth", "login", r.Addr, "-u", "robot$ci", "-p", key+"x")
		if out := wrong.Fail(t, crane, "digest", "--insecure", r.Addr+"/team/app:v1"); !strings.Contains(out, "UNAUTHORIZED") {
			t.Errorf("crane with a wrong key: want UNAUTHORIZED, got:\n%s", out)
		}
	})
	t.Run("skopeo", func(t *testing.T) {
		skopeo := clitool.Path(t, "skopeo")
		e := clitool.NewSession(t)
		ref := "docker://" + r.Addr + "/team/app:v1"
		out := string(e.Run(t, skopeo, "--insecure-policy", "inspect", "--raw", "--tls-verify=false", "--creds", "robot$ci:"+key, ref))
		if !strings.Contains(out, "schemaVersion") {
			t.Errorf("skopeo inspect as the robot: %s", out)
		}
		e.Fail(t, skopeo, "--insecure-policy", "inspect", "--raw", "--tls-verify=false", "--creds", "robot$ci:"+key, "docker://"+r.Addr+"/other/app:v1")
		e.Run(t, skopeo, "--insecure-policy", "inspect", "--raw", "--tls-verify=false", "--creds", "bob:builder", ref)
		e.Fail(t, skopeo, "--insecure-policy", "inspect", "--raw", "--tls-verify=false", "--creds", "bob:nope", ref)
	})
	t.Run("podman", func(t *testing.T) {
		podman := clitool.Path(t, "podman")
		e := clitool.NewSession(t)
		e.Run(t, podman, "login", "--tls-verify=false", "-u", "robot$ci", "-p", key, r.Addr)
		if out := e.Fail(t, podman, "login", "--tls-verify=false", "-u", "robot$ci", "-p", key+"x", r.Addr); !strings.Contains(strings.ToLower(out), "unauthorized") && !strings.Contains(strings.ToLower(out), "invalid") {
			t.Errorf("podman login with a wrong key: want a refusal naming it, got:\n%s", out)
		}
	})
}

// TestMountWithoutFrom: a mount that names no source repository finds
// only what the caller may pull, whatever proved its identity: a robot
// key (Basic, and its token), and a user whose policy gives pull on one
// repository only; with pull on the holder, the mount is made.
func TestMountWithoutFrom(t *testing.T) {
	t.Parallel()
	r := start(t, "")
	img := regtest.RandomImage(t, 1, 8<<10)
	if err := r.push(t, "other/secret", img, &authn.Basic{Username: "alice", Password: "wonderland"}, nil); err != nil {
		t.Fatal(err)
	}
	layer := firstLayer(t, img)
	narrow := r.createRobot(t, "narrow", "team/**:pull,push")
	wide := r.createRobot(t, "wide", "team/**:pull,push", "other/**:pull")
	mount := "/v2/team/copy/blobs/uploads/?mount=" + layer.String()
	tokenFor := func(user, pass string) string {
		s, tok := r.token(t, user, pass, scopeQuery("repository:team/copy:pull,push"))
		if s != 200 {
			t.Fatalf("token for %s: %d", user, s)
		}
		return tok.Token
	}
	for _, c := range []struct {
		what string
		send func() regtest.Response
	}{
		{"robot key, Basic", func() regtest.Response { return r.basic(t, http.MethodPost, mount, "robot$narrow", narrow) }},
		{"robot key's token", func() regtest.Response { return r.bearer(t, http.MethodPost, mount, tokenFor("robot$narrow", narrow)) }},
		{"user's token", func() regtest.Response { return r.bearer(t, http.MethodPost, mount, tokenFor("carol", "singer")) }},
		{"robot with pull elsewhere, its team/copy token", func() regtest.Response {
			return r.bearer(t, http.MethodPost, mount, tokenFor("robot$wide", wide))
		}},
	} {
		if resp := c.send(); resp.Status != http.StatusAccepted {
			t.Errorf("%s: mount without from of a blob it may not pull: %v, want 202 (a plain upload)", c.what, resp)
		}
	}
	if resp := r.basic(t, http.MethodHead, "/v2/team/copy/blobs/"+layer.String(), "alice", "wonderland"); resp.Status != 404 {
		t.Errorf("blob in team/copy after refused mounts: %v", resp)
	}
	// With pull on the holder (Basic: the robot's own scopes), found.
	if resp := r.basic(t, http.MethodPost, mount+"&from=other/secret", "robot$wide", wide); resp.Status != http.StatusCreated {
		t.Errorf("mount from a repository the robot may pull: %v, want 201", resp)
	}
}
