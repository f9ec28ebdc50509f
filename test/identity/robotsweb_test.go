package identity

import (
	"crypto/rand"
	"html"
	"net/http"
	"net/http/cookiejar"
	"net/url"
	"os"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/google/go-containerregistry/pkg/authn"

	"github.com/cairn-registry/cairn/internal/notify"
	"github.com/cairn-registry/cairn/internal/testutil/hydratest"
	"github.com/cairn-registry/cairn/internal/testutil/regtest"
)

// page is the robot keys page of a running cairn, driven as a browser
// would: Basic credentials, the form's token read from the page.
type page struct {
	r *registry
	t *testing.T
}

var (
	csrfInput = regexp.MustCompile(`name="csrf" value="([^"]+)"`)
	keyShown  = regexp.MustCompile(`id="key">(cairn_rk_[A-Za-z0-9_-]+)<`)
)

// get loads the page as user ("" anonymous).
func (p page) get(user, pass string) regtest.Response {
	p.t.Helper()
	req, err := http.NewRequestWithContext(p.t.Context(), http.MethodGet, p.r.URL+"/ui/robots/", nil)
	if err != nil {
		p.t.Fatal(err)
	}
	if user != "" {
		req.SetBasicAuth(user, pass)
	}
	return regtest.Send(p.t, p.r.hc, req)
}

// token is the form token of user's page.
func (p page) token(user, pass string) string {
	p.t.Helper()
	resp := p.get(user, pass)
	m := csrfInput.FindStringSubmatch(string(resp.Body))
	if resp.Status != http.StatusOK || m == nil {
		p.t.Fatalf("%s's robot keys page: %v", user, resp)
	}
	return html.UnescapeString(m[1])
}

