package redirect

import (
	"crypto/rand"
	"crypto/rsa"
	"crypto/x509"
	"encoding/pem"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/cairn-registry/cairn/internal/testutil/cairnproc"
)

// TestRedirectMiddleware: distribution's redirect middleware sends clients
// to baseurl + the storage path, whatever the driver. Here a plain file
// server over the filesystem root stands in for the CDN.
func TestRedirectMiddleware(t *testing.T) {
	t.Parallel()
	root := t.TempDir()
	cdn := httptest.NewServer(http.StripPrefix("/cdn", http.FileServer(http.Dir(root))))
	t.Cleanup(cdn.Close)
	srv := start(t, fmt.Sprintf("version: 0.1\nstorage:\n  filesystem:\n    rootdirectory: %s\n"+
		"middleware:\n  storage:\n    - name: redirect\n      options:\n        baseurl: %s/cdn/\n", root, cdn.URL))
	im := newImage(t, 6, 2)
	im.push(t, srv.Addr, repo+":v1")
	for d, b := range im.layers {
		loc := checkRedirected(t, srv.URL, repo, d, b, hostOf(t, cdn.URL))
		if want := cdn.URL + "/cdn/docker/registry/v2/blobs/sha256/" + d.Encoded()[:2] + "/" + d.Encoded() + "/data"; loc != want {
			t.Errorf("Location %s, want %s", loc, want)
		}
		checkHead(t, srv.URL, repo, d, len(b))
	}
	pullWithClients(t, srv.Addr, repo, "v1", im)
}

// TestCloudFront: the cloudfront middleware, on S3, redirects to its base
// URL and the object's key (rootdirectory included), signed. CloudFront
// itself is not reachable from a test; the signature is checked in
// internal/storage/middleware.
func TestCloudFront(t *testing.T) {
	t.Parallel()
	st := s3Store(t)
	srv := start(t, "version: 0.1\nstorage:\n"+st.section+cloudFrontSection(t))
	im := newImage(t, 7, 1)
	im.push(t, srv.Addr, repo+":v1")
	d := im.order[0]
	resp := do(t, noFollow, http.MethodGet, srv.URL+"/v2/"+repo+"/blobs/"+d.String())
	loc, err := url.Parse(resp.Header.Get("Location"))
	if resp.Status != http.StatusTemporaryRedirect || err != nil {
		t.Fatalf("GET blob: status %d, Location %q", resp.Status, resp.Header.Get("Location"))
	}
	want := "https://d111111abcdef8.cloudfront.net/registry/docker/registry/v2/blobs/sha256/" + d.Encoded()[:2] + "/" + d.Encoded() + "/data"
	if got := loc.Scheme + "://" + loc.Host + loc.Path; got != want {
		t.Errorf("Location %s, want %s", got, want)
	}
	q := loc.Query()
	if q.Get("Key-Pair-Id") != "K2JCJMDEHXQW5F" || q.Get("Signature") == "" || q.Get("Expires") == "" {
		t.Errorf("Location query %v lacks Expires, Signature or Key-Pair-Id", q)
	}
	checkHead(t, srv.URL, repo, d, len(im.layers[d]))
}

// TestCloudFrontNeedsS3: the cloudfront middleware maps paths to S3 keys,
// so another driver stops start-up with a one-line reason.
func TestCloudFrontNeedsS3(t *testing.T) {
	t.Parallel()
	cfg := cairnproc.WriteConfig(t, fmt.Sprintf("version: 0.1\nstorage:\n  filesystem:\n    rootdirectory: %s\n%s", t.TempDir(), cloudFrontSection(t)))
	cmd := exec.Command(cairnproc.Binary(t), "serve", "--addr", cairnproc.FreeAddr(t), "--config", cfg)
	done := make(chan struct{})
	var out []byte
	var err error
	go func() { out, err = cmd.CombinedOutput(); close(done) }()
	select {
	case <-done:
	case <-time.After(time.Minute):
		cmd.Process.Kill()
		<-done
		t.Fatalf("cairn serve did not stop:\n%s", out)
	}
	msg := strings.TrimSpace(string(out))
	if err == nil || !strings.Contains(msg, "middleware.storage[0] (cloudfront): needs the s3 storage driver, not filesystem") {
		t.Errorf("cairn serve: %v\n%s\nwant a failure naming the cloudfront middleware and the driver", err, msg)
	}
	if lines := strings.Split(msg, "\n"); len(lines) != 1 {
		t.Errorf("cairn serve printed %d lines, want one:\n%s", len(lines), msg)
	}
}

// cloudFrontSection is a middleware section with a fresh key.
func cloudFrontSection(t *testing.T) string {
	k, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		t.Fatal(err)
	}
	key := filepath.Join(t.TempDir(), "cloudfront.pem")
	if err := os.WriteFile(key, pem.EncodeToMemory(&pem.Block{Type: "RSA PRIVATE KEY", Bytes: x509.MarshalPKCS1PrivateKey(k)}), 0o600); err != nil {
		t.Fatal(err)
	}
	return fmt.Sprintf("middleware:\n  storage:\n    - name: cloudfront\n      options:\n        baseurl: https://d111111abcdef8.cloudfront.net/\n"+
		"        privatekey: %s\n        keypairid: K2JCJMDEHXQW5F\n", key)
}
