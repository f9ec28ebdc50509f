package auth

import (
	"context"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-containerregistry/pkg/authn"
	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/v1/remote"

	"github.com/cairn-registry/cairn/internal/testutil/cairnproc"
	"github.com/cairn-registry/cairn/internal/testutil/clitool"
	"github.com/cairn-registry/cairn/internal/testutil/htpasswdtest"
	"github.com/cairn-registry/cairn/internal/testutil/regtest"
)

const htpasswdRealm = "cairn test realm"

func htpasswdConfig(path string, extra string) string {
	return "auth:\n  htpasswd:\n    realm: " + htpasswdRealm + "\n    path: " + path + "\n" + extra
}

// pushImage pushes img to ref with go-containerregistry, as user.
func pushImage(t *testing.T, ref string, img *testImage, auth authn.Authenticator, opts ...remote.Option) {
	t.Helper()
	r, err := name.ParseReference(ref, name.Insecure)
	if err != nil {
		t.Fatal(err)
	}
	if err := remote.Write(r, img.img, append([]remote.Option{remote.WithAuth(auth), remote.WithContext(t.Context())}, opts...)...); err != nil {
		t.Fatalf("push %s: %v", ref, err)
	}
}

func TestHtpasswdCrane(t *testing.T) {
	t.Parallel()
	crane := clitool.Path(t, "crane")
	srv := startConfig(t, htpasswdConfig(htpasswd(t, "alice", "wonderland", "bob", "builder"), ""))
	img := newImage(t, 3)
	ref := srv.Addr + "/team/app:v1"

	alice := clitool.NewSession(t)
	alice.Run(t, crane, "auth", "login", srv.Addr, "-u", "alice", "-p", "wonderland")
	out := string(alice.Run(t, crane, "push", "--insecure", img.dir, ref))
	if !strings.Contains(out, img.digest.String()) {
		t.Errorf("crane push printed %q, want the digest %s", out, img.digest)
	}
	if got := strings.TrimSpace(string(alice.Run(t, crane, "digest", "--insecure", ref))); got != img.digest.String() {
		t.Errorf("crane digest = %s, want %s", got, img.digest)
	}
	pulled := filepath.Join(t.TempDir(), "pulled")
	alice.Run(t, crane, "pull", "--insecure", "--format=oci", ref, pulled)
	if got := ociDigest(t, pulled); got != img.digest.String() {
		t.Errorf("pulled %s, want %s", got, img.digest)
	}
	if out := string(alice.Run(t, crane, "catalog", "--insecure", srv.Addr)); !strings.Contains(out, "team/app") {
		t.Errorf("crane catalog = %q, want team/app", out)
	}
	// Another user of the same file can pull too.
	bob := clitool.NewSession(t)
	bob.Run(t, crane, "auth", "login", srv.Addr, "-u", "bob", "-p", "builder")
	bob.Run(t, crane, "manifest", "--insecure", ref)

	anonymous := clitool.NewSession(t)
	if out := anonymous.Fail(t, crane, "digest", "--insecure", ref); !strings.Contains(out, "UNAUTHORIZED") {
		t.Errorf("crane digest without credentials: want UNAUTHORIZED, got:\n%s", out)
	}
	anonymous.Fail(t, crane, "push", "--insecure", img.dir, srv.Addr+"/team/anonymous:v1")

	wrong := clitool.NewSession(t)
	wrong.Run(t, crane, "auth", "login", srv.Addr, "-u", "alice", "-p", "looking-glass")
	if out := wrong.Fail(t, crane, "digest", "--insecure", ref); !strings.Contains(out, "UNAUTHORIZED") {
		t.Errorf("crane digest with a wrong password: want UNAUTHORIZED, got:\n%s", out)
	}
	wrong.Fail(t, crane, "push", "--insecure", img.dir, srv.Addr+"/team/wrong:v1")

	// The refused pushes left nothing behind.
	for _, repo := range []string{"team/anonymous", "team/wrong"} {
		out := alice.Fail(t, crane, "ls", "--insecure", srv.Addr+"/"+repo)
		if !strings.Contains(out, "NAME_UNKNOWN") {
			t.Errorf("crane ls %s after a refused push: want NAME_UNKNOWN, got:\n%s", repo, out)
		}
	}
	if _, err := os.Stat(filepath.Join(srv.Root, "docker/registry/v2/repositories/team/anonymous")); !os.IsNotExist(err) {
		t.Errorf("a refused push created its repository directory: %v", err)
	}
}

