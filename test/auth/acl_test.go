package auth

import (
	"net/http"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-containerregistry/pkg/authn"

	"github.com/cairn-registry/cairn/internal/testutil/clitool"
	"github.com/cairn-registry/cairn/internal/testutil/regtest"
)

// aclConfig: alice administers; bob and carol (group devs) push to team/**,
// which any user may pull; team/secret* is carol's alone; anyone may pull
// public/**; nothing else matches, so only alice reaches it.
const aclConfig = `  accesscontrol:
    groups:
      devs: {users: [bob, carol]}
    adminpolicy: {users: [alice], actions: ["*"]}
    repositories:
      "team/**":
        defaultpolicy: [pull]
        policies:
          - {groups: [devs], actions: [pull, push]}
      "team/secret*":
        policies:
          - {users: [carol], actions: [pull, push, delete]}
      "public/**":
        anonymouspolicy: [pull]
`

func startACL(t *testing.T) string {
	t.Helper()
	path := htpasswd(t, "alice", "admin-pw", "bob", "bob-pw", "carol", "carol-pw", "dave", "dave-pw")
	return startConfig(t, htpasswdConfig(path, aclConfig)).Addr
}

// TestAccessControlCrane: each rule's allowed and refused actions through
// crane, with users, a group, the default and anonymous policies.
func TestAccessControlCrane(t *testing.T) {
	t.Parallel()
	crane := clitool.Path(t, "crane")
	addr := startACL(t)
	img := newImage(t, 2)
	login := func(user string) *clitool.Session {
		s := clitool.NewSession(t)
		if user != "" {
			s.Run(t, crane, "auth", "login", addr, "-u", user, "-p", user+"-pw")
		}
		return s
	}
	alice, bob, carol, dave, anon := login(""), login("bob"), login("carol"), login("dave"), login("")
	alice.Run(t, crane, "auth", "login", addr, "-u", "alice", "-p", "admin-pw")

	// A group member pushes to team/**; any user pulls it; others may not push.
	bob.Run(t, crane, "push", "--insecure", img.dir, addr+"/team/app:v1")
	pulled := filepath.Join(t.TempDir(), "pulled")
	dave.Run(t, crane, "pull", "--insecure", "--format=oci", addr+"/team/app:v1", pulled)
	if got := ociDigest(t, pulled); got != img.digest.String() {
		t.Errorf("dave pulled %s, want %s", got, img.digest)
	}
	denied(t, dave.Fail(t, crane, "push", "--insecure", img.dir, addr+"/team/app:dave"))
	denied(t, dave.Fail(t, crane, "tag", "--insecure", addr+"/team/app:v1", "dave"))
	unauthorized(t, anon.Fail(t, crane, "manifest", "--insecure", addr+"/team/app:v1"))

	// team/secret* is carol's: bob, a dev, can neither push nor pull it,
	// whether it exists or not, and learns nothing from the refusal.
	carol.Run(t, crane, "push", "--insecure", img.dir, addr+"/team/secrets:v1")
	for _, repo := range []string{"team/secrets", "team/secret-missing"} {
		denied(t, bob.Fail(t, crane, "manifest", "--insecure", addr+"/"+repo+":v1"))
		denied(t, bob.Fail(t, crane, "push", "--insecure", img.dir, addr+"/"+repo+":bob"))
	}
	// Nor can a cross-repository mount take its blobs: bob's push of the
	// same image to team/app2 mounting from team/secrets uploads instead.
	m, err := img.img.Manifest()
	if err != nil {
		t.Fatal(err)
	}
	hc := &http.Client{Timeout: 60 * time.Second}
	defer hc.CloseIdleConnections()
	mount := regtest.Do(t, hc, http.MethodPost, "http://"+addr+"/v2/team/app2/blobs/uploads/?mount="+m.Layers[0].Digest.String()+"&from=team/secrets", nil,
		"Authorization", basic("bob", "bob-pw"))
	if mount.Status != http.StatusAccepted {
		t.Errorf("bob's mount from team/secrets: %v, want 202 (a plain upload)", mount)
	}
	// carol deletes in her repository; bob may not delete in team/app.
	carol.Run(t, crane, "delete", "--insecure", addr+"/team/secrets@"+img.digest.String())
	denied(t, bob.Fail(t, crane, "delete", "--insecure", addr+"/team/app@"+img.digest.String()))

	// public/**: anyone pulls, without credentials; only alice pushes (no
	// policy names anyone else) and lists the catalog.
	alice.Run(t, crane, "push", "--insecure", img.dir, addr+"/public/base:v1")
	anon.Run(t, crane, "manifest", "--insecure", addr+"/public/base:v1")
	dave.Run(t, crane, "manifest", "--insecure", addr+"/public/base:v1")
	unauthorized(t, anon.Fail(t, crane, "push", "--insecure", img.dir, addr+"/public/base:anon"))
	denied(t, bob.Fail(t, crane, "push", "--insecure", img.dir, addr+"/public/base:bob"))
	if out := string(alice.Run(t, crane, "catalog", "--insecure", addr)); !strings.Contains(out, "team/app") || !strings.Contains(out, "public/base") {
		t.Errorf("alice's catalog = %q", out)
	}
	denied(t, bob.Fail(t, crane, "catalog", "--insecure", addr))

	// A repository no pattern matches is alice's alone.
	alice.Run(t, crane, "push", "--insecure", img.dir, addr+"/ops/tools:v1")
	denied(t, carol.Fail(t, crane, "manifest", "--insecure", addr+"/ops/tools:v1"))
	unauthorized(t, anon.Fail(t, crane, "manifest", "--insecure", addr+"/ops/tools:v1"))
}

