package bench

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"time"
)

// LocalServer is a registry process started for one benchmark run.
type LocalServer struct {
	// URL is the server's base URL.
	URL string

	cmd  *exec.Cmd
	dir  string
	log  string
	done chan struct{}
	werr error
}

// StartServer runs `bin serve --addr 127.0.0.1:<free port> --root <temp dir>`
// and waits until GET /v2/ answers. The process's output goes to a log file
// in the temp dir, quoted in the error if it fails to start. Stop ends it
// and removes the temp dir.
func StartServer(ctx context.Context, bin string) (*LocalServer, error) {
	dir, err := os.MkdirTemp("", "cairn-bench-")
	if err != nil {
		return nil, fmt.Errorf("bench: temp dir: %w", err)
	}
	addr, err := FreeAddr()
	if err != nil {
		os.RemoveAll(dir)
		return nil, err
	}
	s, err := StartServerWith(ctx, bin, addr, filepath.Join(dir, "server.log"), "--root", filepath.Join(dir, "root"))
	if err != nil {
		os.RemoveAll(dir)
		return nil, err
	}
	s.dir = dir
	return s, nil
}

// StartServerWith runs `bin serve --addr addr args...` with its output in
// logPath and waits until GET /v2/ answers; the caller owns every file.
func StartServerWith(ctx context.Context, bin, addr, logPath string, args ...string) (*LocalServer, error) {
	s := &LocalServer{URL: "http://" + addr, log: logPath, done: make(chan struct{})}
	logf, err := os.Create(s.log)
	if err != nil {
		return nil, fmt.Errorf("bench: server log: %w", err)
	}
	// Not CommandContext: the process is stopped by Stop, with SIGTERM.
	s.cmd = exec.Command(bin, append([]string{"serve", "--addr", addr}, args...)...)
	s.cmd.Stdout, s.cmd.Stderr = logf, logf
	if err := s.cmd.Start(); err != nil {
		logf.Close()
		return nil, fmt.Errorf("bench: start %s serve: %w", bin, err)
	}
	go func() {
		s.werr = s.cmd.Wait()
		logf.Close()
		close(s.done)
	}()
	if err := s.waitReady(ctx, 30*time.Second); err != nil {
		s.Stop()
		return nil, err
	}
	return s, nil
}

// FreeAddr returns a loopback address with a port free right now.
func FreeAddr() (string, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", fmt.Errorf("bench: find a free port: %w", err)
	}
	defer l.Close()
	return l.Addr().String(), nil
}

func (s *LocalServer) waitReady(ctx context.Context, timeout time.Duration) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	client := &http.Client{Timeout: time.Second}
	for {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, s.URL+"/v2/", nil)
		if err != nil {
			return err
		}
		if resp, err := client.Do(req); err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK || resp.StatusCode == http.StatusUnauthorized {
				return nil
			}
		}
		select {
		case <-s.done:
			return fmt.Errorf("bench: server exited before answering (%v): %s", s.werr, s.logTail())
		case <-ctx.Done():
			return fmt.Errorf("bench: server at %s did not answer GET /v2/: %w: %s", s.URL, ctx.Err(), s.logTail())
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// logTail returns the last lines of the server's log, on one line.
func (s *LocalServer) logTail() string {
	b, _ := os.ReadFile(s.log)
	if len(b) > 2048 {
		b = b[len(b)-2048:]
	}
	t := strings.Join(strings.Fields(string(b)), " ")
	if t == "" {
		return "(no server output)"
	}
	return "server output: " + t
}

// Stop sends SIGTERM to the server, waits for it to exit (SIGKILL after
// 10 s) and removes its temp dir. An exit forced by SIGKILL is an error.
func (s *LocalServer) Stop() error {
	var errs []error
	select {
	case <-s.done:
	default:
		if err := s.cmd.Process.Signal(syscall.SIGTERM); err != nil && !errors.Is(err, os.ErrProcessDone) {
			errs = append(errs, fmt.Errorf("bench: signal server: %w", err))
		}
		select {
		case <-s.done:
		case <-time.After(10 * time.Second):
			_ = s.cmd.Process.Kill()
			<-s.done
			errs = append(errs, errors.New("bench: server ignored SIGTERM for 10s and was killed"))
		}
	}
	if s.dir != "" {
		if err := os.RemoveAll(s.dir); err != nil {
			errs = append(errs, fmt.Errorf("bench: remove %s: %w", s.dir, err))
		}
	}
	return errors.Join(errs...)
}
