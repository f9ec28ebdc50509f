// Package cairnproc runs a real `cairn serve` process for end-to-end tests:
// it builds (or reuses) the binary, starts it on a free loopback port, waits
// until it answers, and stops it by PID when the test ends.
package cairnproc

import (
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/cairn-registry/cairn/internal/testutil/logbuf"
)

// Server is a running cairn process.
type Server struct {
	// Addr is host:port, suitable for image references ("127.0.0.1:41234").
	Addr string
	// URL is "http://" + Addr.
	URL string
	// Root is the storage root directory the process serves.
	Root string

	cmd  *exec.Cmd
	logs *logbuf.Buffer
	done chan struct{}
}

// Binary returns the path of a cairn binary: $CAIRN_BIN when set (the test
// script builds it once), else a fresh build of ./cmd/cairn in a temp dir.
func Binary(t testing.TB) string {
	t.Helper()
	if p := os.Getenv("CAIRN_BIN"); p != "" {
		abs, err := filepath.Abs(p)
		if err != nil {
			t.Fatalf("CAIRN_BIN: %v", err)
		}
		return abs
	}
	root, err := moduleRoot()
	if err != nil {
		t.Fatalf("find module root: %v", err)
	}
	out := filepath.Join(t.TempDir(), "cairn")
	cmd := exec.Command("go", "build", "-o", out, "./cmd/cairn")
	cmd.Dir = root
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go build ./cmd/cairn: %v\n%s", err, b)
	}
	return out
}

// Main builds cairn once for a package's tests (unless $CAIRN_BIN is set),
// exports CAIRN_BIN, runs the tests and removes the build. Use it as
// func TestMain(m *testing.M) { os.Exit(cairnproc.Main(m)) }.
func Main(m *testing.M) int {
	if os.Getenv("CAIRN_BIN") == "" {
		dir, err := os.MkdirTemp("", "cairn-test-bin-")
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
		defer os.RemoveAll(dir)
		root, err := moduleRoot()
		if err != nil {
			fmt.Fprintln(os.Stderr, "find module root:", err)
			return 1
		}
		bin := filepath.Join(dir, "cairn")
		cmd := exec.Command("go", "build", "-o", bin, "./cmd/cairn")
		cmd.Dir = root
		if out, err := cmd.CombinedOutput(); err != nil {
			fmt.Fprintf(os.Stderr, "go build ./cmd/cairn: %v\n%s", err, out)
			return 1
		}
		os.Setenv("CAIRN_BIN", bin)
	}
	return m.Run()
}

func moduleRoot() (string, error) {
	out, err := exec.Command("go", "env", "GOMOD").Output()
	if err != nil {
		return "", err
	}
	mod := strings.TrimSpace(string(out))
	if mod == "" || mod == os.DevNull {
		return "", fmt.Errorf("not inside a Go module")
	}
	return filepath.Dir(mod), nil
}

// WriteConfig writes yml as config.yml in a new temp dir and returns its
// path, for --config.
func WriteConfig(t testing.TB, yml string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "config.yml")
	if err := os.WriteFile(p, []byte(yml), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

// FreeAddr returns a loopback host:port that was free a moment ago.
func FreeAddr(t testing.TB) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("listen: %v", err)
	}
	addr := l.Addr().String()
	l.Close()
	return addr
}

// Start runs `cairn serve --addr <free> --root <root> args...` and waits until
// GET /v2/ answers. root "" means a new temp dir. The process is stopped by
// PID (SIGTERM, then SIGKILL after 10 s) when the test ends; its log is
// printed if the test failed.
func Start(t testing.TB, root string, args ...string) *Server {
	t.Helper()
	return StartBinary(t, Binary(t), root, args...)
}

// StartBinary is Start with an explicit binary.
func StartBinary(t testing.TB, bin, root string, args ...string) *Server {
	t.Helper()
	if root == "" {
		root = t.TempDir()
	}
	s := StartArgs(t, bin, append([]string{"--root", root}, args...)...)
	s.Root = root
	return s
}

// StartArgs runs `bin serve --addr <free> args...`: storage comes from args
// (a --config naming an object store, say). Root is "".
func StartArgs(t testing.TB, bin string, args ...string) *Server {
	t.Helper()
	return start(t, bin, "http", &http.Client{Timeout: time.Second}, args)
}

