package auth

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"path/filepath"
	"slices"
	"sync"
	"testing"
	"time"
)

// fakeSource knows users by password and groups; down makes every call
// fail as a directory that does not answer.
type fakeSource struct {
	name   string
	mu     sync.Mutex
	users  map[string]string   // user → password
	groups map[string][]string // user → groups
	down   bool
	calls  int
}

func (f *fakeSource) Name() string { return f.name }

func (f *fakeSource) Authenticate(_ context.Context, user, pass string) ([]string, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.calls++
	switch p, ok := f.users[user]; {
	case f.down:
		return nil, fmt.Errorf("%w: down", ErrUnavailable)
	case !ok:
		return nil, fmt.Errorf("%w: %s", ErrUnknownUser, user)
	case p != pass:
		return nil, errors.New("wrong password")
	}
	return f.groups[user], nil
}

func (f *fakeSource) Lookup(_ context.Context, user string) ([]string, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if _, ok := f.users[user]; !ok {
		return nil, fmt.Errorf("%w: %s", ErrUnknownUser, user)
	}
	return f.groups[user], nil
}

func (f *fakeSource) remove(user string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	delete(f.users, user)
}

// TestAccountsSources: robots, then htpasswd for its own users, then each
// source in order; an htpasswd user's wrong password never reaches a
// source; the identity carries the source and its groups; an empty
// password is refused before any source is asked.
func TestAccountsSources(t *testing.T) {
	h, err := NewHtpasswd("cairn", map[string][]byte{"alice": hashAt(t, "wonderland", 4)})
	if err != nil {
		t.Fatal(err)
	}
	first := &fakeSource{name: "first", users: map[string]string{"dave": "d1", "alice": "other"}, groups: map[string][]string{"dave": {"devs"}}}
	second := &fakeSource{name: "second", users: map[string]string{"erin": "e1", "dave": "d2"}, groups: map[string][]string{"erin": {"ops"}}}
	acc := NewAccounts(h, NewRobots(filepath.Join(t.TempDir(), "robots.json")), nil, first, second)
	login := func(user, pass string) (Identity, error) {
		return acc.Login(basicRequest(t.Context(), user, pass), user, pass, ViaBasic)
	}
	for _, c := range []struct {
		user, pass, source string
		groups             []string
	}{
		{"alice", "wonderland", SourceHtpasswd, nil},
		{"dave", "d1", "first", []string{"devs"}},
		{"erin", "e1", "second", []string{"ops"}},
	} {
		id, err := login(c.user, c.pass)
		if err != nil || id.Name != c.user || id.Source != c.source || !slices.Equal(id.Groups, c.groups) {
			t.Errorf("%s: %+v, %v; want source %s groups %q", c.user, id, err, c.source, c.groups)
		}
	}
	calls := first.calls + second.calls
	for _, c := range []struct{ user, pass string }{
		{"alice", "other"}, // htpasswd's user: the source's password does not count
		{"dave", "d2"},     // the first source that knows dave decides
		{"mallory", "x"},   // nobody knows mallory
		{"erin", ""},       // empty password
	} {
		if _, err := login(c.user, c.pass); !errors.Is(err, ErrInvalidCredentials) {
			t.Errorf("%s/%s: err = %v, want invalid credentials", c.user, c.pass, err)
		}
	}
	if got := first.calls + second.calls - calls; got != 3 {
		t.Errorf("sources asked %d times for dave and mallory, want 3: dave's first source, mallory's two (alice's and the empty password reach none)", got)
	}
	// A passing login is remembered for a while: a pull with Basic
	// credentials does not ask the directory per request.
	calls = first.calls + second.calls
	if _, err := login("dave", "d1"); err != nil || first.calls+second.calls != calls {
		t.Errorf("repeated login: %v, %d more source calls, want 0", err, first.calls+second.calls-calls)
	}
}

// tokenSource is a fakeSource whose logins are tokens with their own
// lifetime (OIDC's): Accounts must not remember them.
type tokenSource struct{ *fakeSource }

func (tokenSource) uncachedLogins() {}

// TestUncachedSourceAskedEachTime: a login through a source of tokens is
// checked again on every request, so a token stops the moment its source
// refuses it (expired), not a minute later.
func TestUncachedSourceAskedEachTime(t *testing.T) {
	src := tokenSource{&fakeSource{name: "tokens", users: map[string]string{"erin": "tok1"}}}
	acc := NewAccounts(nil, nil, nil, src)
	login := func() error {
		_, err := acc.Login(basicRequest(t.Context(), "erin", "tok1"), "erin", "tok1", ViaBasic)
		return err
	}
	if err := login(); err != nil {
		t.Fatal(err)
	}
	src.remove("erin") // the token expired
	if err := login(); !errors.Is(err, ErrInvalidCredentials) {
		t.Fatalf("login after the source refused the token: %v, want invalid credentials", err)
	}
	if src.calls != 2 {
		t.Fatalf("source asked %d times, want 2", src.calls)
	}
}

// TestSourceDownIsNotAGuess: a source that cannot answer fails the login
// without counting against the caller's address, and the token service
// says 503, not 401.
func TestSourceDownIsNotAGuess(t *testing.T) {
	src := &fakeSource{name: "dir", users: map[string]string{"dave": "d1"}, down: true}
	limit := NewLoginLimiter(1, 0.0001)
	acc := NewAccounts(nil, nil, limit, src)
	for range 3 {
		_, err := acc.Login(fromAddr(basicRequest(t.Context(), "dave", "d1"), "192.0.2.1:1"), "dave", "d1", ViaBasic)
		if !errors.Is(err, ErrUnavailable) || errors.Is(err, ErrTooManyAttempts) {
			t.Fatalf("err = %v, want unavailable (never held)", err)
		}
	}
	ts := newSourceService(t, acc)
	if r := ts.get(t, "dave", "d1", "service=reg&scope=repository:team/app:pull"); r.status != 503 {
		t.Errorf("token with the source down: %d, want 503", r.status)
	}
}

