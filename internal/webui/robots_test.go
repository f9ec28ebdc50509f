package webui

import (
	"bytes"
	"html"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"golang.org/x/crypto/bcrypt"

	"github.com/cairn-registry/cairn/internal/auth"
	"github.com/cairn-registry/cairn/internal/notify"
)

func TestCSRFToken(t *testing.T) {
	c := newCSRF()
	req := func(authz, cookie string) *http.Request {
		r := httptest.NewRequest(http.MethodPost, "/ui/robots/create", nil)
		if authz != "" {
			r.Header.Set("Authorization", authz)
		}
		if cookie != "" {
			r.AddCookie(&http.Cookie{Name: auth.SessionCookie, Value: cookie})
		}
		return r
	}
	tok := c.token(req("Basic YWxpY2U6cHc=", ""), "alice")
	if tok != c.token(req("Basic YWxpY2U6cHc=", ""), "alice") {
		t.Error("the token of the same caller changed")
	}
	for what, other := range map[string]string{
		"another subject":     c.token(req("Basic YWxpY2U6cHc=", ""), "bob"),
		"other credentials":   c.token(req("Basic YWxpY2U6cHd4", ""), "alice"),
		"a session beside":    c.token(req("Basic YWxpY2U6cHc=", "s"), "alice"),
		"another process key": newCSRF().token(req("Basic YWxpY2U6cHc=", ""), "alice"),
		"parts run together":  c.token(req("", "Basic YWxpY2U6cHc="), "alice"),
	} {
		if other == tok {
			t.Errorf("%s: the same token", what)
		}
	}
	if c.token(req("", "one session"), "alice") == c.token(req("", "another session"), "alice") {
		t.Error("two sessions of one user: the same token")
	}

	post := func(token string, header ...string) *http.Request {
		form := url.Values{csrfField: {token}}
		r := httptest.NewRequest(http.MethodPost, "http://cairn.example/ui/robots/create", strings.NewReader(form.Encode()))
		r.Header.Set("Content-Type", "application/x-www-form-urlencoded")
		r.Header.Set("Authorization", "Basic YWxpY2U6cHc=")
		for i := 0; i+1 < len(header); i += 2 {
			r.Header.Set(header[i], header[i+1])
		}
		return r
	}
	if err := c.check(post(tok), "alice"); err != nil {
		t.Errorf("the page's own form: %v", err)
	}
	if err := c.check(post(tok, "Sec-Fetch-Site", "same-origin", "Origin", "http://cairn.example"), "alice"); err != nil {
		t.Errorf("the page's own form from a browser: %v", err)
	}
	for what, r := range map[string]*http.Request{
		"no token":                  post(""),
		"a wrong token":             post(tok[:len(tok)-2] + "AA"),
		"not base64":                post("%%%"),
		"another site (fetch)":      post(tok, "Sec-Fetch-Site", "cross-site"),
		"a sibling site (fetch)":    post(tok, "Sec-Fetch-Site", "same-site"),
		"another origin":            post(tok, "Origin", "https://evil.example"),
		"another port of this host": post(tok, "Origin", "http://cairn.example:8443"),
	} {
		if err := c.check(r, "alice"); err == nil {
			t.Errorf("%s: accepted", what)
		}
	}
	if err := c.check(post(tok), "bob"); err == nil {
		t.Error("alice's token for bob: accepted")
	}
}

// events records the page's notification events.
type events struct {
	mu   sync.Mutex
	seen []notify.Event
}

func (e *events) Notify(ev notify.Event) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.seen = append(e.seen, ev)
}

// robotsFixture is a page with robot keys on: alice is admin, bob not.
type robotsFixture struct {
	h      http.Handler
	path   string
	log    *bytes.Buffer
	events *events
}