func TestHtpasswdSkopeo(t *testing.T) {
	t.Parallel()
	s, fail := skopeoSession(t)
	srv := startConfig(t, htpasswdConfig(htpasswd(t, "alice", "wonderland"), ""))
	img := newImage(t, 2)
	ref := "docker://" + srv.Addr + "/team/skopeo:v1"

	skopeoRoundTrip(t, s, img, ref, "alice:wonderland", "alice:wonderland")
	if tags := s("list-tags", "--tls-verify=false", "--creds", "alice:wonderland", ref[:strings.LastIndex(ref, ":")]); !strings.Contains(tags, `"v1"`) {
		t.Errorf("skopeo list-tags = %s", tags)
	}

	if o := fail("inspect", "--raw", "--tls-verify=false", ref); !strings.Contains(strings.ToLower(o), "unauthorized") {
		t.Errorf("skopeo inspect without credentials: want unauthorized, got:\n%s", o)
	}
	fail("inspect", "--raw", "--tls-verify=false", "--creds", "alice:nope", ref)
	fail("copy", "--dest-tls-verify=false", "oci:"+img.dir+":v1", "docker://"+srv.Addr+"/team/nocreds:v1")
}

// TestHtpasswdEveryRoute checks the refusal of each API route over raw
// HTTP: 401 with the Basic challenge and an UNAUTHORIZED body, the same
// for repositories that exist and those that do not, and no change.
func TestHtpasswdEveryRoute(t *testing.T) {
	t.Parallel()
	srv := startConfig(t, htpasswdConfig(htpasswd(t, "alice", "wonderland"), ""))
	img := newImage(t, 1)
	alice := &authn.Basic{Username: "alice", Password: "wonderland"}
	pushImage(t, srv.Addr+"/team/app:v1", img, alice)
	m, err := img.img.Manifest()
	if err != nil {
		t.Fatal(err)
	}
	layer := m.Layers[0].Digest.String()
	manifest := img.digest.String()

	uploadsDir := filepath.Join(srv.Root, "docker/registry/v2/repositories/team/app/_uploads")
	uploadsBefore, _ := os.ReadDir(uploadsDir)

	hc := &http.Client{Timeout: 30 * time.Second}
	defer hc.CloseIdleConnections()
	routes := []struct{ method, path string }{
		{http.MethodGet, "/v2/"},
		{http.MethodGet, "/v2/_catalog"},
		{http.MethodGet, "/v2/team/app/tags/list"},
		{http.MethodGet, "/v2/team/app/manifests/v1"},
		{http.MethodHead, "/v2/team/app/manifests/v1"},
		{http.MethodPut, "/v2/team/app/manifests/v2"},
		{http.MethodDelete, "/v2/team/app/manifests/" + manifest},
		{http.MethodGet, "/v2/team/app/blobs/" + layer},
		{http.MethodHead, "/v2/team/app/blobs/" + layer},
		{http.MethodDelete, "/v2/team/app/blobs/" + layer},
		{http.MethodGet, "/v2/team/app/referrers/" + manifest},
		{http.MethodPost, "/v2/team/app/blobs/uploads/"},
		{http.MethodPost, "/v2/team/new/blobs/uploads/?mount=" + layer + "&from=team/app"},
		{http.MethodPatch, "/v2/team/app/blobs/uploads/some-id"},
		{http.MethodPut, "/v2/team/app/blobs/uploads/some-id?digest=" + layer},
		{http.MethodGet, "/v2/team/app/blobs/uploads/some-id"},
		{http.MethodDelete, "/v2/team/app/blobs/uploads/some-id"},
		// Repositories that do not exist are refused the same way.
		{http.MethodGet, "/v2/nobody/here/tags/list"},
		{http.MethodGet, "/v2/nobody/here/manifests/latest"},
		// So are paths that name no endpoint and invalid names.
		{http.MethodGet, "/v2/team/app/nonsense/x"},
		{http.MethodGet, "/v2/Invalid_Name/tags/list"},
	}
	creds := []struct {
		name string
		set  func(*http.Request)
	}{
		{"no credentials", func(*http.Request) {}},
		{"wrong password", func(r *http.Request) { r.SetBasicAuth("alice", "looking-glass") }},
		{"unknown user", func(r *http.Request) { r.SetBasicAuth("mallory", "wonderland") }},
		{"bearer token", func(r *http.Request) { r.Header.Set("Authorization", "Bearer abc.def.ghi") }},
	}
	for _, c := range creds {
		for _, rt := range routes {
			req, err := http.NewRequest(rt.method, srv.URL+rt.path, strings.NewReader(`{"not":"empty"}`))
			if err != nil {
				t.Fatal(err)
			}
			c.set(req)
			r := regtest.Send(t, hc, req)
			if r.Status != http.StatusUnauthorized || r.Header.Get("WWW-Authenticate") != `Basic realm="`+htpasswdRealm+`"` {
				t.Errorf("%s: %s %s = %v, want 401 with the Basic challenge", c.name, rt.method, rt.path, r)
			}
			if rt.method != http.MethodHead && r.ErrorCode() != "UNAUTHORIZED" {
				t.Errorf("%s: %s %s body %q, want UNAUTHORIZED", c.name, rt.method, rt.path, string(r.Body))
			}
		}
	}

	// Nothing the refused requests asked for happened.
	authed := func(method, path string) regtest.Response {
		req, err := http.NewRequest(method, srv.URL+path, nil)
		if err != nil {
			t.Fatal(err)
		}
		req.SetBasicAuth("alice", "wonderland")
		return regtest.Send(t, hc, req)
	}
	if r := authed(http.MethodGet, "/v2/team/app/manifests/"+manifest); r.Status != 200 {
		t.Errorf("manifest after refused DELETEs: %v", r)
	}
	if r := authed(http.MethodHead, "/v2/team/app/blobs/"+layer); r.Status != 200 {
		t.Errorf("blob after refused DELETEs: %v", r)
	}
	if r := authed(http.MethodGet, "/v2/team/app/manifests/v2"); r.Status != 404 {
		t.Errorf("tag v2 after a refused PUT: %v", r)
	}
	if r := authed(http.MethodHead, "/v2/team/new/blobs/"+layer); r.Status != 404 {
		t.Errorf("blob in team/new after a refused mount: %v", r)
	}
	if uploadsAfter, _ := os.ReadDir(uploadsDir); len(uploadsAfter) != len(uploadsBefore) {
		t.Errorf("refused POSTs opened upload sessions: %d in %s, %d before", len(uploadsAfter), uploadsDir, len(uploadsBefore))
	}
	if _, err := os.Stat(filepath.Join(srv.Root, "docker/registry/v2/repositories/team/new")); !os.IsNotExist(err) {
		t.Errorf("a refused mount created its target repository: %v", err)
	}
	// With credentials, the same routes answer as the API does.
	if r := authed(http.MethodGet, "/v2/"); r.Status != 200 {
		t.Errorf("GET /v2/ as alice: %v", r)
	}
	if r := authed(http.MethodGet, "/v2/nobody/here/tags/list"); r.Status != 404 || r.ErrorCode() != "NAME_UNKNOWN" {
		t.Errorf("tags of a missing repository as alice: %v", r)
	}
	if r := authed(http.MethodGet, "/v2/_catalog"); r.Status != 200 || !strings.Contains(string(r.Body), "team/app") {
		t.Errorf("catalog as alice: %v", r)
	}
}

