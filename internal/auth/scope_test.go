package auth

import (
	"errors"
	"net/http"
	"net/http/httptest"
	"slices"
	"testing"
)

func TestNeeded(t *testing.T) {
	repo := func(name string, actions ...string) []Access {
		var out []Access
		for _, a := range actions {
			out = append(out, Access{TypeRepository, name, a})
		}
		return out
	}
	cases := []struct {
		ep     Endpoint
		method string
		want   []Access
	}{
		{EndpointOther, http.MethodGet, nil},
		{EndpointOther, http.MethodPost, nil},
		{EndpointCatalog, http.MethodGet, []Access{{TypeRegistry, "catalog", "*"}}},
		{EndpointTags, http.MethodGet, repo("a/b", "pull")},
		{EndpointReferrers, http.MethodGet, repo("a/b", "pull")},
		{EndpointManifest, http.MethodGet, repo("a/b", "pull")},
		{EndpointManifest, http.MethodHead, repo("a/b", "pull")},
		{EndpointManifest, http.MethodPut, repo("a/b", "pull", "push")},
		{EndpointManifest, http.MethodDelete, repo("a/b", "delete")},
		{EndpointBlob, http.MethodGet, repo("a/b", "pull")},
		{EndpointBlob, http.MethodHead, repo("a/b", "pull")},
		{EndpointBlob, http.MethodDelete, repo("a/b", "delete")},
		// A method the endpoint does not have still needs write access:
		// nobody learns from the 405 what they could not learn otherwise.
		{EndpointBlob, http.MethodPost, repo("a/b", "pull", "push")},
		{EndpointUpload, http.MethodPost, repo("a/b", "pull", "push")},
		{EndpointUpload, http.MethodPatch, repo("a/b", "pull", "push")},
		{EndpointUpload, http.MethodPut, repo("a/b", "pull", "push")},
		{EndpointUpload, http.MethodGet, repo("a/b", "pull", "push")},
		{EndpointUpload, http.MethodDelete, repo("a/b", "pull", "push")},
	}
	for _, c := range cases {
		if got := Needed(c.ep, "a/b", c.method); !slices.Equal(got, c.want) {
			t.Errorf("Needed(%d, %s) = %v, want %v", c.ep, c.method, got, c.want)
		}
	}
}

func TestScope(t *testing.T) {
	cases := []struct {
		in   []Access
		want string
	}{
		{nil, ""},
		{Needed(EndpointUpload, "library/alpine", http.MethodPost), "repository:library/alpine:pull,push"},
		{Needed(EndpointCatalog, "", http.MethodGet), "registry:catalog:*"},
		{[]Access{{TypeRepository, "a", "pull"}, {TypeRepository, "b", "pull"}, {TypeRepository, "a", "push"}, {TypeRepository, "a", "pull"}},
			"repository:a:pull,push repository:b:pull"},
	}
	for _, c := range cases {
		if got := Scope(c.in); got != c.want {
			t.Errorf("Scope(%v) = %q, want %q", c.in, got, c.want)
		}
	}
}

func TestGrantAllows(t *testing.T) {
	g := Grant{access: map[resource][]string{
		{TypeRepository, "a"}:        {"pull"},
		{TypeRepository, "b"}:        {"*"},
		{TypeRegistry, "catalog"}:    {"*"},
		{TypeRepository, "c/nested"}: {"push", "pull"},
	}}
	cases := []struct {
		a    Access
		want bool
	}{
		{Access{TypeRepository, "a", "pull"}, true},
		{Access{TypeRepository, "a", "push"}, false},
		{Access{TypeRepository, "a", "delete"}, false},
		{Access{TypeRepository, "b", "delete"}, true},
		{Access{TypeRepository, "c/nested", "push"}, true},
		{Access{TypeRepository, "c", "pull"}, false},
		{Access{TypeRepository, "A", "pull"}, false},
		{Access{TypeRegistry, "catalog", "*"}, true},
		{Access{TypeRegistry, "a", "pull"}, false}, // type matters
	}
	for _, c := range cases {
		if got := g.Allows(c.a); got != c.want {
			t.Errorf("Allows(%v) = %v, want %v", c.a, got, c.want)
		}
	}
	if (Grant{}).Allows(Access{TypeRepository, "a", "pull"}) {
		t.Error("the zero Grant allows a pull")
	}
	if !(Grant{all: true}).Allows(Access{TypeRegistry, "catalog", "*"}) {
		t.Error("a grant of everything does not allow the catalog")
	}
}

// stubAuthorizer answers with a fixed grant, refusing what it lacks, like
// the real authorizers do.
type stubAuthorizer struct {
	grant Grant
	err   error // returned when set (no or invalid credentials)
}

func (s stubAuthorizer) Authorize(r *http.Request, need []Access) (Grant, error) {
	if s.err != nil {
		return Grant{}, &Challenge{err: s.err, need: need}
	}
	if m := s.grant.missing(need); len(m) > 0 {
		return s.grant, &Challenge{err: ErrInsufficientScope, need: need}
	}
	return s.grant, nil
}

func TestAnonymousPull(t *testing.T) {
	pull := Needed(EndpointManifest, "a", http.MethodGet)
	push := Needed(EndpointManifest, "a", http.MethodPut)
	catalog := Needed(EndpointCatalog, "", http.MethodGet)
	pullOnlyOfB := Grant{Subject: "u", access: map[resource][]string{{TypeRepository, "b"}: {"pull"}}}
	cases := []struct {
		name   string
		inner  stubAuthorizer
		need   []Access
		status int // 0: allowed
	}{
		{"no credentials, pull", stubAuthorizer{err: ErrNoCredentials}, pull, 0},
		{"no credentials, push", stubAuthorizer{err: ErrNoCredentials}, push, 401},
		{"no credentials, catalog", stubAuthorizer{err: ErrNoCredentials}, catalog, 401},
		{"no credentials, base", stubAuthorizer{err: ErrNoCredentials}, nil, 401},
		{"bad credentials, pull", stubAuthorizer{err: ErrInvalidCredentials}, pull, 401},
		{"known caller without pull on a", stubAuthorizer{grant: pullOnlyOfB}, pull, 0},
		{"known caller without push on a", stubAuthorizer{grant: pullOnlyOfB}, push, 403},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			r := httptest.NewRequest(http.MethodGet, "/v2/", nil)
			g, err := AnonymousPull(c.inner).Authorize(r, c.need)
			status := 0
			var ch *Challenge
			if errors.As(err, &ch) {
				status = ch.Status()
			} else if err != nil {
				t.Fatalf("err %v is not a *Challenge", err)
			}
			if status != c.status {
				t.Fatalf("status %d (err %v), want %d", status, err, c.status)
			}
			if err == nil && !g.Allows(Access{TypeRepository, "any/repo", "pull"}) {
				t.Error("anonymous grant does not allow pulling another repository")
			}
		})
	}
}