func newRobotsFixture(t *testing.T, robotsOn bool) *robotsFixture {
	t.Helper()
	dir := t.TempDir()
	var users strings.Builder
	for _, u := range []string{"alice", "bob"} {
		hash, err := bcrypt.GenerateFromPassword([]byte(u+"-pw"), bcrypt.MinCost)
		if err != nil {
			t.Fatal(err)
		}
		users.WriteString(u + ":" + string(hash) + "\n")
	}
	hp := filepath.Join(dir, "htpasswd")
	if err := os.WriteFile(hp, []byte(users.String()), 0o600); err != nil {
		t.Fatal(err)
	}
	ht, err := auth.LoadHtpasswd("cairn", hp)
	if err != nil {
		t.Fatal(err)
	}
	f := &robotsFixture{path: filepath.Join(dir, "robots.json"), log: &bytes.Buffer{}, events: &events{}}
	basic, err := auth.NewBasic("cairn", auth.NewAccounts(ht, auth.NewRobots(f.path), nil), &auth.AccessControl{
		Admin:        auth.Policy{Users: []string{"alice"}, Actions: []string{"*"}},
		Repositories: map[string]auth.RepositoryPolicy{"**": {Default: []string{"pull"}}},
	}, false)
	if err != nil {
		t.Fatal(err)
	}
	opts := Options{Registry: fakeRegistry{[]string{"team/app"}}, Prefix: "/ui", Auth: basic}
	if robotsOn {
		opts.Robots = &RobotKeys{Path: f.path, Log: slog.New(slog.NewTextHandler(f.log, nil)), Events: f.events}
	}
	f.h = Handler(opts)
	return f
}

func (f *robotsFixture) do(method, path, user string, form url.Values, header ...string) *httptest.ResponseRecorder {
	var body *strings.Reader
	if form != nil {
		body = strings.NewReader(form.Encode())
	} else {
		body = strings.NewReader("")
	}
	r := httptest.NewRequest(method, path, body)
	if form != nil {
		r.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	}
	if user != "" {
		r.SetBasicAuth(user, user+"-pw")
	}
	for i := 0; i+1 < len(header); i += 2 {
		r.Header.Set(header[i], header[i+1])
	}
	rec := httptest.NewRecorder()
	f.h.ServeHTTP(rec, r)
	return rec
}

var tokenInput = regexp.MustCompile(`name="csrf" value="([^"]+)"`)

// token is the CSRF token of user's page.
func (f *robotsFixture) token(t *testing.T, user string) string {
	t.Helper()
	rec := f.do(http.MethodGet, "/ui/robots/", user, nil)
	m := tokenInput.FindStringSubmatch(rec.Body.String())
	if rec.Code != 200 || m == nil {
		t.Fatalf("%s's robot keys page: %d\n%s", user, rec.Code, rec.Body)
	}
	return html.UnescapeString(m[1])
}

func (f *robotsFixture) robots(t *testing.T) []auth.Robot {
	t.Helper()
	robots, err := auth.ReadRobots(f.path)
	if err != nil {
		t.Fatal(err)
	}
	return robots
}

