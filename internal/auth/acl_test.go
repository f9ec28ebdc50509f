package auth

import (
	"errors"
	"net/http/httptest"
	"testing"
)

func testACL(t *testing.T) Authorizer {
	t.Helper()
	users := map[string][]byte{}
	for _, u := range []string{"alice", "bob", "carol", "dave"} {
		users[u] = []byte(bcryptHash(t, u+"-pw"))
	}
	h, err := NewHtpasswd("cairn", users)
	if err != nil {
		t.Fatal(err)
	}
	a, err := NewBasic("cairn", NewAccounts(h, nil, nil), &AccessControl{
		Groups: map[string][]string{"devs": {"bob", "carol"}, "ops": {"alice"}},
		Admin:  Policy{Groups: []string{"ops"}, Actions: []string{"*"}},
		Repositories: map[string]RepositoryPolicy{
			"**":           {Anonymous: []string{"pull"}},
			"team/**":      {Default: []string{"pull"}, Policies: []Policy{{Groups: []string{"devs"}, Actions: []string{"pull", "push"}}}},
			"team/secret*": {Policies: []Policy{{Users: []string{"carol"}, Actions: []string{"pull", "push", "delete"}}}},
			"team/*/cache": {Default: []string{"pull", "push"}},
		},
	}, false)
	if err != nil {
		t.Fatal(err)
	}
	return a
}

func TestAccessControl(t *testing.T) {
	a := testACL(t)
	repo := func(name, action string) Access { return Access{Type: TypeRepository, Name: name, Action: action} }
	catalog := Access{Type: TypeRegistry, Name: "catalog", Action: ActionAll}
	for _, c := range []struct {
		user   string // "" anonymous
		need   Access
		status int // 0 allowed
	}{
		// The most specific pattern decides; "**" lets anyone pull elsewhere.
		{"", repo("library/alpine", "pull"), 0},
		{"", repo("library/alpine", "push"), 401},
		{"dave", repo("library/alpine", "pull"), 0},
		{"dave", repo("library/alpine", "push"), 403},
		// team/**: authenticated pull, devs push; anonymous nothing.
		{"", repo("team/app", "pull"), 401},
		{"dave", repo("team/app", "pull"), 0},
		{"dave", repo("team/app", "push"), 403},
		{"bob", repo("team/app", "push"), 0},
		{"bob", repo("team/app", "delete"), 403},
		{"bob", repo("team/a/b/c", "push"), 0},
		// team/secret*: carol alone; a longer pattern overrides team/**.
		{"bob", repo("team/secret", "pull"), 403},
		{"carol", repo("team/secrets", "delete"), 0},
		{"dave", repo("team/secret-x", "pull"), 403},
		// "*" stays within a segment: team/x/cache matches, team/x/y/cache not.
		{"dave", repo("team/x/cache", "push"), 0},
		{"dave", repo("team/x/y/cache", "push"), 403},
		// Admins do everything, list the catalog; nobody else does.
		{"alice", repo("team/secret", "delete"), 0},
		{"alice", catalog, 0},
		{"bob", catalog, 403},
		{"", catalog, 401},
	} {
		r := httptest.NewRequest("GET", "/v2/", nil)
		if c.user != "" {
			r.SetBasicAuth(c.user, c.user+"-pw")
		}
		g, err := a.Authorize(r, []Access{c.need})
		status := 0
		var ch *Challenge
		if errors.As(err, &ch) {
			status = ch.Status()
		} else if err != nil {
			t.Fatalf("%s %v: %v", c.user, c.need, err)
		}
		if status != c.status {
			t.Errorf("%q %v: status %d, want %d (%v)", c.user, c.need, status, c.status, err)
		}
		if status == 401 && ch.Header() != `Basic realm="cairn"` {
			t.Errorf("%q %v: challenge %q", c.user, c.need, ch.Header())
		}
		if status == 0 && g.Subject != c.user {
			t.Errorf("%q %v: grant for %q", c.user, c.need, g.Subject)
		}
	}

	// A wrong password is refused, never treated as anonymous.
	r := httptest.NewRequest("GET", "/v2/", nil)
	r.SetBasicAuth("bob", "nope")
	if _, err := a.Authorize(r, []Access{repo("library/alpine", "pull")}); !errors.Is(err, ErrInvalidCredentials) {
		t.Fatalf("wrong password: %v", err)
	}
	// GET /v2/ without credentials asks for them.
	if _, err := a.Authorize(httptest.NewRequest("GET", "/v2/", nil), nil); !errors.Is(err, ErrNoCredentials) {
		t.Fatalf("anonymous GET /v2/: %v", err)
	}
	// Mounts without "from": only an admin searches everywhere.
	for user, want := range map[string]bool{"alice": true, "bob": false} {
		r := httptest.NewRequest("GET", "/v2/", nil)
		r.SetBasicAuth(user, user+"-pw")
		g, err := a.Authorize(r, nil)
		if err != nil {
			t.Fatal(err)
		}
		if all, names := g.PullableRepositories(); all != want || len(names) != 0 {
			t.Errorf("%s: PullableRepositories %v %v", user, all, names)
		}
	}
}

func TestAccessControlRejectsBadRules(t *testing.T) {
	h, err := NewHtpasswd("cairn", map[string][]byte{"a": []byte(bcryptHash(t, "x"))})
	if err != nil {
		t.Fatal(err)
	}
	for name, ac := range map[string]AccessControl{
		"unknown action":  {Repositories: map[string]RepositoryPolicy{"**": {Default: []string{"read"}}}},
		"upper case":      {Repositories: map[string]RepositoryPolicy{"Team/**": {}}},
		"empty pattern":   {Repositories: map[string]RepositoryPolicy{"": {}}},
		"undefined group": {Repositories: map[string]RepositoryPolicy{"**": {Policies: []Policy{{Groups: []string{"devs"}, Actions: []string{"pull"}}}}}},
		"admin action":    {Admin: Policy{Users: []string{"a"}, Actions: []string{"all"}}},
	} {
		if _, err := NewBasic("cairn", NewAccounts(h, nil, nil), &ac, false); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
}