// StartAt is StartArgs for a server whose API is not at /v2/ (http.prefix):
// it waits until GET apiBase (such as "/my/registry/v2/") answers.
func StartAt(t testing.TB, bin, apiBase string, args ...string) *Server {
	t.Helper()
	return startAt(t, bin, "http", &http.Client{Timeout: time.Second}, apiBase, args)
}

// StartTLS is StartArgs for a server whose args configure http.tls: it
// waits until GET /v2/ answers over HTTPS to client (which trusts the
// test's CA, and for mutual TLS presents a certificate).
func StartTLS(t testing.TB, bin string, client *http.Client, args ...string) *Server {
	t.Helper()
	return start(t, bin, "https", client, args)
}

func start(t testing.TB, bin, scheme string, client *http.Client, args []string) *Server {
	t.Helper()
	return startAt(t, bin, scheme, client, "/v2/", args)
}

func startAt(t testing.TB, bin, scheme string, client *http.Client, apiBase string, args []string) *Server {
	t.Helper()
	addr := FreeAddr(t)
	full := append([]string{"serve", "--addr", addr}, args...)
	s := &Server{Addr: addr, URL: scheme + "://" + addr, logs: &logbuf.Buffer{}, done: make(chan struct{})}
	s.cmd = exec.Command(bin, full...)
	s.cmd.Stdout = s.logs
	s.cmd.Stderr = s.logs
	if err := s.cmd.Start(); err != nil {
		t.Fatalf("start cairn: %v", err)
	}
	go func() { s.cmd.Wait(); close(s.done) }()
	t.Cleanup(func() {
		s.Stop()
		if t.Failed() {
			t.Logf("cairn log:\n%s", s.Logs())
		}
	})
	if err := s.waitReady(client, apiBase, 30*time.Second); err != nil {
		t.Fatalf("cairn did not become ready: %v\nlog:\n%s", err, s.Logs())
	}
	return s
}

func (s *Server) waitReady(client *http.Client, apiBase string, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	for time.Now().Before(deadline) {
		select {
		case <-s.done:
			return fmt.Errorf("process exited: %v", s.cmd.ProcessState)
		default:
		}
		resp, err := client.Get(s.URL + apiBase)
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK || resp.StatusCode == http.StatusUnauthorized {
				return nil
			}
		}
		time.Sleep(50 * time.Millisecond)
	}
	return fmt.Errorf("no answer on %s within %s", s.URL, timeout)
}

// Stop sends SIGTERM to the process and waits for it to exit (SIGKILL after
// 10 s). It is safe to call more than once.
func (s *Server) Stop() {
	select {
	case <-s.done:
		return
	default:
	}
	_ = s.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-s.done:
	case <-time.After(10 * time.Second):
		_ = s.cmd.Process.Kill()
		<-s.done
	}
}

// Signal sends sig to the process without waiting.
func (s *Server) Signal(sig os.Signal) error { return s.cmd.Process.Signal(sig) }

// Wait waits up to timeout for the process to exit and reports whether it did.
func (s *Server) Wait(timeout time.Duration) bool {
	select {
	case <-s.done:
		return true
	case <-time.After(timeout):
		return false
	}
}

// Kill ends the process with SIGKILL, as a crash would.
func (s *Server) Kill() {
	_ = s.cmd.Process.Kill()
	<-s.done
}

// Exited reports whether the process has ended, and its state.
func (s *Server) Exited() (bool, *os.ProcessState) {
	select {
	case <-s.done:
		return true, s.cmd.ProcessState
	default:
		return false, nil
	}
}

// Logs returns everything the process wrote to stdout and stderr so far.
func (s *Server) Logs() string { return s.logs.String() }

// LogsWith waits until the process has written every one of want (its
// output reaches the test through a pipe, after the response that caused
// it) and returns the logs and whether they all appeared. The minute is a
// hang guard.
func (s *Server) LogsWith(want ...string) (string, bool) {
	for deadline := time.Now().Add(time.Minute); ; time.Sleep(10 * time.Millisecond) {
		logs := s.Logs()
		missing := false
		for _, w := range want {
			if !strings.Contains(logs, w) {
				missing = true
				break
			}
		}
		if !missing {
			return logs, true
		}
		if exited, _ := s.Exited(); exited || time.Now().After(deadline) {
			return s.Logs(), false
		}
	}
}
