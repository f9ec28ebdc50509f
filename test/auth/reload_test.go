package auth

import (
	"crypto/tls"
	"net"
	"net/http"
	"os"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/cairn-registry/cairn/internal/testutil/cairnproc"
	"github.com/cairn-registry/cairn/internal/testutil/poll"
)

// until polls cond (each poll a real request) until it holds; the test's
// deadline is the only time limit.
func until(t *testing.T, what string, cond func() bool) {
	t.Helper()
	poll.Until(t, 50*time.Millisecond, poll.Unless(cond, what))
}

func status(t *testing.T, hc *http.Client, method, url, user, pass string) int {
	t.Helper()
	req, err := http.NewRequest(method, url, nil)
	if err != nil {
		t.Fatal(err)
	}
	if user != "" {
		req.SetBasicAuth(user, pass)
	}
	resp, err := hc.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	return resp.StatusCode
}

// TestReload: a changed htpasswd file and changed access rules take
// effect on SIGHUP (or when the files change) without a restart; a broken
// configuration is refused with a log line and the running one stays.
func TestReload(t *testing.T) {
	t.Parallel()
	users := htpasswd(t, "alice", "admin-pw")
	rules := func(bobActions string) string {
		return htpasswdConfig(users, "  accesscontrol:\n    adminpolicy: {users: [alice], actions: [\"*\"]}\n    repositories:\n      \"team/**\":\n        policies:\n          - {users: [bob], actions: ["+bobActions+"]}\n")
	}
	cfgPath := cairnproc.WriteConfig(t, rules("pull"))
	srv := cairnproc.Start(t, "", "--config", cfgPath)
	hc := &http.Client{Timeout: 30 * time.Second}
	defer hc.CloseIdleConnections()
	upload := srv.URL + "/v2/team/app/blobs/uploads/"

	if got := status(t, hc, http.MethodGet, srv.URL+"/v2/", "bob", "bob-pw"); got != http.StatusUnauthorized {
		t.Fatalf("bob before he is added: %d", got)
	}
	// Add bob to the htpasswd file.
	added := htpasswd(t, "alice", "admin-pw", "bob", "bob-pw")
	b, err := os.ReadFile(added)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(users, b, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := srv.Signal(syscall.SIGHUP); err != nil {
		t.Fatal(err)
	}
	until(t, "bob to authenticate", func() bool {
		return status(t, hc, http.MethodGet, srv.URL+"/v2/", "bob", "bob-pw") == http.StatusOK
	})
	if got := status(t, hc, http.MethodPost, upload, "bob", "bob-pw"); got != http.StatusForbidden {
		t.Fatalf("bob's push with pull only: %d, want 403", got)
	}
	// Give bob push: the file watch picks the change up, no signal needed.
	if err := os.WriteFile(cfgPath, []byte(rules("pull, push")), 0o600); err != nil {
		t.Fatal(err)
	}
	until(t, "bob's push to be allowed", func() bool {
		return status(t, hc, http.MethodPost, upload, "bob", "bob-pw") == http.StatusAccepted
	})
	// A broken configuration: refused, and the running rules stay.
	if err := os.WriteFile(cfgPath, []byte("auth: [\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := srv.Signal(syscall.SIGHUP); err != nil {
		t.Fatal(err)
	}
	until(t, "the refusal to be logged", func() bool {
		return strings.Contains(srv.Logs(), "config reload refused; serving with the running configuration")
	})
	if got := status(t, hc, http.MethodPost, upload, "bob", "bob-pw"); got != http.StatusAccepted {
		t.Errorf("bob's push after a broken reload: %d, want 202 (the running rules)", got)
	}
	if got := status(t, hc, http.MethodGet, srv.URL+"/v2/", "carol", "x"); got != http.StatusUnauthorized {
		t.Errorf("an unknown user after a broken reload: %d", got)
	}
}

// TestReloadCertificate: new certificate files are served after a reload.
func TestReloadCertificate(t *testing.T) {
	t.Parallel()
	ca := newCA(t, "reload CA")
	first := ca.issue(t, "first", net.IPv4(127, 0, 0, 1))
	srv := startTLS(t, tlsConfig(first, ""), ca.pool, nil)
	serial := func() string {
		conn, err := tls.Dial("tcp", srv.Addr, &tls.Config{RootCAs: ca.pool})
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close()
		return conn.ConnectionState().PeerCertificates[0].SerialNumber.String()
	}
	if got := serial(); got != first.cert.SerialNumber.String() {
		t.Fatalf("served %s, want the first certificate", got)
	}
	second := ca.issue(t, "second", net.IPv4(127, 0, 0, 1))
	for _, f := range [][2]string{{second.certPath, first.certPath}, {second.keyPath, first.keyPath}} {
		b, err := os.ReadFile(f[0])
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(f[1], b, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	if err := srv.Signal(syscall.SIGHUP); err != nil {
		t.Fatal(err)
	}
	until(t, "the second certificate", func() bool { return serial() == second.cert.SerialNumber.String() })
}
