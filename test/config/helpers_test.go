// Package config tests distribution's configuration keys through a real
// `cairn serve`: response headers, the API under a path prefix, Location
// URLs, log formats, listing limits, manifest URL rules, the silly
// authorizer, h2c, health checks, and the Redis-backed blob descriptor
// cache shared by two nodes.
package config

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/opencontainers/go-digest"

	"github.com/cairn-registry/cairn/internal/testutil/cairnproc"
	"github.com/cairn-registry/cairn/internal/testutil/logbuf"
	"github.com/cairn-registry/cairn/internal/testutil/poll"
	"github.com/cairn-registry/cairn/internal/testutil/regtest"
)

// TestMain builds cairn once for the package.
func TestMain(m *testing.M) { os.Exit(cairnproc.Main(m)) }

var hc = &http.Client{Timeout: 30 * time.Second}

// serve starts cairn with the configuration yml over a new root.
func serve(t *testing.T, yml string) *cairnproc.Server {
	t.Helper()
	return cairnproc.Start(t, "", "--config", cairnproc.WriteConfig(t, yml))
}

// startAt is serve for an API whose base is not /v2/ (http.prefix).
func startAt(t *testing.T, yml, apiBase string) *cairnproc.Server {
	t.Helper()
	return cairnproc.StartAt(t, cairnproc.Binary(t), apiBase, "--root", t.TempDir(), "--config", cairnproc.WriteConfig(t, yml))
}

// pushBlob uploads data to repo through api (".../v2/") with a POST and
// a PUT of its Location, and returns its digest and the PUT's response.
func pushBlob(t *testing.T, api, repo string, data []byte) (digest.Digest, regtest.Response) {
	t.Helper()
	r := regtest.Do(t, hc, http.MethodPost, api+repo+"/blobs/uploads/", nil)
	if r.Status != http.StatusAccepted {
		t.Fatalf("%v", r)
	}
	d := digest.FromBytes(data)
	loc := regtest.Resolve(t, api, r.Header.Get("Location"))
	u, _ := url.Parse(loc)
	q := u.Query()
	q.Set("digest", d.String())
	u.RawQuery = q.Encode()
	r = regtest.Do(t, hc, http.MethodPut, u.String(), data, "Content-Type", "application/octet-stream")
	if r.Status != http.StatusCreated {
		t.Fatalf("%v", r)
	}
	return d, r
}

// imageManifest returns an OCI image manifest of config and layers; layer
// descriptors may carry urls.
func imageManifest(config digest.Digest, configSize int, layers ...map[string]any) []byte {
	ls := make([]map[string]any, len(layers))
	copy(ls, layers)
	b, _ := json.Marshal(map[string]any{
		"schemaVersion": 2,
		"mediaType":     "application/vnd.oci.image.manifest.v1+json",
		"config":        map[string]any{"mediaType": "application/vnd.oci.image.config.v1+json", "digest": config, "size": configSize},
		"layers":        ls,
	})
	return b
}

// pushImage pushes a one-layer image as repo:tag through api and returns
// the manifest PUT's response.
func pushImage(t *testing.T, api, repo, tag string) regtest.Response {
	t.Helper()
	cfg := []byte(`{"architecture":"amd64","os":"linux"}`)
	cd, _ := pushBlob(t, api, repo, cfg)
	layer := []byte("layer of " + repo + ":" + tag)
	ld, _ := pushBlob(t, api, repo, layer)
	m := imageManifest(cd, len(cfg), map[string]any{"mediaType": "application/vnd.oci.image.layer.v1.tar", "digest": ld, "size": len(layer)})
	r := regtest.Do(t, hc, http.MethodPut, api+repo+"/manifests/"+tag, m, "Content-Type", "application/vnd.oci.image.manifest.v1+json")
	if r.Status != http.StatusCreated {
		t.Fatalf("%v", r)
	}
	return r
}

// eventually polls cond every 100ms until it holds; the deadline only
// guards against a hang.
func eventually(t *testing.T, what string, cond func() (bool, string)) {
	t.Helper()
	poll.Within(t, time.Minute, 100*time.Millisecond, func() string {
		if ok, state := cond(); !ok {
			return what + " (last: " + state + ")"
		}
		return ""
	})
}

// logLines returns the lines of s's log that hold want.
func logLines(s *cairnproc.Server, want string) []string {
	var out []string
	for _, l := range strings.Split(s.Logs(), "\n") {
		if strings.Contains(l, want) {
			out = append(out, l)
		}
	}
	return out
}

func status(r regtest.Response) string { return fmt.Sprintf("%d %s", r.Status, r.ErrorCode()) }

// serveRaw starts `cairn serve` with args for a listener cairnproc cannot
// wait on (a Unix socket, TLS from ACME with no certificate to give), and
// stops it (SIGTERM) when the test ends. alive fails the test, with the
// log, once the process has exited; logs is what it wrote.
func serveRaw(t *testing.T, args ...string) (logs *logbuf.Buffer, alive func()) {
	t.Helper()
	cmd := exec.Command(cairnproc.Binary(t), append([]string{"serve"}, args...)...)
	logs = new(logbuf.Buffer)
	cmd.Stdout, cmd.Stderr = logs, logs
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	gone := false // done was taken: nothing is left to wait for
	t.Cleanup(func() {
		if !gone {
			cmd.Process.Signal(syscall.SIGTERM)
			<-done
		}
	})
	return logs, func() {
		t.Helper()
		select {
		case err := <-done:
			gone = true
			t.Fatalf("cairn exited: %v\n%s", err, logs.String())
		default:
		}
	}
}