// post sends form to the page's action as user, with header pairs.
func (p page) post(action, user, pass string, form url.Values, header ...string) regtest.Response {
	p.t.Helper()
	req, err := http.NewRequestWithContext(p.t.Context(), http.MethodPost, p.r.URL+"/ui/robots/"+action, strings.NewReader(form.Encode()))
	if err != nil {
		p.t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	if user != "" {
		req.SetBasicAuth(user, pass)
	}
	for i := 0; i+1 < len(header); i += 2 {
		req.Header.Set(header[i], header[i+1])
	}
	return regtest.Send(p.t, p.r.hc, req)
}

// TestRobotKeysFromTheWebPage: alice (admin) creates a key on the page,
// which go-containerregistry uses per its scopes through the token
// service; she revokes it there and the very next request with it is
// refused. Non-admins, forged and invalid requests change nothing.
func TestRobotKeysFromTheWebPage(t *testing.T) {
	t.Parallel()
	r := start(t, "", "ui:\n  enabled: true\n")
	p := page{r: r, t: t}
	robotsFile := r.Root + "/cairn-robots.json"
	tok := p.token("alice", "wonderland")

	resp := p.post("create", "alice", "wonderland", url.Values{"csrf": {tok}, "name": {"web-ci"}, "scopes": {"team/**:pull,push"}, "expires": {"7d"}})
	m := keyShown.FindStringSubmatch(string(resp.Body))
	if resp.Status != http.StatusOK || m == nil || resp.Header.Get("Cache-Control") != "no-store" {
		t.Fatalf("create: %v", resp)
	}
	key := m[1]
	if body := string(p.get("alice", "wonderland").Body); !strings.Contains(body, "robot$web-ci") || strings.Contains(body, key) {
		t.Errorf("the listing after create lacks the robot or shows its key:\n%s", body)
	}
	if out := r.cairn(t, "robot", "list"); !strings.Contains(out, "robot$web-ci") || !strings.Contains(out, "team/**:pull,push") {
		t.Errorf("cairn robot list does not show the page's key:\n%s", out)
	}

	robot := &authn.Basic{Username: "robot$web-ci", Password: key}
	img := regtest.RandomImage(t, 1, 8<<10)
	if err := r.push(t, "team/web", img, robot, nil); err != nil {
		t.Fatalf("the page's key pushes team/web: %v", err)
	}
	if err := r.pull(t, "team/web", robot); err != nil {
		t.Fatalf("the page's key pulls team/web: %v", err)
	}
	if s := status(r.push(t, "other/web", img, robot, nil)); s != http.StatusForbidden {
		t.Errorf("the page's key pushes other/web (out of scope): %d, want 403", s)
	}
	s, tk := r.token(t, "robot$web-ci", key, scopeQuery("repository:team/web:pull"))
	if s != http.StatusOK {
		t.Fatalf("token for the page's key: %d", s)
	}

	// Non-admins: 403 on the page and its forms, whether the key exists
	// or not; anonymous callers are asked to log in.
	if resp := p.get("bob", "builder"); resp.Status != http.StatusForbidden {
		t.Errorf("bob's page: %v, want 403", resp)
	}
	for _, name := range []string{"web-ci", "nobody"} {
		if resp := p.post("revoke", "bob", "builder", url.Values{"csrf": {tok}, "name": {name}}); resp.Status != http.StatusForbidden {
			t.Errorf("bob revokes %s: %v, want 403", name, resp)
		}
	}
	if resp := p.get("", ""); resp.Status != http.StatusUnauthorized || !strings.HasPrefix(resp.Header.Get("WWW-Authenticate"), "Basic") {
		t.Errorf("anonymous page: %v, want a Basic challenge", resp)
	}

	// Forged and invalid requests: refused, nothing written.
	before, err := os.ReadFile(robotsFile)
	if err != nil {
		t.Fatal(err)
	}
	create := url.Values{"csrf": {tok}, "name": {"forged"}, "scopes": {"**:*"}}
	for _, c := range []struct {
		what   string
		action string
		form   url.Values
		header []string
		status int
		says   string
	}{
		{"no token", "create", url.Values{"name": {"forged"}, "scopes": {"**:*"}}, nil, 403, "token"},
		{"another origin", "create", create, []string{"Origin", "https://evil.example"}, 403, ""},
		{"another site", "revoke", url.Values{"csrf": {tok}, "name": {"web-ci"}}, []string{"Sec-Fetch-Site", "cross-site"}, 403, ""},
		{"a bad name", "create", url.Values{"csrf": {tok}, "name": {"Web CI"}, "scopes": {"team/**:pull"}}, nil, 400, "want 1 to 64 lower-case letters"},
		{"a bad scope", "create", url.Values{"csrf": {tok}, "name": {"other"}, "scopes": {"team/**:write"}}, nil, 400, "unknown action"},
		{"a name in use", "create", url.Values{"csrf": {tok}, "name": {"web-ci"}, "scopes": {"team/**:pull"}}, nil, 400, "exists"},
	} {
		resp := p.post(c.action, "alice", "wonderland", c.form, c.header...)
		if resp.Status != c.status || !strings.Contains(html.UnescapeString(string(resp.Body)), c.says) {
			t.Errorf("%s: %v, want %d saying %q", c.what, resp, c.status, c.says)
		}
	}
	if after, err := os.ReadFile(robotsFile); err != nil || string(after) != string(before) {
		t.Errorf("refused requests changed the robot file (%v)", err)
	}

	resp = p.post("revoke", "alice", "wonderland", url.Values{"csrf": {tok}, "name": {"web-ci"}})
	if resp.Status != http.StatusOK || !strings.Contains(string(resp.Body), "Revoked robot$web-ci") {
		t.Fatalf("revoke: %v", resp)
	}
	// Not a poll: the very next request is refused.
	if resp := r.basic(t, http.MethodGet, "/v2/team/web/manifests/v1", "robot$web-ci", key); resp.Status != http.StatusUnauthorized {
		t.Errorf("revoked key as a Basic password: %v, want 401", resp)
	}
	if resp := r.bearer(t, http.MethodGet, "/v2/team/web/manifests/v1", tk.Token); resp.Status != http.StatusUnauthorized {
		t.Errorf("token of the revoked key: %v, want 401", resp)
	}
	if s := status(r.pull(t, "team/web", robot)); s != http.StatusUnauthorized {
		t.Errorf("go-containerregistry with the revoked key: %d, want 401", s)
	}

	logs, ok := r.LogsWith("action=robot.create user=robot$web-ci robot=true by=alice via=web", "action=robot.revoke user=robot$web-ci robot=true by=alice via=web")
	if !ok {
		t.Errorf("no audit lines of the page's create and revoke:\n%s", logs)
	}
	if strings.Contains(logs, key) {
		t.Error("the key is in the server's log")
	}
	if strings.Contains(logs, "user=robot$forged") || strings.Contains(logs, "user=robot$other") {
		t.Error("a refused request was audited as a change")
	}
}

// TestRobotKeyEventsFromTheWebPage: with auth.audit.events, the page's
// create and revoke send the events `cairn robot` sends.
func TestRobotKeyEventsFromTheWebPage(t *testing.T) {
	t.Parallel()
	hook := newEventHook(t)
	r := start(t, "  audit:\n    events: true\n", "notifications:\n  endpoints:\n    - name: audit\n      url: "+hook.URL+"/hook\n", "ui:\n  enabled: true\n")
	p := page{r: r, t: t}
	tok := p.token("alice", "wonderland")
	if resp := p.post("create", "alice", "wonderland", url.Values{"csrf": {tok}, "name": {"web"}, "scopes": {"team/**:pull"}}); resp.Status != http.StatusOK {
		t.Fatalf("create: %v", resp)
	}
	if resp := p.post("revoke", "alice", "wonderland", url.Values{"csrf": {tok}, "name": {"web"}}); resp.Status != http.StatusOK {
		t.Fatalf("revoke: %v", resp)
	}
	hook.waitFor(t, []actionBy{{notify.ActionRobotCreate, "robot$web"}, {notify.ActionRobotRevoke, "robot$web"}})
}

// TestRobotKeysWithAnOIDCSession: an admin logged in through OIDC (a
// session cookie, which a browser sends on any top-level POST from
// elsewhere) creates a key with the page's form; the same cookie without
// the form's token, from another site, or with the token of another
// session is refused.
func TestRobotKeysWithAnOIDCSession(t *testing.T) {
	t.Parallel()
	h := hydratest.New(t)
	id, secret := hydratest.NewClientID(), rand.Text()
	r := startOIDC(t, h, hydratest.Client{ID: id, Secret: secret}, "    weblogin: true\n", "ui:\n  enabled: true\n")
	h.CreateClientWith(t, id, secret, r.URL+"/auth/oidc/callback")
	session := func(user hydratest.User) *http.Client {
		jar, err := cookiejar.New(nil)
		if err != nil {
			t.Fatal(err)
		}
		c := &http.Client{Transport: h.ServeLogin(t, user).Transport(), Jar: jar, Timeout: 30 * time.Second}
		t.Cleanup(c.CloseIdleConnections)
		return c
	}
	frank := session(hydratest.User{Name: "frank", Groups: []string{"admins"}})
	load := func(c *http.Client) regtest.Response {
		return regtest.Do(t, c, http.MethodGet, r.URL+"/ui/robots/", nil)
	}
	resp := load(frank) // through the login and back
	m := csrfInput.FindStringSubmatch(string(resp.Body))
	if resp.Status != http.StatusOK || m == nil {
		t.Fatalf("frank's robot keys page after the OIDC login: %v", resp)
	}
	tok := html.UnescapeString(m[1])
	post := func(c *http.Client, form url.Values, header ...string) regtest.Response {
		return regtest.Do(t, c, http.MethodPost, r.URL+"/ui/robots/create", []byte(form.Encode()), append(header, "Content-Type", "application/x-www-form-urlencoded")...)
	}
	create := func(name string) url.Values {
		return url.Values{"csrf": {tok}, "name": {name}, "scopes": {"team/**:pull"}}
	}
	// frank again, in another session: the first session's token is not
	// this one's.
	again := session(hydratest.User{Name: "frank", Groups: []string{"admins"}})
	if resp := load(again); resp.Status != http.StatusOK {
		t.Fatalf("frank's second session: %v", resp)
	}
	for what, resp := range map[string]regtest.Response{
		"no token":                post(frank, url.Values{"name": {"forged"}, "scopes": {"**:*"}}),
		"another site":            post(frank, create("forged"), "Sec-Fetch-Site", "cross-site", "Origin", "https://evil.example"),
		"a sibling site":          post(frank, create("forged"), "Sec-Fetch-Site", "same-site"),
		"another session's token": post(again, create("forged")),
	} {
		// The page says why: the token, or the other site.
		if body := string(resp.Body); resp.Status != http.StatusForbidden || !strings.Contains(body, "token") && !strings.Contains(body, "cross-origin") {
			t.Errorf("%s: %v, want 403", what, resp)
		}
	}
	resp = post(frank, create("oidc-made"), "Sec-Fetch-Site", "same-origin", "Origin", r.URL)
	if resp.Status != http.StatusOK || !keyShown.Match(resp.Body) {
		t.Fatalf("frank creates a key with the form: %v", resp)
	}
	if out := r.cairn(t, "robot", "list"); !strings.Contains(out, "robot$oidc-made") || strings.Contains(out, "robot$forged") {
		t.Errorf("cairn robot list:\n%s", out)
	}
	// Without a session: to the login, and back to the page (a form's
	// action, too, since the login comes back with a GET).
	noRedirect := &http.Client{Timeout: 30 * time.Second, CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	t.Cleanup(noRedirect.CloseIdleConnections)
	for _, resp := range []regtest.Response{regtest.Do(t, noRedirect, http.MethodGet, r.URL+"/ui/robots/", nil), post(noRedirect, create("forged"))} {
		if resp.Status != http.StatusSeeOther || resp.Header.Get("Location") != "/auth/oidc/login?next=%2Fui%2Frobots%2F" {
			t.Errorf("without a session: %v (Location %q), want 303 to the login", resp, resp.Header.Get("Location"))
		}
	}
	erin := session(hydratest.User{Name: "erin", Groups: []string{"readers"}})
	if resp := load(erin); resp.Status != http.StatusForbidden {
		t.Errorf("erin (readers): %v, want 403", resp)
	}
	if logs, ok := r.LogsWith("action=robot.create user=robot$oidc-made robot=true by=frank via=web"); !ok {
		t.Errorf("no audit line of frank's key:\n%s", logs)
	}
}