// TestRobotsPage: an admin creates a key (shown once, never stored by the
// browser), sees it listed without the key, and revokes it; each change
// writes the CLI's audit line and event.
func TestRobotsPage(t *testing.T) {
	f := newRobotsFixture(t, true)
	tok := f.token(t, "alice")
	rec := f.do(http.MethodPost, "/ui/robots/create", "alice", url.Values{csrfField: {tok}, "name": {"ci"}, "scopes": {"team/**:pull,push\r\nlib/*:pull"}, "expires": {"30d"}})
	body := rec.Body.String()
	key := regexp.MustCompile(`id="key">(cairn_rk_[A-Za-z0-9_-]+)<`).FindStringSubmatch(body)
	if rec.Code != 200 || key == nil || rec.Header().Get("Cache-Control") != "no-store" {
		t.Fatalf("create: %d, Cache-Control %q\n%s", rec.Code, rec.Header().Get("Cache-Control"), body)
	}
	robots := f.robots(t)
	if len(robots) != 1 || robots[0].Name != "ci" || auth.ScopeList(robots[0].Scopes) != "team/**:pull,push lib/*:pull" || robots[0].Expires.IsZero() {
		t.Fatalf("file: %+v", robots)
	}
	page := f.do(http.MethodGet, "/ui/robots/", "alice", nil).Body.String()
	for _, want := range []string{"robot$ci", "team/**:pull,push", "lib/*:pull", robots[0].Expires.Format("2006-01-02T15:04:05Z07:00")} {
		if !strings.Contains(html.UnescapeString(page), want) {
			t.Errorf("the listing lacks %q", want)
		}
	}
	if strings.Contains(page, key[1]) || strings.Contains(page, robots[0].Hash) || strings.Contains(page, strings.TrimPrefix(robots[0].Hash, "sha256:")) {
		t.Error("the listing shows the key or its hash")
	}
	if !strings.Contains(f.do(http.MethodGet, "/ui/", "alice", nil).Body.String(), `id="robotkeys" href="/ui/robots/"`) {
		t.Error("the overview does not link admins to the robot keys")
	}
	if strings.Contains(f.do(http.MethodGet, "/ui/", "bob", nil).Body.String(), `robotkeys`) {
		t.Error("the overview links a non-admin to the robot keys")
	}

	rec = f.do(http.MethodPost, "/ui/robots/revoke", "alice", url.Values{csrfField: {tok}, "name": {"ci"}})
	if rec.Code != 200 || !strings.Contains(rec.Body.String(), "Revoked robot$ci") || len(f.robots(t)) != 0 {
		t.Fatalf("revoke: %d\n%s", rec.Code, rec.Body)
	}
	logs := f.log.String()
	for _, want := range []string{"action=robot.create user=robot$ci robot=true by=alice via=web", "action=robot.revoke user=robot$ci robot=true by=alice via=web"} {
		if !strings.Contains(logs, want) {
			t.Errorf("no audit line %q in\n%s", want, logs)
		}
	}
	if strings.Contains(logs, key[1]) {
		t.Error("the key is in the log")
	}
	if len(f.events.seen) != 2 || f.events.seen[0].Action != notify.ActionRobotCreate || f.events.seen[1].Action != notify.ActionRobotRevoke || f.events.seen[1].Actor.Name != "robot$ci" {
		t.Errorf("events: %+v", f.events.seen)
	}
}

