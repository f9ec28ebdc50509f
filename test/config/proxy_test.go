package config

import (
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-containerregistry/pkg/authn"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"golang.org/x/crypto/bcrypt"

	"github.com/cairn-registry/cairn/internal/testutil/regtest"
)

// The proxy section makes cairn a pull-through cache: images come from the
// remote (authenticated with proxy.username and password, or with a
// credential helper), byte for byte; a moved tag is followed; the cache
// serves what it holds once the remote is gone; pushes are UNSUPPORTED.
func TestPullThroughCache(t *testing.T) {
	dir := t.TempDir()
	hash, err := bcrypt.GenerateFromPassword([]byte("upstream-secret"), bcrypt.MinCost)
	if err != nil {
		t.Fatal(err)
	}
	htpasswd := filepath.Join(dir, "htpasswd")
	if err := os.WriteFile(htpasswd, []byte("puller:"+string(hash)+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	upstream := serve(t, "auth:\n  htpasswd:\n    realm: upstream\n    path: "+htpasswd+"\n")
	creds := remote.WithAuth(&authn.Basic{Username: "puller", Password: "upstream-secret"})
	img1, img2 := regtest.RandomImage(t, 2, 2048), regtest.RandomImage(t, 1, 2048)
	if err := remote.Write(regtest.Ref(t, upstream.Addr, "lib/app:v1"), img1, creds); err != nil {
		t.Fatal(err)
	}
	d1, _ := img1.Digest()
	d2, _ := img2.Digest()

	cache := serve(t, fmt.Sprintf(`proxy:
  remoteurl: %s
  username: puller
  password: upstream-secret
  ttl: 168h
`, upstream.URL))
	if err := regtest.CheckPull(t.Context(), regtest.Ref(t, cache.Addr, "lib/app:v1"), d1.String()); err != nil {
		t.Fatalf("first pull through the cache: %v", err)
	}

	// The tag moves upstream: the cache follows it.
	if err := remote.Write(regtest.Ref(t, upstream.Addr, "lib/app:v1"), img2, creds); err != nil {
		t.Fatal(err)
	}
	if err := regtest.CheckPull(t.Context(), regtest.Ref(t, cache.Addr, "lib/app:v1"), d2.String()); err != nil {
		t.Fatalf("pull after the tag moved: %v", err)
	}

	// With the remote gone, what the cache holds is still served.
	upstream.Stop()
	if err := regtest.CheckPull(t.Context(), regtest.Ref(t, cache.Addr, "lib/app:v1"), d2.String()); err != nil {
		t.Errorf("cached tag with the remote gone: %v", err)
	}
	if err := regtest.CheckPull(t.Context(), regtest.Ref(t, cache.Addr, "lib/app@"+d1.String()), d1.String()); err != nil {
		t.Errorf("cached digest with the remote gone: %v", err)
	}
	if r := regtest.Do(t, hc, http.MethodGet, cache.URL+"/v2/lib/never/manifests/v1", nil, "Accept", regtest.ManifestAccept); r.Status != http.StatusNotFound {
		t.Errorf("a manifest neither has: %v", r)
	}

	// Writes are refused.
	for _, req := range []struct{ method, path string }{
		{http.MethodPost, "/v2/lib/app/blobs/uploads/"},
		{http.MethodPut, "/v2/lib/app/manifests/v2"},
		{http.MethodDelete, "/v2/lib/app/manifests/" + d1.String()},
	} {
		r := regtest.Do(t, hc, req.method, cache.URL+req.path, []byte("{}"))
		if r.Status != http.StatusMethodNotAllowed || r.ErrorCode() != "UNSUPPORTED" {
			t.Errorf("%v: want 405 UNSUPPORTED", r)
		}
	}
}

// proxy.exec asks a Docker credential helper for the remote's credentials.
func TestPullThroughCacheCredentialHelper(t *testing.T) {
	dir := t.TempDir()
	hash, _ := bcrypt.GenerateFromPassword([]byte("from-helper"), bcrypt.MinCost)
	htpasswd := filepath.Join(dir, "htpasswd")
	if err := os.WriteFile(htpasswd, []byte("helped:"+string(hash)+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	upstream := serve(t, "auth:\n  htpasswd:\n    realm: upstream\n    path: "+htpasswd+"\n")
	img := regtest.RandomImage(t, 1, 1024)
	if err := remote.Write(regtest.Ref(t, upstream.Addr, "lib/helped:v1"), img, remote.WithAuth(&authn.Basic{Username: "helped", Password: "from-helper"})); err != nil {
		t.Fatal(err)
	}
	helper := filepath.Join(dir, "docker-credential-test")
	script := "#!/bin/sh\nread server\n[ \"$1\" = get ] && [ \"$server\" = " + upstream.Addr + " ] || exit 1\n" +
		`echo '{"ServerURL":"'$server'","Username":"helped","Secret":"from-helper"}'` + "\n"
	if err := os.WriteFile(helper, []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	cache := serve(t, fmt.Sprintf("proxy:\n  remoteurl: %s\n  exec:\n    command: %s\n    lifetime: 1h\n", upstream.URL, helper))
	d, _ := img.Digest()
	if err := regtest.CheckPull(t.Context(), regtest.Ref(t, cache.Addr, "lib/helped:v1"), d.String()); err != nil {
		t.Errorf("pull with the helper's credentials: %v", err)
	}
}

// proxy.ttl: what the cache fetched is deleted once it is older than the
// TTL, so a pull with the remote gone no longer finds it.
func TestPullThroughCacheTTL(t *testing.T) {
	upstream := serve(t, "")
	img := regtest.RandomImage(t, 1, 1024)
	if err := remote.Write(regtest.Ref(t, upstream.Addr, "lib/short:v1"), img); err != nil {
		t.Fatal(err)
	}
	d, _ := img.Digest()
	// The TTL leaves the pull below seconds to spare before anything it
	// fetched may expire.
	cache := serve(t, fmt.Sprintf("proxy:\n  remoteurl: %s\n  ttl: 5s\n", upstream.URL))
	if err := regtest.CheckPull(t.Context(), regtest.Ref(t, cache.Addr, "lib/short:v1"), d.String()); err != nil {
		t.Fatal(err)
	}
	upstream.Stop()
	if r := regtest.Do(t, hc, http.MethodGet, cache.URL+"/v2/lib/short/tags/list", nil); r.Status != http.StatusOK {
		t.Fatalf("cached tags: %v", r)
	}
	eventually(t, "the cached image to expire", func() (bool, string) {
		r := regtest.Do(t, hc, http.MethodGet, cache.URL+"/v2/lib/short/manifests/"+d.String(), nil, "Accept", regtest.ManifestAccept)
		tags := regtest.Do(t, hc, http.MethodGet, cache.URL+"/v2/lib/short/tags/list", nil)
		return r.Status == http.StatusNotFound && !strings.Contains(string(tags.Body), `"v1"`), status(r) + " " + string(tags.Body)
	})
}
