package auth

import (
	"crypto/tls"
	"errors"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-containerregistry/pkg/authn"
	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/v1/remote"

	"github.com/cairn-registry/cairn/internal/testutil/clitool"
)

func tlsConfig(cert *issued, extra string) string {
	return "http:\n  tls:\n    certificate: " + cert.certPath + "\n    key: " + cert.keyPath + "\n" + extra
}

// TestTLS: a registry on HTTPS with a test CA and htpasswd. Clients that
// trust the CA push and pull over HTTP/2; plain HTTP to the port gets no
// registry answer; clients that do not trust the CA, or speak TLS 1.1, are
// refused.
func TestTLS(t *testing.T) {
	t.Parallel()
	ca := newCA(t, "cairn test CA")
	serverCert := ca.issue(t, "cairn", net.IPv4(127, 0, 0, 1))
	cfg := tlsConfig(serverCert, "") + htpasswdConfig(htpasswd(t, "alice", "wonderland"), "")
	srv := startTLS(t, cfg, ca.pool, nil)
	img := newImage(t, 2)

	t.Run("go client over HTTP/2", func(t *testing.T) {
		hc := httpsClient(ca.pool, nil)
		defer hc.CloseIdleConnections()
		req, err := http.NewRequest(http.MethodGet, srv.URL+"/v2/", nil)
		if err != nil {
			t.Fatal(err)
		}
		req.SetBasicAuth("alice", "wonderland")
		resp, err := hc.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != 200 || resp.Proto != "HTTP/2.0" || resp.TLS == nil || resp.TLS.Version < tls.VersionTLS12 {
			t.Errorf("GET /v2/: %d %s TLS %+v, want 200 over HTTP/2 and TLS >= 1.2", resp.StatusCode, resp.Proto, resp.TLS)
		}
		// Push and pull through go-containerregistry over the same TLS.
		ref, err := name.ParseReference(srv.Addr + "/tls/ggcr:v1")
		if err != nil {
			t.Fatal(err)
		}
		opts := []remote.Option{remote.WithAuth(&authn.Basic{Username: "alice", Password: "wonderland"}), remote.WithTransport(hc.Transport), remote.WithContext(t.Context())}
		if err := remote.Write(ref, img.img, opts...); err != nil {
			t.Fatalf("push over HTTPS: %v", err)
		}
		got, err := remote.Image(ref, opts...)
		if err != nil {
			t.Fatal(err)
		}
		if d, _ := got.Digest(); d != img.digest {
			t.Errorf("pulled %s, want %s", d, img.digest)
		}
	})

	t.Run("crane trusting the CA", func(t *testing.T) {
		crane := clitool.Path(t, "crane")
		e := clitool.NewSession(t, "SSL_CERT_FILE="+ca.pemPath)
		e.Run(t, crane, "auth", "login", srv.Addr, "-u", "alice", "-p", "wonderland")
		ref := srv.Addr + "/tls/crane:v1" // no --insecure: HTTPS with verification
		e.Run(t, crane, "push", img.dir, ref)
		pulled := filepath.Join(t.TempDir(), "pulled")
		e.Run(t, crane, "pull", "--format=oci", ref, pulled)
		if got := ociDigest(t, pulled); got != img.digest.String() {
			t.Errorf("pulled %s, want %s", got, img.digest)
		}
		untrusting := clitool.NewSession(t)
		untrusting.Run(t, crane, "auth", "login", srv.Addr, "-u", "alice", "-p", "wonderland")
		if out := untrusting.Fail(t, crane, "digest", ref); !strings.Contains(out, "certificate") {
			t.Errorf("crane without the CA: want a certificate error, got:\n%s", out)
		}
	})

	t.Run("skopeo trusting the CA", func(t *testing.T) {
		skopeo := clitool.Path(t, "skopeo")
		certDir := t.TempDir()
		caPEM, err := os.ReadFile(ca.pemPath)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(certDir, "ca.crt"), caPEM, 0o600); err != nil {
			t.Fatal(err)
		}
		e := clitool.NewSession(t)
		ref := "docker://" + srv.Addr + "/tls/skopeo:v1"
		e.Run(t, skopeo, "--insecure-policy", "copy", "--preserve-digests", "--dest-cert-dir", certDir, "--dest-creds", "alice:wonderland", "oci:"+img.dir+":v1", ref)
		out := filepath.Join(t.TempDir(), "out")
		e.Run(t, skopeo, "--insecure-policy", "copy", "--preserve-digests", "--src-cert-dir", certDir, "--src-creds", "alice:wonderland", ref, "oci:"+out+":v1")
		if got := ociDigest(t, out); got != img.digest.String() {
			t.Errorf("pulled %s, want %s", got, img.digest)
		}
	})

	t.Run("plain HTTP is refused", func(t *testing.T) {
		hc := &http.Client{Timeout: 10 * time.Second}
		defer hc.CloseIdleConnections()
		for _, path := range []string{"/v2/", "/v2/tls/ggcr/manifests/v1"} {
			req, err := http.NewRequest(http.MethodGet, "http://"+srv.Addr+path, nil)
			if err != nil {
				t.Fatal(err)
			}
			req.SetBasicAuth("alice", "wonderland")
			resp, err := hc.Do(req)
			if err != nil {
				continue // the connection was closed: refused
			}
			b := make([]byte, 512)
			n, _ := resp.Body.Read(b)
			resp.Body.Close()
			if resp.StatusCode != http.StatusBadRequest || resp.Header.Get("Docker-Distribution-API-Version") != "" || strings.Contains(string(b[:n]), "schemaVersion") {
				t.Errorf("plain HTTP GET %s: %d %v %q, want 400 and no registry answer", path, resp.StatusCode, resp.Header, b[:n])
			}
		}
	})

	t.Run("untrusted and old clients are refused", func(t *testing.T) {
		hc := httpsClient(nil, nil) // system roots only
		defer hc.CloseIdleConnections()
		if _, err := hc.Get(srv.URL + "/v2/"); err == nil || !strings.Contains(err.Error(), "certificate") {
			t.Errorf("client without the CA: err = %v, want a certificate error", err)
		}
		old := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{
			RootCAs: ca.pool, MinVersion: tls.VersionTLS10, MaxVersion: tls.VersionTLS11,
		}}}
		defer old.CloseIdleConnections()
		if _, err := old.Get(srv.URL + "/v2/"); err == nil {
			t.Error("a TLS 1.1 client was served")
		}
	})
}

