package config

import (
	"bufio"
	"bytes"
	"errors"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/cairn-registry/cairn/internal/testutil/cairnproc"
)

// runCairn runs the cairn binary with args and returns its exit status,
// stdout and stderr.
func runCairn(t *testing.T, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	var out, errOut bytes.Buffer
	cmd := exec.Command(cairnproc.Binary(t), args...)
	cmd.Stdout, cmd.Stderr = &out, &errOut
	err := cmd.Run()
	var ee *exec.ExitError
	switch {
	case err == nil:
	case errors.As(err, &ee):
		code = ee.ExitCode()
	default:
		t.Fatalf("cairn %q: %v", args, err)
	}
	return code, out.String(), errOut.String()
}

// A misspelt key under a known section stops start-up naming the key,
// where it is and the key meant: ignored, storage.filesystem.rootdir made
// cairn serve an empty store at /var/lib/registry while the data sat in
// the directory the operator named.
func TestServeRefusesMisspeltKey(t *testing.T) {
	data := filepath.Join(t.TempDir(), "data")
	cfg := cairnproc.WriteConfig(t, "version: 0.1\nstorage:\n  filesystem:\n    rootdir: "+data+"\n")
	cmd := exec.Command(cairnproc.Binary(t), "serve", "--addr", cairnproc.FreeAddr(t), "--config", cfg)
	pipe, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	// Read until it exits, or until it says it serves: then it ignored
	// the key, and is stopped.
	var lines []string
	sc := bufio.NewScanner(pipe)
	for sc.Scan() {
		lines = append(lines, sc.Text())
		if strings.Contains(sc.Text(), "cairn serving") {
			cmd.Process.Kill()
			cmd.Wait()
			t.Fatalf("cairn serve started with a misspelt key:\n%s", strings.Join(lines, "\n"))
		}
	}
	err = cmd.Wait()
	var ee *exec.ExitError
	if !errors.As(err, &ee) || ee.ExitCode() == 0 {
		t.Fatalf("exit: %v\n%s", err, strings.Join(lines, "\n"))
	}
	last := lines[len(lines)-1]
	for _, want := range []string{"storage.filesystem.rootdir:", cfg + ":4", "did you mean rootdirectory?"} {
		if !strings.Contains(last, want) {
			t.Errorf("last line %q lacks %q", last, want)
		}
	}
}

// cairn config check prints the configuration cairn runs with, secrets
// masked, for a good file (distribution's cmd/registry cache
// configuration, whose http.secret, proxy password and Authorization
// header must not appear), and names the key of a bad one.
func TestConfigCheck(t *testing.T) {
	good := filepath.Join(reference, "cmd-registry-config-cache.yml")
	code, stdout, stderr := runCairn(t, "config", "check", good)
	if code != 0 {
		t.Fatalf("config check %s: exit %d\n%s", good, code, stderr)
	}
	for _, want := range []string{"rootdirectory: /var/lib/registry-cache", "remoteurl: https://registry-1.docker.io", "draintimeout: 1m0s", "secret: '********'", "password: '********'"} {
		if !strings.Contains(stdout, want) {
			t.Errorf("output lacks %q:\n%s", want, stdout)
		}
	}
	for _, secret := range []string{"asecretforlocaldevelopment", "password: password", "an example token"} {
		if strings.Contains(stdout, secret) {
			t.Errorf("output shows the secret %q:\n%s", secret, stdout)
		}
	}
	if strings.Contains(stderr, "unknown key") || strings.Contains(stderr, "not supported") {
		t.Errorf("stderr: %s", stderr)
	}

	// serve --check is the same check, and starts nothing.
	code, stdout, stderr = runCairn(t, "serve", "--check", "--config", good, "--root", t.TempDir())
	if code != 0 || strings.Contains(stdout, "asecretforlocaldevelopment") || strings.Contains(stderr, "cairn serving") {
		t.Errorf("serve --check: exit %d\nstdout:\n%s\nstderr:\n%s", code, stdout, stderr)
	}

	bad := cairnproc.WriteConfig(t, "http:\n  addr: :5000\n  secret: s3cr3t-value\n  tls:\n    certificat: /etc/cert.pem\n")
	code, stdout, stderr = runCairn(t, "config", "check", bad)
	if code != 1 {
		t.Errorf("config check of a bad file: exit %d, want 1", code)
	}
	if want := "cairn: config: http.tls.certificat: unknown key; did you mean certificate? (" + bad + ":5)"; strings.TrimSpace(stderr) != want {
		t.Errorf("stderr %q, want %q", stderr, want)
	}
	if stdout != "" {
		t.Errorf("a bad file printed a configuration:\n%s", stdout)
	}

	// A file it names that serve could not read fails the check too.
	missing := cairnproc.WriteConfig(t, "auth:\n  htpasswd:\n    realm: r\n    path: "+filepath.Join(t.TempDir(), "none")+"\n")
	if code, _, stderr := runCairn(t, "config", "check", missing); code != 1 || !strings.Contains(stderr, "auth.htpasswd.path") {
		t.Errorf("config check with a missing htpasswd file: exit %d, %s", code, stderr)
	}
}

// distribution's cmd/registry configurations pass the check as they are,
// no key reported.
func TestConfigCheckDistributionConfigs(t *testing.T) {
	for _, name := range []string{"cmd-registry-config-dev.yml", "cmd-registry-config-cache.yml", "example-development.yml"} {
		code, stdout, stderr := runCairn(t, "config", "check", filepath.Join(reference, name))
		if code != 0 || stderr != "" || !strings.Contains(stdout, "storage:") {
			t.Errorf("%s: exit %d\nstderr: %s", name, code, stderr)
		}
	}
}

// cairn serve -h says what serve does, its flags and the keys it reads,
// on stdout, and exits 0.
func TestServeHelp(t *testing.T) {
	code, stdout, stderr := runCairn(t, "serve", "-h")
	if code != 0 {
		t.Fatalf("serve -h: exit %d\n%s", code, stderr)
	}
	for _, want := range []string{"usage: cairn serve", "Runs the registry", "-config", "-addr", "-root", "-check", "http.addr", "storage.*", "filesystem.rootdirectory", "auth.*", "REGISTRY_"} {
		if !strings.Contains(stdout, want) {
			t.Errorf("serve -h lacks %q:\n%s", want, stdout)
		}
	}
}
