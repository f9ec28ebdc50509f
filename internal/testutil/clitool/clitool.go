// Package clitool finds the real client tools (crane, skopeo, podman, ...)
// that end-to-end tests drive, with one policy for when one is missing,
// and runs them in environments of their own.
package clitool

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
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

// CommandTimeout bounds one client command: a hung client fails its test
// instead of eating the whole go test timeout.
const CommandTimeout = 5 * time.Minute

// Session runs client tools in an environment of its own (see Env), so no
// user configuration or credential leaks in and tests do not see each
// other's logins.
type Session struct {
	Home string
	Vars []string
	Dir  string // working directory of commands; "" is Home
}

// NewSession returns a session in a fresh environment; extra ("K=V")
// entries are added to it.
func NewSession(t testing.TB, extra ...string) *Session {
	t.Helper()
	home, vars := Env(t, extra...)
	return &Session{Home: home, Vars: vars}
}

// Exec runs a command and returns its stdout, its stderr and its error.
func (s *Session) Exec(name string, args ...string) (stdout, stderr []byte, err error) {
	ctx, cancel := context.WithTimeout(context.Background(), CommandTimeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, name, args...)
	cmd.Env = s.Vars
	cmd.Dir = s.Home
	if s.Dir != "" {
		cmd.Dir = s.Dir
	}
	var out, errb bytes.Buffer
	cmd.Stdout = &out
	cmd.Stderr = &errb
	err = cmd.Run()
	if ctx.Err() != nil {
		err = fmt.Errorf("%w (timed out after %s)", err, CommandTimeout)
	}
	return out.Bytes(), errb.Bytes(), err
}

// Run runs a command that must succeed and returns its stdout.
func (s *Session) Run(t testing.TB, name string, args ...string) []byte {
	t.Helper()
	start := time.Now()
	out, errb, err := s.Exec(name, args...)
	if err != nil {
		t.Fatalf("%s %s: %v\nstdout:\n%s\nstderr:\n%s", filepath.Base(name), strings.Join(args, " "), err, out, errb)
	}
	t.Logf("%s %s (%s)", filepath.Base(name), strings.Join(args, " "), time.Since(start).Round(time.Millisecond))
	return out
}

// Fail runs a command that must fail and returns its stdout and stderr
// together.
func (s *Session) Fail(t testing.TB, name string, args ...string) string {
	t.Helper()
	out, errb, err := s.Exec(name, args...)
	if err == nil {
		t.Fatalf("%s %s: succeeded, want failure\nstdout:\n%s", filepath.Base(name), strings.Join(args, " "), out)
	}
	return string(out) + string(errb)
}
