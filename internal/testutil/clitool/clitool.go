// Package clitool finds the real client tools (crane, skopeo, podman, ...)
// that end-to-end tests drive, with one policy for when one is missing.
package clitool

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// Path returns the path of a client binary on PATH. A missing tool skips
// the test, or fails it when CAIRN_REQUIRE_CLIENTS=1 (CI sets it, so a
// missing install step cannot pass as a skip).
func Path(t testing.TB, name string) string {
	t.Helper()
	p, err := exec.LookPath(name)
	if err != nil {
		if os.Getenv("CAIRN_REQUIRE_CLIENTS") == "1" {
			t.Fatalf("%s not found on PATH and CAIRN_REQUIRE_CLIENTS=1: %v", name, err)
		}
		t.Skipf("%s not found on PATH (scripts/test.sh installs it): %v", name, err)
	}
	return p
}

// Env returns a fresh home directory and an environment for client tools
// that isolates them from the user's and from each other: own HOME, Docker
// and XDG config, runtime dir and (empty) registry auth file; ambient
// SSL_CERT_* and REGCTL_* variables dropped. extra ("K=V") entries win.
func Env(t testing.TB, extra ...string) (home string, vars []string) {
	t.Helper()
	home = t.TempDir()
	run := filepath.Join(home, "run")
	if err := os.MkdirAll(run, 0o700); err != nil {
		t.Fatal(err)
	}
	// podman refuses a REGISTRY_AUTH_FILE that does not exist.
	if err := os.WriteFile(filepath.Join(home, "auth.json"), []byte(`{"auths":{}}`), 0o600); err != nil {
		t.Fatal(err)
	}
	override := map[string]string{
		"HOME":               home,
		"DOCKER_CONFIG":      filepath.Join(home, ".docker"),
		"XDG_CONFIG_HOME":    filepath.Join(home, ".config"),
		"XDG_RUNTIME_DIR":    run,
		"REGISTRY_AUTH_FILE": filepath.Join(home, "auth.json"),
		"NO_COLOR":           "1",
	}
	for _, kv := range extra {
		k, v, _ := strings.Cut(kv, "=")
		override[k] = v
	}
	for _, kv := range os.Environ() {
		k, _, _ := strings.Cut(kv, "=")
		if _, ok := override[k]; ok || strings.HasPrefix(k, "SSL_CERT_") || strings.HasPrefix(k, "REGCTL_") {
			continue
		}
		vars = append(vars, kv)
	}
	for k, v := range override {
		vars = append(vars, k+"="+v)
	}
	return home, vars
}