// TestMutualTLS: with clientcas, only clients presenting a certificate
// from those CAs get an answer.
func TestMutualTLS(t *testing.T) {
	t.Parallel()
	ca := newCA(t, "server CA")
	clientCA := newCA(t, "client CA")
	serverCert := ca.issue(t, "cairn", net.IPv4(127, 0, 0, 1))
	good := clientCA.issue(t, "trusted client")
	stranger := newCA(t, "stranger CA").issue(t, "stranger")
	cfg := tlsConfig(serverCert, "    clientcas: ["+clientCA.pemPath+"]\n  http2:\n    disabled: true\n")
	srv := startTLS(t, cfg, ca.pool, &good.tls)

	get := func(cert *tls.Certificate) (*http.Response, error) {
		hc := httpsClient(ca.pool, cert)
		defer hc.CloseIdleConnections()
		resp, err := hc.Get(srv.URL + "/v2/")
		if err == nil {
			resp.Body.Close()
		}
		return resp, err
	}
	resp, err := get(&good.tls)
	if err != nil || resp.StatusCode != 200 {
		t.Fatalf("client with a trusted certificate: %v %v", resp, err)
	}
	// http.http2.disabled: HTTP/1.1 even though the client offers h2.
	if resp.Proto != "HTTP/1.1" {
		t.Errorf("proto %s with http2 disabled, want HTTP/1.1", resp.Proto)
	}
	for name, cert := range map[string]*tls.Certificate{"no certificate": nil, "certificate from another CA": &stranger.tls} {
		resp, err := get(cert)
		var recErr tls.AlertError
		if err == nil {
			t.Errorf("%s: served with status %d", name, resp.StatusCode)
		} else if !errors.As(err, &recErr) && !strings.Contains(err.Error(), "certificate") {
			t.Errorf("%s: err = %v, want a TLS alert about the certificate", name, err)
		}
	}
}
