package identity

import (
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-containerregistry/pkg/authn"

	"github.com/cairn-registry/cairn/internal/testutil/cairnproc"
	"github.com/cairn-registry/cairn/internal/testutil/clitool"
	"github.com/cairn-registry/cairn/internal/testutil/htpasswdtest"
	"github.com/cairn-registry/cairn/internal/testutil/regtest"
	"github.com/cairn-registry/cairn/internal/testutil/testenv"
)

// The directory scripts/services/ldap.sh seeds: alice is in developers and
// readers, bob in readers, carol in no group; each password is
// "<name>-secret". The policy gives the groups actions by name (no
// accesscontrol.groups: LDAP names the members):
// developers push and pull team/** and other/**, readers pull team/**.
const ldapPolicy = `  accesscontrol:
    repositories:
      "team/**":
        policies:
          - groups: [developers]
            actions: [pull, push]
          - groups: [readers]
            actions: [pull]
      "other/**":
        policies:
          - groups: [developers]
            actions: [pull, push]
`

// ldapTransport is how cairn reaches the directory.
type ldapTransport int

const (
	ldapStartTLS ldapTransport = iota // ldap:// upgraded with StartTLS, the test CA
	ldapLDAPS                         // ldaps://, the test CA
	ldapPlain                         // ldap:// to the loopback, no TLS
)

