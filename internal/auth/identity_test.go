package auth

import (
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"golang.org/x/crypto/bcrypt"
)

// testAccounts is alice and bob (htpasswd, cost 4) and the robot file at
// a temp path, with limit.
func testAccounts(t *testing.T, limit *LoginLimiter) (*Accounts, *Htpasswd, string) {
	t.Helper()
	h, err := NewHtpasswd("cairn", map[string][]byte{
		"alice": hashAt(t, "wonderland", bcrypt.MinCost),
		"bob":   hashAt(t, "builder", bcrypt.MinCost),
	})
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "robots.json")
	return NewAccounts(h, NewRobots(path), limit), h, path
}

// addRobot creates robot name with scopes and returns its secret.
func addRobot(t *testing.T, path, name string, expires time.Time, scopes ...string) string {
	t.Helper()
	secret, hash := NewRobotSecret()
	rb := Robot{Name: name, ID: NewRobotID(), Hash: hash, Created: time.Now(), Expires: expires}
	for _, s := range scopes {
		sc, err := ParseRobotScope(s)
		if err != nil {
			t.Fatal(err)
		}
		rb.Scopes = append(rb.Scopes, sc)
	}
	if err := UpdateRobots(path, func(r []Robot) ([]Robot, error) { return append(r, rb), nil }); err != nil {
		t.Fatal(err)
	}
	return secret
}

func revoke(t *testing.T, path, name string) {
	t.Helper()
	err := UpdateRobots(path, func(r []Robot) ([]Robot, error) {
		for i := range r {
			if r[i].Name == name {
				return append(r[:i], r[i+1:]...), nil
			}
		}
		return nil, errors.New("no such robot")
	})
	if err != nil {
		t.Fatal(err)
	}
}

func fromAddr(r *http.Request, addr string) *http.Request {
	r.RemoteAddr = addr
	return r
}

// TestAccountsSameWorkForUnknownNames: every identity source does the
// same work for a name it does not know as for a known name's wrong
// secret: one bcrypt comparison against the dummy hash for users (a
// robot name never reaches bcrypt), one hash comparison for robots; and
// the refusal reads the same.
func TestAccountsSameWorkForUnknownNames(t *testing.T) {
	acc, h, path := testAccounts(t, nil)
	addRobot(t, path, "ci", time.Time{}, "team/**:pull")
	expired := addRobot(t, path, "old", time.Now().Add(-time.Hour), "team/**:pull")
	var compared [][]byte
	h.compare = func(hash, pass []byte) error {
		compared = append(compared, hash)
		return bcrypt.CompareHashAndPassword(hash, pass)
	}
	msg := func(err error) string {
		_, detail, _ := strings.Cut(err.Error(), ": user ")
		_, why, _ := strings.Cut(detail, ": ")
		return why
	}
	for _, c := range []struct {
		user, pass string
		bcrypt     []byte // the hash compared, nil for none
	}{
		{"mallory", "x", h.dummy},
		{"alice", "x", h.users["alice"]},
		{"robot$nobody", "cairn_rk_x", nil},
		{"robot$ci", "cairn_rk_x", nil},
		{"robot$old", expired, nil},
	} {
		compared = nil
		_, err := acc.Login(basicRequest(t.Context(), c.user, c.pass), c.user, c.pass, ViaBasic)
		if !errors.Is(err, ErrInvalidCredentials) {
			t.Fatalf("%s: err = %v, want invalid credentials", c.user, err)
		}
		want := [][]byte(nil)
		if c.bcrypt != nil {
			want = [][]byte{c.bcrypt}
		}
		if len(compared) != len(want) || len(want) == 1 && string(compared[0]) != string(want[0]) {
			t.Errorf("%s: bcrypt compared %d hashes, want exactly %d (the dummy for unknown users)", c.user, len(compared), len(want))
		}
		switch m := msg(err); {
		case strings.HasPrefix(c.user, RobotPrefix) && c.user != "robot$old" && m != "unknown robot or wrong key":
			t.Errorf("%s: %q: an unknown robot and a wrong key must read alike", c.user, m)
		case !strings.HasPrefix(c.user, RobotPrefix) && m != "unknown user or wrong password":
			t.Errorf("%s: %q: an unknown user and a wrong password must read alike", c.user, m)
		}
	}
}

