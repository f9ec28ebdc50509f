package auth

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"net"
	"os"
	"slices"
	"testing"
	"time"

	"github.com/cairn-registry/cairn/internal/testutil/testenv"
)

// TestLDAPFilters: a name is always a value of the filter, never syntax.
func TestLDAPFilters(t *testing.T) {
	for _, c := range []struct{ user, want string }{
		{"alice", `(&(uid=alice)(objectClass=*))`},
		{"*", `(&(uid=\2a)(objectClass=*))`},
		{")(uid=*", `(&(uid=\29\28uid=\2a)(objectClass=*))`},
		{`a\b` + "\x00", `(&(uid=a\5cb\00)(objectClass=*))`},
		{"zoë", `(&(uid=zo\c3\ab)(objectClass=*))`},
	} {
		if got := userFilter("uid", "(objectClass=*)", c.user); got != c.want {
			t.Errorf("userFilter(%q) = %s, want %s", c.user, got, c.want)
		}
	}
	got := groupFilter("(|(member={dn})(memberUid={user}))", "uid=a*,ou=people,dc=x", "a*")
	if want := `(|(member=uid=a\2a,ou=people,dc=x)(memberUid=a\2a))`; got != want {
		t.Errorf("groupFilter = %s, want %s", got, want)
	}
}

// testLDAP is the test server's source over url (ldap:// with starttls, or
// ldaps://), verified with the test CA.
func testLDAP(t *testing.T, srv testenv.LDAP, url string, starttls bool) *LDAP {
	t.Helper()
	pem, err := os.ReadFile(srv.CA)
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(pem)
	l, err := NewLDAP(LDAPOptions{
		URL: url, StartTLS: starttls, TLS: &tls.Config{RootCAs: pool},
		BindDN: srv.BindDN, BindPassword: srv.BindPW,
		UserBase: "ou=people," + srv.Base, UserAttribute: "uid", UserFilter: "(objectClass=inetOrgPerson)",
		GroupBase: "ou=groups," + srv.Base, GroupFilter: "(member={dn})", GroupAttribute: "cn",
		Timeout: 10 * time.Second,
	})
	if err != nil {
		t.Fatal(err)
	}
	return l
}

// TestLDAPSource: logins and lookups against the test OpenLDAP, over plain
// ldap://, StartTLS and ldaps://.
func TestLDAPSource(t *testing.T) {
	srv := testenv.LDAPServer(t)
	for _, tc := range []struct {
		name, url string
		starttls  bool
	}{{"plain", srv.URL, false}, {"starttls", srv.URL, true}, {"ldaps", srv.LDAPS, false}} {
		t.Run(tc.name, func(t *testing.T) {
			l := testLDAP(t, srv, tc.url, tc.starttls)
			switch tc.name {
			case "plain":
				l.opts.TLS = nil
			case "ldaps":
				// config's default group filter.
				l.opts.GroupFilter = "(|(member={dn})(uniqueMember={dn}))"
			}
			ctx := t.Context()
			groups, err := l.Authenticate(ctx, "alice", "alice-secret")
			if err != nil || !slices.Equal(groups, []string{"developers", "readers"}) {
				t.Errorf("alice: %q, %v", groups, err)
			}
			if groups, err := l.Authenticate(ctx, "carol", "carol-secret"); err != nil || len(groups) != 0 {
				t.Errorf("carol: %q, %v; want no groups", groups, err)
			}
			if _, err := l.Authenticate(ctx, "alice", "wrong"); err == nil || errors.Is(err, ErrUnknownUser) || errors.Is(err, ErrUnavailable) {
				t.Errorf("alice, wrong password: %v", err)
			}
			for _, user := range []string{"mallory", "*", ")(uid=*", "alice)(uid=*", "ALICE", "twin", "al*"} {
				if _, err := l.Authenticate(ctx, user, "alice-secret"); !errors.Is(err, ErrUnknownUser) {
					t.Errorf("%q: err = %v, want an unknown user", user, err)
				}
			}
			if _, err := l.Authenticate(ctx, "alice", ""); err == nil {
				t.Error("alice with an empty password: passed (an unauthenticated bind)")
			}
			if groups, err := l.Lookup(ctx, "bob"); err != nil || !slices.Equal(groups, []string{"readers"}) {
				t.Errorf("lookup bob: %q, %v", groups, err)
			}
			if _, err := l.Lookup(ctx, "mallory"); !errors.Is(err, ErrUnknownUser) {
				t.Errorf("lookup mallory: %v, want an unknown user", err)
			}
		})
	}
}

// TestLDAPUnavailable: a directory that is not there, that never
// answers, or that cannot be verified fails the login as unavailable,
// within the timeout, never a hang.
func TestLDAPUnavailable(t *testing.T) {
	srv := testenv.LDAPServer(t)
	// A listener that accepts and never answers.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			defer c.Close()
		}
	}()
	closed, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	closedAddr := closed.Addr().String()
	closed.Close()
	for _, c := range []struct {
		name, url string
		starttls  bool
		tls       *tls.Config
	}{
		{"refused", "ldap://" + closedAddr, false, nil},
		{"silent", "ldap://" + ln.Addr().String(), false, nil},
		{"silent starttls", "ldap://" + ln.Addr().String(), true, nil},
		{"unknown CA", srv.LDAPS, false, &tls.Config{}},
		{"starttls unknown CA", srv.URL, true, &tls.Config{}},
	} {
		t.Run(c.name, func(t *testing.T) {
			l, err := NewLDAP(LDAPOptions{URL: c.url, StartTLS: c.starttls, TLS: c.tls,
				BindDN: srv.BindDN, BindPassword: srv.BindPW, UserBase: srv.Base, UserAttribute: "uid",
				UserFilter: "(objectClass=*)", Timeout: 500 * time.Millisecond})
			if err != nil {
				t.Fatal(err)
			}
			if _, err := l.Authenticate(t.Context(), "alice", "alice-secret"); !errors.Is(err, ErrUnavailable) {
				t.Errorf("err = %v, want unavailable", err)
			}
		})
	}
	// A wrong service password is the operator's mistake, not the user's.
	l := testLDAP(t, srv, srv.LDAPS, false)
	l.opts.BindPassword = "wrong"
	if _, err := l.Authenticate(t.Context(), "alice", "alice-secret"); !errors.Is(err, ErrUnavailable) {
		t.Errorf("wrong service password: %v, want unavailable", err)
	}
}
