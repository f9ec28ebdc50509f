package auth

import (
	"fmt"
	"net/http"
	"strings"
	"testing"
)

// TestTrustedProxies: behind a load balancer every request comes from its
// address. With http.trustedproxies naming it, the failed-login limit holds
// back the guessing client alone (named by X-Forwarded-For), and the access
// log and audit lines name the client; without it, a client cannot escape
// the limit by writing X-Forwarded-For itself.
func TestTrustedProxies(t *testing.T) {
	users := htpasswd(t, "bob", "builder")
	cfg := func(extra string) string {
		return fmt.Sprintf("http:\n%sauth:\n  htpasswd:\n    realm: cairn\n    path: %s\n  failedlogins:\n    burst: 3\n    perminute: 0.001\n", extra, users)
	}
	basic := func(srv string, xff, pass string) int {
		t.Helper()
		req, err := http.NewRequestWithContext(t.Context(), http.MethodGet, srv+"/v2/", nil)
		if err != nil {
			t.Fatal(err)
		}
		req.SetBasicAuth("bob", pass)
		req.Header.Set("X-Forwarded-For", xff)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	guess := func(srv, xff string) {
		t.Helper()
		for i := range 3 {
			if s := basic(srv, xff, "nope"); s != http.StatusUnauthorized {
				t.Fatalf("wrong password %d from %s: %d, want 401", i, xff, s)
			}
		}
		if s := basic(srv, xff, "builder"); s != http.StatusTooManyRequests {
			t.Fatalf("right password from the guesser %s: %d, want 429", xff, s)
		}
	}

	t.Run("trusted", func(t *testing.T) {
		srv := startConfig(t, cfg("  trustedproxies: [127.0.0.0/8]\n"))
		guess(srv.URL, "1.2.3.4, 198.51.100.7")
		if s := basic(srv.URL, "198.51.100.8", "builder"); s != http.StatusOK {
			t.Fatalf("another client behind the same proxy: %d, want 200", s)
		}
		logs, ok := srv.LogsWith("remote=198.51.100.7:0", "addr=198.51.100.7", "addr=198.51.100.8")
		if !ok {
			t.Errorf("the access log and audit lines do not name the clients 198.51.100.7 and .8:\n%s", logs)
		}
		if strings.Contains(logs, "1.2.3.4") {
			t.Error("the log names the address the client wrote itself")
		}
	})
	t.Run("untrusted", func(t *testing.T) {
		srv := startConfig(t, cfg(""))
		guess(srv.URL, "198.51.100.7")
		if s := basic(srv.URL, "198.51.100.8", "builder"); s != http.StatusTooManyRequests {
			t.Fatalf("the guesser writing another X-Forwarded-For: %d, want 429", s)
		}
	})
}
