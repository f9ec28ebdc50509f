package config

import (
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"sync/atomic"
	"testing"

	"github.com/cairn-registry/cairn/internal/testutil/cairnproc"
	"github.com/cairn-registry/cairn/internal/testutil/regtest"
)

// healthOf returns the API's /v2/ status and the debug listener's /readyz
// and /debug/health statuses.
func healthOf(t *testing.T, s *cairnproc.Server, debug string) (api, ready, detail regtest.Response) {
	return regtest.Do(t, hc, http.MethodGet, s.URL+"/v2/", nil),
		regtest.Do(t, hc, http.MethodGet, "http://"+debug+"/readyz", nil),
		regtest.Do(t, hc, http.MethodGet, "http://"+debug+"/debug/health", nil)
}

// waitHealth waits until /v2/, /readyz and /debug/health all say healthy
// (want true) or all say unhealthy, with /debug/health naming check.
func waitHealth(t *testing.T, s *cairnproc.Server, debug, check string, want bool) {
	t.Helper()
	eventually(t, fmt.Sprintf("healthy=%v (%s)", want, check), func() (bool, string) {
		api, ready, detail := healthOf(t, s, debug)
		state := fmt.Sprintf("/v2/ %s, /readyz %d %q, /debug/health %d %s", status(api), ready.Status, ready.Body, detail.Status, detail.Body)
		if want {
			return api.Status == http.StatusOK && ready.Status == http.StatusOK && detail.Status == http.StatusOK, state
		}
		var failing map[string]string
		json.Unmarshal(detail.Body, &failing)
		_, named := failing[check]
		return api.Status == http.StatusServiceUnavailable && api.ErrorCode() == "UNAVAILABLE" &&
			ready.Status == http.StatusServiceUnavailable && detail.Status == http.StatusServiceUnavailable && named, state
	})
}

// A failing health check turns /v2/ (every API request, as in
// distribution) and /readyz unhealthy, and they recover when it passes:
// a file check (the file taken away), an HTTP check (its status), a TCP
// check (its listener), and the storage driver check (its root).
func TestHealthChecks(t *testing.T) {
	dir := t.TempDir()
	down := filepath.Join(dir, "out-of-rotation")

	var httpStatus atomic.Int32
	httpStatus.Store(http.StatusOK)
	upstream := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodHead || r.Header.Get("Authorization") != "Basic QWxhZGRpbjpvcGVuIHNlc2FtZQ==" {
			w.WriteHeader(http.StatusBadRequest)
			return
		}
		w.WriteHeader(int(httpStatus.Load()))
	}))
	defer upstream.Close()

	tcpAddr := cairnproc.FreeAddr(t)
	listen := func() net.Listener {
		l, err := net.Listen("tcp", tcpAddr)
		if err != nil {
			t.Fatal(err)
		}
		go func() {
			for {
				c, err := l.Accept()
				if err != nil {
					return
				}
				c.Close()
			}
		}()
		return l
	}
	tcp := listen()
	defer func() { tcp.Close() }()

	root := filepath.Join(dir, "root")
	debug := cairnproc.FreeAddr(t)
	cfg := fmt.Sprintf(`http:
  debug:
    addr: %s
health:
  storagedriver:
    enabled: true
    interval: 200ms
    threshold: 2
  file:
    - file: %s
      interval: 200ms
  http:
    - uri: %s/must/return/200
      headers:
        Authorization: [Basic QWxhZGRpbjpvcGVuIHNlc2FtZQ==]
      statuscode: 200
      timeout: 3s
      interval: 200ms
      threshold: 2
  tcp:
    - addr: %s
      timeout: 3s
      interval: 200ms
      threshold: 2
`, debug, down, upstream.URL, tcpAddr)
	if err := os.MkdirAll(root, 0o755); err != nil {
		t.Fatal(err)
	}
	s := cairnproc.Start(t, root, "--config", cairnproc.WriteConfig(t, cfg))
	waitHealth(t, s, debug, "", true)

	t.Run("file", func(t *testing.T) {
		if err := os.WriteFile(down, nil, 0o600); err != nil {
			t.Fatal(err)
		}
		waitHealth(t, s, debug, "file:"+down, false)
		os.Remove(down)
		waitHealth(t, s, debug, "", true)
	})
	t.Run("http", func(t *testing.T) {
		httpStatus.Store(http.StatusServiceUnavailable)
		waitHealth(t, s, debug, "http:"+upstream.URL+"/must/return/200", false)
		httpStatus.Store(http.StatusOK)
		waitHealth(t, s, debug, "", true)
	})
	t.Run("tcp", func(t *testing.T) {
		tcp.Close()
		waitHealth(t, s, debug, "tcp:"+tcpAddr, false)
		tcp = listen()
		waitHealth(t, s, debug, "", true)
	})
	t.Run("storagedriver", func(t *testing.T) {
		moved := root + ".away"
		if err := os.Rename(root, moved); err != nil {
			t.Fatal(err)
		}
		waitHealth(t, s, debug, "storagedriver_filesystem", false)
		if err := os.Rename(moved, root); err != nil {
			t.Fatal(err)
		}
		waitHealth(t, s, debug, "", true)
	})
}