// ldapSection is auth.ldap for the test directory over tr, the service
// account's password in a file.
func ldapSection(t *testing.T, srv testenv.LDAP, tr ldapTransport) string {
	t.Helper()
	pw := filepath.Join(t.TempDir(), "bindpw")
	if err := os.WriteFile(pw, []byte(srv.BindPW+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	var conn string
	switch tr {
	case ldapStartTLS:
		conn = fmt.Sprintf("    url: %s\n    starttls: true\n    ca: %s\n", srv.URL, srv.CA)
	case ldapLDAPS:
		conn = fmt.Sprintf("    url: %s\n    ca: %s\n", srv.LDAPS, srv.CA)
	case ldapPlain:
		conn = fmt.Sprintf("    url: %s\n", srv.URL)
	}
	return fmt.Sprintf(`  ldap:
%s    binddn: %q
    bindpasswordfile: %s
    userbase: "ou=people,%s"
    userfilter: "(objectClass=inetOrgPerson)"
    groupbase: "ou=groups,%s"
    groupfilter: "(member={dn})"
    timeout: 10s
`, conn, srv.BindDN, pw, srv.Base, srv.Base)
}

// startLDAP runs cairn whose only accounts are the test directory's (no
// htpasswd file), with the group policy, the token service unless basic,
// and extra lines under auth.
func startLDAP(t *testing.T, section string, basic bool, extra string) *registry {
	t.Helper()
	ts := "  tokenservice:\n    service: " + service + "\n"
	if basic {
		ts = ""
	}
	return startConfig(t, "auth:\n"+section+ts+ldapPolicy+extra)
}

// TestLDAPUsersLogInWithTokens: with auth.ldap alone (no htpasswd file),
// go-containerregistry gets Bearer tokens from cairn's token service as
// directory users over StartTLS, and the policies by directory group
// decide: alice (developers) pushes, bob (readers) pulls but may not push
// nor read other/** (403, alike whether the repository exists), carol (no
// group) is known but may do nothing (403); a wrong password, an unknown
// user, an empty password and filter syntax in the name are 401. A refresh
// token resumes while the user is in the directory.
func TestLDAPUsersLogInWithTokens(t *testing.T) {
	t.Parallel()
	srv := testenv.LDAPServer(t)
	r := startLDAP(t, ldapSection(t, srv, ldapStartTLS), false, "")
	ch := regtest.Do(t, r.hc, http.MethodGet, r.URL+"/v2/", nil)
	if want := `Bearer realm="` + r.URL + `/auth/token",service="` + service + `"`; ch.Status != 401 || ch.Header.Get("WWW-Authenticate") != want {
		t.Fatalf("GET /v2/ without credentials: %v, want 401 with %s", ch, want)
	}

	img := regtest.RandomImage(t, 2, 16<<10)
	rt := newSchemes()
	alice := &authn.Basic{Username: "alice", Password: "alice-secret"}
	for _, repo := range []string{"team/app", "other/app"} {
		if err := r.push(t, repo, img, alice, rt); err != nil {
			t.Fatalf("alice (developers) pushes %s: %v", repo, err)
		}
	}
	if rt.seen["Bearer"] == 0 || rt.seen["Basic"] != 0 {
		t.Errorf("Authorization schemes sent to /v2/: %v, want Bearer only", rt.seen)
	}
	r.checkReader(t, "bob (readers)", &authn.Basic{Username: "bob", Password: "bob-secret"})
	carol := &authn.Basic{Username: "carol", Password: "carol-secret"}
	for _, repo := range []string{"team/app", "team/missing"} {
		if s := status(r.pull(t, repo, carol)); s != 403 {
			t.Errorf("carol pulls %s: status %d, want 403 (a known user lacking the action, alike whether it exists)", repo, s)
		}
	}
	for _, a := range []*authn.Basic{
		{Username: "bob", Password: "nope"},
		{Username: "mallory", Password: "bob-secret"},
		{Username: "*", Password: "bob-secret"},
		{Username: ")(uid=*", Password: "bob-secret"},
		{Username: "bob)(uid=*", Password: "bob-secret"},
		{Username: "b*", Password: "bob-secret"},
		{Username: "twin", Password: "twin-secret"}, // two entries: ambiguous
	} {
		for _, repo := range []string{"team/app", "team/missing"} {
			if s := status(r.pull(t, repo, a)); s != 401 {
				t.Errorf("%q/%q pulls %s: status %d, want 401", a.Username, a.Password, repo, s)
			}
		}
	}
	// The token endpoint itself: an empty password is no login (LDAP
	// would take it for an anonymous bind and say yes).
	if s, _ := r.token(t, "bob", "", scopeQuery("repository:team/app:pull")); s != 401 {
		t.Errorf("token for bob with an empty password: %d, want 401", s)
	}
	// Refresh tokens name the source and resume through a lookup.
	form := url.Values{"grant_type": {"password"}, "username": {"bob"}, "password": {"bob-secret"}, "access_type": {"offline"},
		"service": {service}, "scope": {"repository:team/app:pull"}}
	tok := r.postToken(t, form)
	if tok.RefreshToken == "" {
		t.Fatal("no refresh token for an LDAP user")
	}
	again := r.postToken(t, url.Values{"grant_type": {"refresh_token"}, "refresh_token": {tok.RefreshToken},
		"service": {service}, "scope": {"repository:team/app:pull"}})
	if resp := r.bearer(t, http.MethodGet, "/v2/team/app/manifests/v1", again.AccessToken); resp.Status != 200 {
		t.Errorf("bob's refreshed token pulls team/app: %v", resp)
	}
	// The audit trail names the source that proved the identity.
	if logs, ok := r.LogsWith("action=login user=bob robot=false source=ldap"); !ok {
		t.Errorf("no audit line of bob's login with source=ldap:\n%s", logs)
	}
}

// postToken asks the token endpoint with an OAuth2 form and wants 200.
func (r *registry) postToken(t *testing.T, form url.Values) tokenReply {
	t.Helper()
	req, err := http.NewRequestWithContext(t.Context(), http.MethodPost, r.URL+"/auth/token", strings.NewReader(form.Encode()))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	resp := regtest.Send(t, r.hc, req)
	var tr tokenReply
	if resp.Status != http.StatusOK || json.Unmarshal(resp.Body, &tr) != nil {
		t.Fatalf("token (%s): %v", form.Get("grant_type"), resp)
	}
	return tr
}

// TestLDAPSBesideHtpasswd: over ldaps://, served as Basic, the directory's
// users log in beside the htpasswd file's: the file's user keeps their own
// password (the directory is not asked for a name the file has), the
// directory's users get their groups' actions, and access control names
// both.
func TestLDAPSBesideHtpasswd(t *testing.T) {
	t.Parallel()
	srv := testenv.LDAPServer(t)
	// root:root-secret at bcrypt cost 5; alice is also in the file, with
	// another password: the file's alice is the only alice.
	hp := htpasswdtest.File(t, 5, "root", "root-secret", "alice", "local-alice")
	section := ldapSection(t, srv, ldapLDAPS) + "  htpasswd:\n    realm: " + realm + "\n    path: " + hp + "\n"
	r := startLDAP(t, section, true, "    adminpolicy:\n      users: [root]\n      actions: [\"*\"]\n")
	ch := regtest.Do(t, r.hc, http.MethodGet, r.URL+"/v2/", nil)
	if want := fmt.Sprintf("Basic realm=%q", realm); ch.Status != 401 || ch.Header.Get("WWW-Authenticate") != want {
		t.Fatalf("GET /v2/: %v, want 401 with %s", ch, want)
	}
	img := regtest.RandomImage(t, 1, 8<<10)
	if err := r.push(t, "team/app", img, &authn.Basic{Username: "root", Password: "root-secret"}, nil); err != nil {
		t.Fatalf("root (htpasswd, admin) pushes: %v", err)
	}
	for _, c := range []struct {
		user, pass, repo string
		want             int
	}{
		{"bob", "bob-secret", "team/app", 200},
		{"bob", "bob-secret", "other/app", 403},
		{"bob", "bob-secret", "other/missing", 403},
		{"alice", "local-alice", "team/app", 403},  // htpasswd's alice has no group
		{"alice", "alice-secret", "team/app", 401}, // the directory's password is not hers here
		{"bob", "wrong", "team/app", 401},
		{"mallory", "x", "team/app", 401},
	} {
		if resp := r.basic(t, http.MethodGet, "/v2/"+c.repo+"/manifests/v1", c.user, c.pass); resp.Status != c.want {
			t.Errorf("%s/%s GET %s: %v, want %d", c.user, c.pass, c.repo, resp, c.want)
		}
	}
}

// TestLDAPUnreachable: with the directory down (nothing listens) or silent
// (accepts and never answers), cairn still serves and refuses logins
// cleanly and in time: the token endpoint 503 (retry later, not "wrong
// password"), Basic 401, and the log says why; failed checks are not
// counted as guesses, so the address is never held back (429).
func TestLDAPUnreachable(t *testing.T) {
	t.Parallel()
	srv := testenv.LDAPServer(t)
	silent, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { silent.Close() })
	go func() {
		var held []net.Conn
		defer func() {
			for _, c := range held {
				c.Close()
			}
		}()
		for {
			c, err := silent.Accept()
			if err != nil {
				return
			}
			held = append(held, c)
		}
	}()
	closed, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	down := closed.Addr().String()
	closed.Close()
	for _, c := range []struct{ name, addr string }{{"down", down}, {"silent", silent.Addr().String()}} {
		t.Run(c.name, func(t *testing.T) {
			section := strings.Replace(ldapSection(t, srv, ldapPlain), srv.URL, "ldap://"+c.addr, 1)
			section = strings.Replace(section, "timeout: 10s", "timeout: 1s", 1)
			r := startLDAP(t, section, false, "  failedlogins:\n    burst: 2\n    perminute: 1\n")
			for range 4 {
				if s, _ := r.token(t, "alice", "alice-secret", scopeQuery("repository:team/app:pull")); s != 503 {
					t.Errorf("token with the directory %s: %d, want 503", c.name, s)
				}
			}
			if resp := r.basic(t, http.MethodGet, "/v2/team/app/manifests/v1", "alice", "alice-secret"); resp.Status != 401 {
				t.Errorf("Basic with the directory %s: %v, want 401", c.name, resp)
			}
			if _, ok := r.LogsWith("identity source unavailable", c.addr); !ok {
				t.Errorf("no log line names the unavailable directory %s:\n%s", c.addr, r.Logs())
			}
		})
	}
}

// TestLDAPUnknownNamesCostTheSame: on the token endpoint, a refusal takes
// as long for a name the directory does not have as for a directory
// user's wrong password (cairn binds a DN no entry has in its place).
// Measured as TestUnknownNamesCostTheSame measures: the fastest of
// alternating samples, a factor of 4 either way. Not parallel.
func TestLDAPUnknownNamesCostTheSame(t *testing.T) {
	srv := testenv.LDAPServer(t)
	r := startLDAP(t, ldapSection(t, srv, ldapStartTLS), false, "  failedlogins:\n    burst: -1\n")
	q := scopeQuery("repository:team/app:pull")
	refusal := func(user, pass string) time.Duration { return r.refusalTime(t, q, user, pass) }
	refusal("alice", "warm-up")
	regtest.CheckSameCost(t, "directory users", 15,
		func() time.Duration { return refusal("mallory", "looking-glass") },
		func() time.Duration { return refusal("alice", "looking-glass") })
}

// TestLDAPCLIClients: crane, skopeo and podman log in through cairn's
// token service as directory users, under the group policy. Each is
// skipped when missing from PATH (unless CAIRN_REQUIRE_CLIENTS=1).
func TestLDAPCLIClients(t *testing.T) {
	t.Parallel()
	srv := testenv.LDAPServer(t)
	r := startLDAP(t, ldapSection(t, srv, ldapLDAPS), false, "")
	img := regtest.RandomImage(t, 1, 8<<10)
	if err := r.push(t, "team/app", img, &authn.Basic{Username: "alice", Password: "alice-secret"}, nil); err != nil {
		t.Fatal(err)
	}
	d, err := img.Digest()
	if err != nil {
		t.Fatal(err)
	}
	t.Run("crane", func(t *testing.T) {
		crane := clitool.Path(t, "crane")
		alice := clitool.NewSession(t)
		alice.Run(t, crane, "auth", "login", r.Addr, "-u", "alice", "-p", "alice-secret")
		if got := strings.TrimSpace(string(alice.Run(t, crane, "digest", "--insecure", r.Addr+"/team/app:v1"))); got != d.String() {
			t.Errorf("crane digest as alice: %s, want %s", got, d)
		}
		alice.Run(t, crane, "copy", "--insecure", r.Addr+"/team/app:v1", r.Addr+"/other/copy:v1")
		bob := clitool.NewSession(t)
		bob.Run(t, crane, "auth", "login", r.Addr, "-u", "bob", "-p", "bob-secret")
		bob.Run(t, crane, "digest", "--insecure", r.Addr+"/team/app:v1")
		if out := bob.Fail(t, crane, "copy", "--insecure", r.Addr+"/team/app:v1", r.Addr+"/team/bob:v1"); !strings.Contains(out, "DENIED") {
			t.Errorf("crane copy by bob (readers: pull only): want DENIED, got:\n%s", out)
		}
		wrong := clitool.NewSession(t)
		wrong.Run(t, crane, "auth", "login", r.Addr, "-u", "bob", "-p", "nope")
		if out := wrong.Fail(t, crane, "digest", "--insecure", r.Addr+"/team/app:v1"); !strings.Contains(out, "UNAUTHORIZED") {
			t.Errorf("crane with a wrong password: want UNAUTHORIZED, got:\n%s", out)
		}
	})
	t.Run("skopeo", func(t *testing.T) {
		skopeo := clitool.Path(t, "skopeo")
		e := clitool.NewSession(t)
		ref := "docker://" + r.Addr + "/team/app:v1"
		out := string(e.Run(t, skopeo, "--insecure-policy", "inspect", "--raw", "--tls-verify=false", "--creds", "bob:bob-secret", ref))
		if !strings.Contains(out, "schemaVersion") {
			t.Errorf("skopeo inspect as bob: %s", out)
		}
		e.Fail(t, skopeo, "--insecure-policy", "inspect", "--raw", "--tls-verify=false", "--creds", "carol:carol-secret", ref)
		e.Fail(t, skopeo, "--insecure-policy", "inspect", "--raw", "--tls-verify=false", "--creds", "bob:nope", ref)
		e.Run(t, skopeo, "login", "--tls-verify=false", "-u", "bob", "-p", "bob-secret", r.Addr)
		e.Run(t, skopeo, "--insecure-policy", "inspect", "--raw", "--tls-verify=false", ref)
	})
	t.Run("podman", func(t *testing.T) {
		podman := clitool.Path(t, "podman")
		e := clitool.NewSession(t)
		e.Run(t, podman, "login", "--tls-verify=false", "-u", "bob", "-p", "bob-secret", r.Addr)
		if out := e.Fail(t, podman, "login", "--tls-verify=false", "-u", "bob", "-p", "nope", r.Addr); !strings.Contains(strings.ToLower(out), "unauthorized") && !strings.Contains(strings.ToLower(out), "invalid") {
			t.Errorf("podman login with a wrong password: want a refusal naming it, got:\n%s", out)
		}
	})
}

// TestLDAPConfigCheck: `cairn config check` accepts auth.ldap alone, and
// stops on a bind password file that does not read.
func TestLDAPConfigCheck(t *testing.T) {
	t.Parallel()
	srv := testenv.LDAPServer(t)
	section := ldapSection(t, srv, ldapStartTLS)
	ok := cairnproc.WriteConfig(t, "auth:\n"+section+"  tokenservice:\n    service: "+service+"\n    key: "+filepath.Join(t.TempDir(), "key.pem")+"\n"+ldapPolicy)
	if out, err := exec.CommandContext(t.Context(), cairnproc.Binary(t), "config", "check", ok).CombinedOutput(); err != nil {
		t.Errorf("config check of auth.ldap alone: %v\n%s", err, out)
	}
	bad := cairnproc.WriteConfig(t, "auth:\n"+strings.Replace(section, "bindpasswordfile: ", "bindpasswordfile: /nonexistent", 1))
	out, err := exec.CommandContext(t.Context(), cairnproc.Binary(t), "config", "check", bad).CombinedOutput()
	if err == nil || !strings.Contains(string(out), "auth.ldap.bindpasswordfile") {
		t.Errorf("config check with a missing bind password file: %v, want an error naming auth.ldap.bindpasswordfile:\n%s", err, out)
	}
}

// TestLDAPFailedLoginsLimited: directory logins count against the same
// per-address limit: with a burst of 3, the first 3 failures (a wrong
// password, an unknown name, filter syntax) are 401, then even the right
// password is 429.
func TestLDAPFailedLoginsLimited(t *testing.T) {
	t.Parallel()
	srv := testenv.LDAPServer(t)
	r := startLDAP(t, ldapSection(t, srv, ldapPlain), false, "  failedlogins:\n    burst: 3\n    perminute: 0.001\n")
	q := scopeQuery("repository:team/app:pull")
	if s, _ := r.token(t, "bob", "bob-secret", q); s != 200 {
		t.Fatalf("right password: %d", s)
	}
	var got []int
	for _, c := range [][2]string{{"bob", "nope"}, {"mallory", "x"}, {"*", "x"}, {"bob", "nope"}, {"bob", "bob-secret"}} {
		s, _ := r.token(t, c[0], c[1], q)
		got = append(got, s)
	}
	got = append(got, r.basic(t, http.MethodGet, "/v2/", "bob", "bob-secret").Status)
	if want := []int{401, 401, 401, 429, 429, 429}; !slices.Equal(got, want) {
		t.Errorf("statuses %v, want %v", got, want)
	}
}

// TestLDAPMountWithoutFrom: the earlier hardening holds for directory
// users too: a mount that names no source repository finds only what the
// caller may pull. alice (developers: push in team/**) cannot mount a
// blob that only carol may pull (vault/**), with Basic or with a token;
// it is a plain upload (202), and the blob is not in team/copy after;
// carol, who may pull it, mounts it with from.
func TestLDAPMountWithoutFrom(t *testing.T) {
	t.Parallel()
	srv := testenv.LDAPServer(t)
	vault := "      \"vault/**\":\n        policies:\n          - users: [carol]\n            actions: [pull, push]\n"
	for _, basic := range []bool{true, false} {
		r := startLDAP(t, ldapSection(t, srv, ldapStartTLS), basic, vault)
		img := regtest.RandomImage(t, 1, 8<<10)
		if err := r.push(t, "vault/x", img, &authn.Basic{Username: "carol", Password: "carol-secret"}, nil); err != nil {
			t.Fatal(err)
		}
		layer := firstLayer(t, img)
		mount := "/v2/team/copy/blobs/uploads/?mount=" + layer.String()
		var resp regtest.Response
		if basic {
			resp = r.basic(t, http.MethodPost, mount, "alice", "alice-secret")
		} else {
			s, tok := r.token(t, "alice", "alice-secret", scopeQuery("repository:team/copy:pull,push"))
			if s != 200 {
				t.Fatalf("token for alice: %d", s)
			}
			resp = r.bearer(t, http.MethodPost, mount, tok.Token)
		}
		if resp.Status != http.StatusAccepted {
			t.Errorf("basic %v: alice's mount without from of a blob only carol may pull: %v, want 202 (a plain upload)", basic, resp)
		}
		if resp := r.basic(t, http.MethodHead, "/v2/team/copy/blobs/"+layer.String(), "alice", "alice-secret"); resp.Status != 404 {
			t.Errorf("basic %v: the blob in team/copy after the refused mount: %v, want 404", basic, resp)
		}
		// With pull on the holder, named by from, the directory user mounts.
		if resp := r.basic(t, http.MethodPost, "/v2/vault/y/blobs/uploads/?mount="+layer.String()+"&from=vault/x", "carol", "carol-secret"); resp.Status != http.StatusCreated {
			t.Errorf("basic %v: carol's mount from vault/x: %v, want 201", basic, resp)
		}
	}
}