// TestRobotRevokedAtOnce: the serving side sees the file's changes on
// the next use, with no reload: a new key works, a revoked one does not,
// a key created again under the revoked name is a new key.
func TestRobotRevokedAtOnce(t *testing.T) {
	acc, _, path := testAccounts(t, nil)
	login := func(user, pass string) error {
		_, err := acc.Login(basicRequest(t.Context(), user, pass), user, pass, ViaBasic)
		return err
	}
	if err := login("robot$ci", "cairn_rk_nothing"); err == nil {
		t.Fatal("a robot logged in before any file existed")
	}
	first := addRobot(t, path, "ci", time.Time{}, "team/**:pull")
	if err := login("robot$ci", first); err != nil {
		t.Fatalf("new key: %v", err)
	}
	revoke(t, path, "ci")
	if err := login("robot$ci", first); err == nil {
		t.Fatal("a revoked key still logs in")
	}
	second := addRobot(t, path, "ci", time.Time{}, "team/**:pull")
	if err := login("robot$ci", first); err == nil {
		t.Error("the revoked key works again once its name is reused")
	}
	if err := login("robot$ci", second); err != nil {
		t.Errorf("re-created key: %v", err)
	}
	// A torn or broken file refuses every key rather than keep a revoked
	// one working.
	if err := writeAtomic(path, []byte("{not json")); err != nil {
		t.Fatal(err)
	}
	if err := login("robot$ci", second); err == nil {
		t.Error("a key logs in while the robot file does not read")
	}
}

// TestLoginLimiter counts responses: a source may fail burst times, then
// is held back (429) without its credentials being checked, even right
// ones; another source is not; successes cost nothing.
func TestLoginLimiter(t *testing.T) {
	lim := NewLoginLimiter(3, 1e-9) // no refill within the test
	acc, h, _ := testAccounts(t, lim)
	compares := 0
	h.compare = func(hash, pass []byte) error {
		compares++
		return bcrypt.CompareHashAndPassword(hash, pass)
	}
	login := func(addr, user, pass string) error {
		r := fromAddr(basicRequest(t.Context(), user, pass), addr)
		_, err := acc.Login(r, user, pass, ViaBasic)
		return err
	}
	for range 5 {
		if err := login("192.0.2.1:1000", "alice", "wonderland"); err != nil {
			t.Fatalf("right password: %v", err)
		}
	}
	for i := range 3 {
		if err := login("192.0.2.1:1000", "alice", "nope"); !errors.Is(err, ErrInvalidCredentials) {
			t.Fatalf("failure %d: %v", i, err)
		}
	}
	compares = 0
	for _, pass := range []string{"nope", "wonderland"} {
		if err := login("192.0.2.1:2000", "alice", pass); !errors.Is(err, ErrTooManyAttempts) {
			t.Errorf("after the burst, %q: %v, want too many attempts", pass, err)
		}
	}
	if compares != 0 {
		t.Errorf("%d comparisons while held back, want none", compares)
	}
	if err := login("198.51.100.7:1000", "alice", "wonderland"); err != nil {
		t.Errorf("another address: %v", err)
	}
	b, err := NewBasic("cairn", acc, nil, false)
	if err != nil {
		t.Fatal(err)
	}
	_, err = b.Authorize(fromAddr(basicRequest(t.Context(), "alice", "nope"), "192.0.2.1:3000"), nil)
	var ch *Challenge
	if !errors.As(err, &ch) || ch.Status() != http.StatusTooManyRequests || ch.Code() != "TOOMANYREQUESTS" {
		t.Errorf("Basic while held back: %v, want a 429 challenge", err)
	}
}