// TestAccessControlSkopeo: the same rules through skopeo.
func TestAccessControlSkopeo(t *testing.T) {
	t.Parallel()
	s, fail := skopeoSession(t)
	addr := startACL(t)
	img := newImage(t, 2)
	skopeoRoundTrip(t, s, img, "docker://"+addr+"/team/skopeo:v1", "carol:carol-pw", "dave:dave-pw")
	if o := fail("copy", "--dest-tls-verify=false", "--dest-creds", "dave:dave-pw", "oci:"+img.dir+":v1", "docker://"+addr+"/team/skopeo:dave"); !strings.Contains(strings.ToLower(o), "denied") {
		t.Errorf("skopeo push by dave: want denied, got:\n%s", o)
	}
	if o := fail("inspect", "--raw", "--tls-verify=false", "--creds", "bob:bob-pw", "docker://"+addr+"/team/secrets:v1"); !strings.Contains(strings.ToLower(o), "denied") {
		t.Errorf("skopeo inspect by bob of team/secrets: want denied, got:\n%s", o)
	}
	s("copy", "--dest-tls-verify=false", "--dest-creds", "alice:admin-pw", "oci:"+img.dir+":v1", "docker://"+addr+"/public/skopeo:v1")
	out := filepath.Join(t.TempDir(), "out")
	s("copy", "--src-tls-verify=false", "--src-no-creds", "docker://"+addr+"/public/skopeo:v1", "oci:"+out+":v1")
	if got := ociDigest(t, out); got != img.digest.String() {
		t.Errorf("anonymous skopeo pull got %s, want %s", got, img.digest)
	}
}

// TestAccessControlRefusals: over raw HTTP, a refused user gets 403 DENIED
// and an anonymous caller 401 with the challenge, the same for a
// repository that exists and one that does not.
func TestAccessControlRefusals(t *testing.T) {
	t.Parallel()
	addr := startACL(t)
	img := newImage(t, 1)
	pushImage(t, addr+"/team/secret:v1", img, &authn.Basic{Username: "carol", Password: "carol-pw"})
	hc := &http.Client{Timeout: 30 * time.Second}
	defer hc.CloseIdleConnections()
	for _, repo := range []string{"team/secret", "team/secretx"} {
		for _, c := range []struct {
			method, path string
			hdr          []string
			status       int
			code         string
		}{
			{http.MethodGet, "/v2/" + repo + "/manifests/v1", []string{"Authorization", basic("bob", "bob-pw")}, 403, "DENIED"},
			{http.MethodGet, "/v2/" + repo + "/tags/list", []string{"Authorization", basic("dave", "dave-pw")}, 403, "DENIED"},
			{http.MethodPost, "/v2/" + repo + "/blobs/uploads/", []string{"Authorization", basic("bob", "bob-pw")}, 403, "DENIED"},
			{http.MethodGet, "/v2/" + repo + "/manifests/v1", nil, 401, "UNAUTHORIZED"},
		} {
			r := regtest.Do(t, hc, c.method, "http://"+addr+c.path, nil, c.hdr...)
			if r.Status != c.status || !strings.Contains(string(r.Body), c.code) {
				t.Errorf("%s %s: %v, want %d %s", c.method, c.path, r, c.status, c.code)
			}
			if c.status == 401 && !strings.HasPrefix(r.Header.Get("WWW-Authenticate"), "Basic ") {
				t.Errorf("%s %s: challenge %q", c.method, c.path, r.Header.Get("WWW-Authenticate"))
			}
		}
	}
}

func basic(user, pass string) string {
	r, _ := http.NewRequest(http.MethodGet, "/", nil)
	r.SetBasicAuth(user, pass)
	return r.Header.Get("Authorization")
}

// denied: the client reports a 403 (DENIED in the body, or the status
// alone where it asked with HEAD).
func denied(t *testing.T, out string) {
	t.Helper()
	if !strings.Contains(out, "DENIED") && !strings.Contains(out, "403 Forbidden") {
		t.Errorf("want DENIED, got:\n%s", out)
	}
}

func unauthorized(t *testing.T, out string) {
	t.Helper()
	if !strings.Contains(out, "UNAUTHORIZED") {
		t.Errorf("want UNAUTHORIZED, got:\n%s", out)
	}
}