// TestHtpasswdUnknownUserTiming: a refusal takes as long for an unknown
// user as for a known user's wrong password, with a file at the cost 5
// that htpasswd -B writes (an unknown user once took ~22x longer, against
// a dummy hash at cost 10). Not parallel: the package's other tests wait
// while it measures.
func TestHtpasswdUnknownUserTiming(t *testing.T) {
	srv := startConfig(t, htpasswdConfig(htpasswdtest.File(t, 5, "alice", "wonderland", "bob", "builder"), ""))
	hc := &http.Client{Timeout: 30 * time.Second}
	defer hc.CloseIdleConnections()
	refusal := func(user, pass string) time.Duration { return regtest.RefusalTime(t, hc, srv.URL+"/v2/", user, pass) }
	refusal("alice", "warm-up") // opens the connection the samples reuse
	regtest.CheckSameCost(t, "htpasswd users", 7,
		func() time.Duration { return refusal("mallory", "wonderland") },
		func() time.Duration { return refusal("alice", "looking-glass") })
}

func TestAnonymousPull(t *testing.T) {
	t.Parallel()
	srv := startConfig(t, htpasswdConfig(htpasswd(t, "alice", "wonderland"), "  anonymous:\n    pull: true\n"))
	img := newImage(t, 2)
	pushImage(t, srv.Addr+"/public/app:v1", img, &authn.Basic{Username: "alice", Password: "wonderland"})
	m, err := img.img.Manifest()
	if err != nil {
		t.Fatal(err)
	}
	layer := m.Layers[0].Digest.String()

	hc := &http.Client{Timeout: 30 * time.Second}
	defer hc.CloseIdleConnections()
	cases := []struct {
		method, path string
		hdr          []string
		status       int
	}{
		{http.MethodGet, "/v2/public/app/manifests/v1", nil, 200},
		{http.MethodHead, "/v2/public/app/manifests/v1", nil, 200},
		{http.MethodGet, "/v2/public/app/blobs/" + layer, nil, 200},
		{http.MethodGet, "/v2/public/app/tags/list", nil, 200},
		{http.MethodGet, "/v2/public/missing/tags/list", nil, 404},
		// Clients discover authentication from /v2/: it still challenges.
		{http.MethodGet, "/v2/", nil, 401},
		{http.MethodGet, "/v2/_catalog", nil, 401},
		{http.MethodPost, "/v2/public/app/blobs/uploads/", nil, 401},
		{http.MethodPut, "/v2/public/app/manifests/v2", nil, 401},
		{http.MethodDelete, "/v2/public/app/manifests/v1", nil, 401},
		// A wrong password is refused, not downgraded to anonymous.
		{http.MethodGet, "/v2/public/app/manifests/v1", []string{"Authorization", "Basic YWxpY2U6bm9wZQ=="}, 401},
	}
	for _, c := range cases {
		r := regtest.Do(t, hc, c.method, srv.URL+c.path, nil, c.hdr...)
		if r.Status != c.status {
			t.Errorf("%s %s: %v, want %d", c.method, c.path, r, c.status)
		}
	}

	if crane, err := exec.LookPath("crane"); err == nil {
		e := clitool.NewSession(t)
		pulled := filepath.Join(t.TempDir(), "pulled")
		e.Run(t, crane, "pull", "--insecure", "--format=oci", srv.Addr+"/public/app:v1", pulled)
		if got := ociDigest(t, pulled); got != img.digest.String() {
			t.Errorf("anonymous crane pull got %s, want %s", got, img.digest)
		}
		e.Fail(t, crane, "push", "--insecure", img.dir, srv.Addr+"/public/app:anonymous")
	} else if os.Getenv("CAIRN_REQUIRE_CLIENTS") == "1" {
		t.Fatalf("crane not found: %v", err)
	}
}

