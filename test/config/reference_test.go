package config

import (
	"errors"
	"net/http"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/cairn-registry/cairn/internal/testutil/cairnproc"
	"github.com/cairn-registry/cairn/internal/testutil/regtest"
)

// distribution's configurations, kept as test data beside the config
// package's reference test.
const reference = "../../internal/config/testdata/distribution/"

// cairn serve runs distribution's cmd/registry/config-dev.yml as it is
// (the listeners moved to free ports through REGISTRY_* variables, the
// storage under --root): no key is reported, its header and log fields
// are served, and its storage health check reports healthy.
func TestServeDistributionDevConfig(t *testing.T) {
	debug := cairnproc.FreeAddr(t)
	t.Setenv("REGISTRY_HTTP_DEBUG_ADDR", debug)
	s := cairnproc.Start(t, "", "--config", filepath.Join(reference, "cmd-registry-config-dev.yml"))
	r := regtest.Do(t, hc, http.MethodGet, s.URL+"/v2/", nil)
	if r.Status != http.StatusOK || r.Header.Get("X-Content-Type-Options") != "nosniff" {
		t.Errorf("%v: X-Content-Type-Options %q", r, r.Header.Get("X-Content-Type-Options"))
	}
	if r := regtest.Do(t, hc, http.MethodGet, "http://"+debug+"/debug/health", nil); r.Status != http.StatusOK {
		t.Errorf("%v", r)
	}
	s.Stop()
	logs := s.Logs()
	for _, bad := range []string{"not supported yet", "unknown key", "level=WARN"} {
		if strings.Contains(logs, bad) {
			t.Errorf("log holds %q:\n%s", bad, logs)
		}
	}
	if lines := logLines(s, "cairn serving"); len(lines) != 1 || !strings.Contains(lines[0], "environment=development service=registry") {
		t.Errorf("log.fields missing from %q", lines)
	}
}

// A configuration with a key cairn refuses stops start-up with one line
// naming the key and why: a registry middleware is code built into a
// distribution binary.
func TestServeRefusesWithReason(t *testing.T) {
	cmd := exec.Command(cairnproc.Binary(t), "serve", "--addr", cairnproc.FreeAddr(t), "--root", t.TempDir(),
		"--config", cairnproc.WriteConfig(t, "middleware:\n  registry:\n    - name: custom\n"))
	out, err := cmd.CombinedOutput()
	var ee *exec.ExitError
	if !errors.As(err, &ee) || ee.ExitCode() != 1 {
		t.Fatalf("exit: %v, output %q", err, out)
	}
	lines := strings.Split(strings.TrimSpace(string(out)), "\n")
	last := lines[len(lines)-1]
	if !strings.HasPrefix(last, "cairn: config: middleware.registry: refused: distribution's registry middlewares are code built into a distribution binary") {
		t.Errorf("last line %q, want the refusal of middleware.registry with its reason", last)
	}
}
