// Package deploy tests what ships cairn: its OCI image (built without a
// daemon, pushed to a real cairn, pulled back byte-exact, its binary run),
// the Helm chart (linted, rendered, its configuration loaded and served),
// the systemd unit (systemd-analyze) and the example configuration.
//
// helm and systemd-analyze come from scripts/install-tools.sh; a missing
// tool skips its test, or fails it with CAIRN_REQUIRE_CLIENTS=1 (CI).
package deploy

import (
	"bytes"
	"context"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/cairn-registry/cairn/internal/testutil/cairnproc"
)

// TestMain builds cairn once for the package.
func TestMain(m *testing.M) { os.Exit(cairnproc.Main(m)) }

// repoRoot is the module's directory: deploy/ and cmd/ are read from there.
func repoRoot(t *testing.T) string {
	t.Helper()
	out, err := exec.Command("go", "env", "GOMOD").Output()
	if err != nil {
		t.Fatalf("go env GOMOD: %v", err)
	}
	mod := strings.TrimSpace(string(out))
	if mod == "" || mod == os.DevNull {
		t.Fatal("not inside cairn's module")
	}
	return filepath.Dir(mod)
}

// run runs a command that must succeed and returns its stdout. The
// 20 minutes are a hang guard for the image builds (two cross-compiles of
// cairn on a cold cache), not an expectation.
func run(t *testing.T, dir string, env []string, name string, args ...string) string {
	t.Helper()
	out, errOut, err := runErr(dir, env, name, args...)
	if err != nil {
		t.Fatalf("%s %s: %v\nstdout:\n%s\nstderr:\n%s", filepath.Base(name), strings.Join(args, " "), err, out, errOut)
	}
	return out
}

// runErr runs a command and returns its stdout, stderr and error.
func runErr(dir string, env []string, name string, args ...string) (stdout, stderr string, err error) {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, name, args...)
	cmd.Dir = dir
	if env != nil {
		cmd.Env = append(os.Environ(), env...)
	}
	var o, e bytes.Buffer
	cmd.Stdout, cmd.Stderr = &o, &e
	err = cmd.Run()
	return o.String(), e.String(), err
}

// configCheck runs `cairn config check` on a file, as an operator would
// before starting the registry, and returns what it prints.
func configCheck(t *testing.T, path string) string {
	t.Helper()
	out, errOut, err := runErr("", nil, cairnproc.Binary(t), "config", "check", path)
	if err != nil {
		t.Fatalf("cairn config check %s: %v\n%s%s", path, err, out, errOut)
	}
	return out
}

// serveProbes starts `cairn serve --config path` with its storage moved to
// a temp dir and its listeners to free ports (the configuration names fixed
// ones), and asserts that the probes a deployment points at answer 200.
func serveProbes(t *testing.T, path string) {
	t.Helper()
	debug := cairnproc.FreeAddr(t)
	t.Setenv("REGISTRY_HTTP_DEBUG_ADDR", debug)
	srv := cairnproc.StartArgs(t, cairnproc.Binary(t), "--config", path, "--root", t.TempDir())
	hc := &http.Client{Timeout: 10 * time.Second}
	for _, p := range []string{"/healthz", "/readyz", "/metrics"} {
		resp, err := hc.Get("http://" + debug + p)
		if err != nil {
			t.Fatalf("GET %s on the debug listener: %v\n%s", p, err, srv.Logs())
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			t.Errorf("GET %s on the debug listener: %s, want 200", p, resp.Status)
		}
	}
}