// TestStartupRefusesUnusableAuth: an htpasswd file with anything but bcrypt,
// or a token section whose keys cannot be read, stops start-up with a
// message naming the key and the problem.
func TestStartupRefusesUnusableAuth(t *testing.T) {
	t.Parallel()
	md5 := writeFile(t, "htpasswd", "alice:$apr1$Wk3bOemC$jZ6TFpSGiKX6lYc9yLkMA1\n")
	cases := []struct{ name, cfg, want string }{
		{"md5 htpasswd", htpasswdConfig(md5, ""), `config: auth.htpasswd.path: ` + md5 + `: line 1: user "alice" has a MD5 (apr1) hash; cairn accepts only bcrypt`},
		{"missing htpasswd", htpasswdConfig("/nonexistent/htpasswd", ""), "config: auth.htpasswd.path: open /nonexistent/htpasswd: no such file or directory"},
		{"token without readable keys", "auth:\n  token:\n    realm: http://x/token\n    service: s\n    issuer: i\n    rootcertbundle: /nonexistent/ca.pem\n",
			"config: auth.token: rootcertbundle: open /nonexistent/ca.pem"},
	}
	for _, c := range cases {
		ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
		cmd := exec.CommandContext(ctx, cairnproc.Binary(t), "serve", "--addr", cairnproc.FreeAddr(t), "--root", t.TempDir(),
			"--config", cairnproc.WriteConfig(t, c.cfg))
		out, err := cmd.CombinedOutput()
		cancel()
		if err == nil || cmd.ProcessState.ExitCode() != 1 || !strings.Contains(string(out), c.want) {
			t.Errorf("%s: exit %v, output:\n%s\nwant exit 1 and %q", c.name, err, out, c.want)
		}
	}
}