func newSourceService(t *testing.T, acc *Accounts) *ownService {
	t.Helper()
	key, _, err := LoadSigningKey(filepath.Join(t.TempDir(), "key.pem"), true)
	if err != nil {
		t.Fatal(err)
	}
	ts := &ownService{now: time.Now()}
	s, err := NewTokenService(TokenServiceOptions{
		Service: "reg", Issuer: "cairn", Expiration: 5 * time.Minute, RefreshExpiration: time.Hour,
		Key: key, Accounts: acc,
		AccessControl: &AccessControl{
			Groups: map[string][]string{"devs": {"frank"}},
			Repositories: map[string]RepositoryPolicy{
				"team/**": {Policies: []Policy{{Groups: []string{"devs"}, Actions: []string{"pull", "push"}}, {Groups: []string{"readers"}, Actions: []string{"pull"}}}},
			},
			SourceGroups: true,
		},
		Now: func() time.Time { return ts.now },
	})
	if err != nil {
		t.Fatal(err)
	}
	ts.TokenService = s
	return ts
}

// TestSourceGroupsAndRefresh: a source's groups meet the policies by name
// (a group accesscontrol.groups does not define, and one it does, adding
// up); a refresh token of a source user resumes through its Lookup, with
// the groups as they are then, and stops when the user is gone.
func TestSourceGroupsAndRefresh(t *testing.T) {
	src := &fakeSource{name: "dir",
		users:  map[string]string{"dave": "d1", "erin": "e1", "frank": "f1"},
		groups: map[string][]string{"dave": {"devs"}, "erin": {"readers"}}}
	ts := newSourceService(t, NewAccounts(nil, nil, nil, src))
	for _, c := range []struct {
		user, pass string
		want       string
	}{
		{"dave", "d1", "repository:team/app:pull,push"},
		{"erin", "e1", "repository:team/app:pull"},
		{"frank", "f1", "repository:team/app:pull,push"}, // devs by accesscontrol.groups
	} {
		r := ts.post(t, url.Values{"grant_type": {"password"}, "username": {c.user}, "password": {c.pass},
			"service": {"reg"}, "scope": {"repository:team/app:pull,push"}, "access_type": {"offline"}})
		if r.status != 200 || r.Scope != c.want {
			t.Errorf("%s: %d %q, want %q", c.user, r.status, r.Scope, c.want)
		}
		if r.RefreshToken == "" {
			t.Errorf("%s: no refresh token: the source can look users up", c.user)
		}
		if c.user != "erin" {
			continue
		}
		// erin joins devs in the directory: the refresh sees it.
		src.mu.Lock()
		src.groups["erin"] = []string{"devs"}
		src.mu.Unlock()
		refresh := func() tokenReply {
			return ts.post(t, url.Values{"grant_type": {"refresh_token"}, "refresh_token": {r.RefreshToken},
				"service": {"reg"}, "scope": {"repository:team/app:pull,push"}})
		}
		if rr := refresh(); rr.status != 200 || rr.Scope != "repository:team/app:pull,push" {
			t.Errorf("erin's refresh after joining devs: %d %q", rr.status, rr.Scope)
		}
		src.remove("erin")
		if rr := refresh(); rr.status != 401 {
			t.Errorf("refresh of a user the directory no longer has: %d, want 401", rr.status)
		}
	}
}

// TestSourceGroupsNeedASource: without a source, a policy naming a group
// accesscontrol.groups does not define is a typo, refused.
func TestSourceGroupsNeedASource(t *testing.T) {
	ac := AccessControl{Repositories: map[string]RepositoryPolicy{"team/**": {Policies: []Policy{{Groups: []string{"ldap-devs"}, Actions: []string{"pull"}}}}}}
	if _, err := compileACL(ac); err == nil {
		t.Error("an undefined group without a source: accepted")
	}
	ac.SourceGroups = true
	if _, err := compileACL(ac); err != nil {
		t.Errorf("an undefined group with a source: %v", err)
	}
}

// TestRefreshWithoutHtpasswd: a refresh token of an htpasswd user, shown
// to a registry whose accounts are a source alone (the file dropped, the
// key kept), is refused, not a crash.
func TestRefreshWithoutHtpasswd(t *testing.T) {
	h, err := NewHtpasswd("cairn", map[string][]byte{"alice": hashAt(t, "wonderland", 4)})
	if err != nil {
		t.Fatal(err)
	}
	withFile := newSourceService(t, NewAccounts(h, nil, nil))
	r := withFile.post(t, url.Values{"grant_type": {"password"}, "username": {"alice"}, "password": {"wonderland"},
		"service": {"reg"}, "access_type": {"offline"}})
	if r.status != 200 || r.RefreshToken == "" {
		t.Fatalf("alice's login: %d, refresh token %q", r.status, r.RefreshToken)
	}
	src := &fakeSource{name: "dir", users: map[string]string{"alice": "x"}}
	withoutFile := newSourceService(t, NewAccounts(nil, nil, nil, src))
	withoutFile.TokenService.signer = withFile.TokenService.signer
	withoutFile.TokenService.pub = withFile.TokenService.pub
	withoutFile.TokenService.alg = withFile.TokenService.alg
	if rr := withoutFile.post(t, url.Values{"grant_type": {"refresh_token"}, "refresh_token": {r.RefreshToken}, "service": {"reg"}}); rr.status != 401 {
		t.Errorf("an htpasswd user's refresh token without the file: %d, want 401", rr.status)
	}
}