// TestBasicPolicy: users under access control, robots under their own
// scopes plus what anyone may do; 403 for a known caller lacking an
// action, 401 otherwise.
func TestBasicPolicy(t *testing.T) {
	acc, _, path := testAccounts(t, nil)
	ci := addRobot(t, path, "ci", time.Time{}, "team/**:pull,push")
	old := addRobot(t, path, "old", time.Now().Add(-time.Minute), "team/**:pull,push")
	b, err := NewBasic("cairn", acc, &AccessControl{
		Repositories: map[string]RepositoryPolicy{
			"team/**":   {Policies: []Policy{{Users: []string{"bob"}, Actions: []string{"pull"}}}},
			"public/**": {Anonymous: []string{"pull"}},
		},
		Admin: Policy{Users: []string{"alice"}, Actions: []string{"*"}},
	}, false)
	if err != nil {
		t.Fatal(err)
	}
	repo := func(name string, actions ...string) []Access {
		var out []Access
		for _, a := range actions {
			out = append(out, Access{Type: TypeRepository, Name: name, Action: a})
		}
		return out
	}
	catalog := []Access{{Type: TypeRegistry, Name: "catalog", Action: ActionAll}}
	for _, c := range []struct {
		user, pass string
		need       []Access
		status     int
	}{
		{"alice", "wonderland", repo("team/app", "push"), 0},
		{"alice", "wonderland", catalog, 0},
		{"bob", "builder", repo("team/app", "pull"), 0},
		{"bob", "builder", repo("team/app", "pull", "push"), 403},
		{"bob", "builder", repo("no/such", "pull"), 403},
		{"robot$ci", ci, repo("team/a/b", "pull", "push"), 0},
		{"robot$ci", ci, repo("team/app", "delete"), 403},
		{"robot$ci", ci, repo("other/app", "pull"), 403},
		{"robot$ci", ci, repo("public/x", "pull"), 0}, // what anyone may do
		{"robot$ci", ci, catalog, 403},
		{"robot$old", old, repo("team/app", "pull"), 401},
		{"robot$ci", "wrong", repo("team/app", "pull"), 401},
		{"", "", repo("public/x", "pull"), 0},
		{"", "", repo("team/app", "pull"), 401},
		{"", "", nil, 401},
	} {
		r := httptest.NewRequestWithContext(t.Context(), http.MethodGet, "/v2/", nil)
		if c.user != "" {
			r.SetBasicAuth(c.user, c.pass)
		}
		_, err := b.Authorize(r, c.need)
		status := 0
		var ch *Challenge
		if errors.As(err, &ch) {
			status = ch.Status()
		} else if err != nil {
			t.Fatalf("%s %v: %v", c.user, c.need, err)
		}
		if status != c.status {
			t.Errorf("%q %s: status %d, want %d (%v)", c.user, Scope(c.need), status, c.status, err)
		}
	}
}

// TestRobotsConcurrentUse: logins while the file is rewritten see the old
// file or the new one, never an error from a part (run with -race).
func TestRobotsConcurrentUse(t *testing.T) {
	acc, _, path := testAccounts(t, nil)
	key := addRobot(t, path, "ci", time.Time{}, "team/**:pull")
	done := make(chan struct{})
	errs := make(chan error, 4)
	for range 4 {
		go func() {
			for {
				select {
				case <-done:
					errs <- nil
					return
				default:
				}
				if _, err := acc.Login(basicRequest(t.Context(), "robot$ci", key), "robot$ci", key, ViaBasic); err != nil {
					errs <- err
					return
				}
			}
		}()
	}
	for i := range 20 {
		addRobot(t, path, fmt.Sprint("other", i), time.Time{}, "x/**:pull")
	}
	close(done)
	for range 4 {
		if err := <-errs; err != nil {
			t.Fatalf("login while the file changed: %v", err)
		}
	}
}
