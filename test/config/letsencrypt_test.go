package config

import (
	"crypto/tls"
	"net"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cairn-registry/cairn/internal/testutil/cairnproc"
)

// http.tls.letsencrypt asks the configured ACME server (directoryurl) for a
// certificate when a client names one of the hosts, and never for other
// names. (The fake server answers nothing useful, so no certificate is
// issued: what is checked is which handshakes reach it.)
func TestLetsEncryptAsksTheDirectory(t *testing.T) {
	var asked atomic.Int32
	acme := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		asked.Add(1)
		http.Error(w, "no", http.StatusNotFound)
	}))
	t.Cleanup(acme.Close) // after cairn stops: cleanups run last first
	dir := t.TempDir()
	addr := cairnproc.FreeAddr(t)
	cfg := cairnproc.WriteConfig(t, `http:
  tls:
    letsencrypt:
      cachefile: `+filepath.Join(dir, "acme-cache")+`
      email: ops@registry.example
      hosts: [registry.example]
      directoryurl: `+acme.URL+`/directory
`)
	logs, alive := serveRaw(t, "--addr", addr, "--root", filepath.Join(dir, "root"), "--config", cfg)
	handshake := func(name string) error {
		conn, err := tls.DialWithDialer(&net.Dialer{Timeout: 10 * time.Second}, "tcp", addr, &tls.Config{ServerName: name, InsecureSkipVerify: true})
		if err == nil {
			conn.Close()
		}
		return err
	}
	eventually(t, "the listener", func() (bool, string) {
		alive()
		c, err := net.Dial("tcp", addr)
		if err != nil {
			return false, err.Error()
		}
		c.Close()
		return true, ""
	})
	if err := handshake("other.example"); err == nil {
		t.Fatal("a handshake for a host not in hosts succeeded")
	}
	if n := asked.Load(); n != 0 {
		t.Fatalf("a name not in hosts reached the ACME server (%d requests)", n)
	}
	if err := handshake("registry.example"); err == nil {
		t.Fatal("a handshake succeeded with no certificate to give")
	}
	if asked.Load() == 0 {
		t.Errorf("registry.example did not reach the ACME server at directoryurl; log:\n%s", logs.String())
	}
}