// TestRobotsPageRefuses: non-admins, anonymous callers, forged and
// invalid requests are refused, and nothing is written.
func TestRobotsPageRefuses(t *testing.T) {
	f := newRobotsFixture(t, true)
	tok := f.token(t, "alice")
	create := url.Values{csrfField: {tok}, "name": {"ci"}, "scopes": {"team/**:pull"}}
	for _, c := range []struct {
		what, method, path, user string
		form                     url.Values
		header                   []string
		status                   int
		says                     string
	}{
		{"a non-admin's page", "GET", "/ui/robots/", "bob", nil, nil, 403, "only by admins"},
		{"a non-admin's create", "POST", "/ui/robots/create", "bob", create, nil, 403, "only by admins"},
		{"a non-admin's revoke of a key that exists", "POST", "/ui/robots/revoke", "bob", url.Values{csrfField: {tok}, "name": {"kept"}}, nil, 403, "only by admins"},
		{"a non-admin's revoke of none", "POST", "/ui/robots/revoke", "bob", url.Values{csrfField: {tok}, "name": {"nobody"}}, nil, 403, "only by admins"},
		{"anonymous page", "GET", "/ui/robots/", "", nil, nil, 401, ""},
		{"anonymous create", "POST", "/ui/robots/create", "", create, nil, 401, ""},
		{"no token", "POST", "/ui/robots/create", "alice", url.Values{"name": {"ci"}, "scopes": {"team/**:pull"}}, nil, 403, "token"},
		{"another site", "POST", "/ui/robots/create", "alice", create, []string{"Sec-Fetch-Site", "cross-site"}, 403, "cross-origin"},
		{"another origin", "POST", "/ui/robots/create", "alice", create, []string{"Origin", "https://evil.example"}, 403, "cross-origin"},
		{"another origin's revoke", "POST", "/ui/robots/revoke", "alice", url.Values{csrfField: {tok}, "name": {"kept"}}, []string{"Origin", "https://evil.example"}, 403, "cross-origin"},
		{"a GET create", "GET", "/ui/robots/create?" + create.Encode(), "alice", nil, nil, 405, ""},
		{"a bad name", "POST", "/ui/robots/create", "alice", url.Values{csrfField: {tok}, "name": {"CI<x>"}, "scopes": {"team/**:pull"}}, nil, 400, "robot name &#34;CI&lt;x&gt;&#34;: want 1 to 64 lower-case"},
		{"a bad scope", "POST", "/ui/robots/create", "alice", url.Values{csrfField: {tok}, "name": {"ci"}, "scopes": {"team/**:read"}}, nil, 400, "unknown action &#34;read&#34;"},
		{"no scope", "POST", "/ui/robots/create", "alice", url.Values{csrfField: {tok}, "name": {"ci"}, "scopes": {"  "}}, nil, 400, "give at least one scope"},
		{"a bad expiry", "POST", "/ui/robots/create", "alice", url.Values{csrfField: {tok}, "name": {"ci"}, "scopes": {"team/**:pull"}, "expires": {"soon"}}, nil, 400, "expiry &#34;soon&#34;"},
		{"a name in use", "POST", "/ui/robots/create", "alice", url.Values{csrfField: {tok}, "name": {"kept"}, "scopes": {"team/**:pull"}}, nil, 400, "robot &#34;kept&#34; exists"},
		{"an unknown key", "POST", "/ui/robots/revoke", "alice", url.Values{csrfField: {tok}, "name": {"nobody"}}, nil, 400, "no robot &#34;nobody&#34;"},
	} {
		if c.what == "a bad name" {
			// A key to find unchanged after every refusal.
			if _, _, err := auth.CreateRobot(f.path, auth.RobotRequest{Name: "kept", Scopes: []string{"x:pull"}}, time.Now()); err != nil {
				t.Fatal(err)
			}
		}
		before, _ := os.ReadFile(f.path)
		rec := f.do(c.method, c.path, c.user, c.form, c.header...)
		if rec.Code != c.status || !strings.Contains(rec.Body.String(), c.says) {
			t.Errorf("%s: %d, want %d saying %q\n%s", c.what, rec.Code, c.status, c.says, rec.Body)
		}
		if after, _ := os.ReadFile(f.path); !bytes.Equal(before, after) {
			t.Errorf("%s: the robot file changed", c.what)
		}
	}
	if strings.Contains(f.log.String(), "audit") || len(f.events.seen) != 0 {
		t.Errorf("refusals audited as changes:\n%s%+v", f.log, f.events.seen)
	}
}

// TestRobotsPageOff: without auth.robots the page says robot keys are
// off, to admins only, and takes no POST.
func TestRobotsPageOff(t *testing.T) {
	f := newRobotsFixture(t, false)
	if rec := f.do(http.MethodGet, "/ui/robots/", "alice", nil); rec.Code != 200 || !strings.Contains(rec.Body.String(), `id="off"`) || strings.Contains(rec.Body.String(), "<form") {
		t.Errorf("admin: %d\n%s", rec.Code, rec.Body)
	}
	if rec := f.do(http.MethodGet, "/ui/robots/", "bob", nil); rec.Code != 403 {
		t.Errorf("non-admin: %d, want 403", rec.Code)
	}
	if rec := f.do(http.MethodPost, "/ui/robots/create", "alice", url.Values{"name": {"ci"}, "scopes": {"team/**:pull"}}); rec.Code != 404 {
		t.Errorf("create: %d, want 404", rec.Code)
	}
	// Without authentication (the operators' listener) nobody manages keys.
	h := Handler(Options{Registry: fakeRegistry{nil}, Prefix: "/ui", Robots: &RobotKeys{Path: f.path, Log: slog.New(slog.NewTextHandler(f.log, nil))}})
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/ui/robots/", nil))
	if rec.Code != 403 {
		t.Errorf("without authentication: %d, want 403", rec.Code)
	}
}
