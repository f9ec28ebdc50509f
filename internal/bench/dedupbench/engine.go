package dedupbench

import (
	"bytes"
	"context"
	"encoding/json"
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

// engineConfig is one cairn configuration of the run: all share the storage
// root and the metadata store; each phase gets its own (empty) preconstruct
// cache directory so that every phase starts cold.
type engineConfig struct {
	Root, Meta, CacheDir string
	Mode                 string // off, index, full, selective
	PreconstructSize     string
	PrefetchSize         string
	Predictor            bool
	RepullRatio          float64
	Addr, DebugAddr      string
}

// write renders c as a distribution-style config file at path.
func (c engineConfig) write(path string) error {
	y := fmt.Sprintf(`version: 0.1
log:
  level: warn
http:
  addr: %q
  debug:
    addr: %q
storage:
  filesystem:
    rootdirectory: %q
  dedup:
    mode: %s
    workers: 2
    metadata:
      path: %q
    cache:
      preconstruct:
        dir: %q
        size: %s
      prefetch:
        size: %s
    predictor:
      enabled: %t
      repullratio: %g
`, c.Addr, c.DebugAddr, c.Root, c.Mode, c.Meta, c.CacheDir, c.PreconstructSize, c.PrefetchSize, c.Predictor, c.RepullRatio)
	if err := os.WriteFile(path, []byte(y), 0o644); err != nil {
		return fmt.Errorf("dedupbench: write config: %w", err)
	}
	return nil
}

// server is a running `cairn serve --config FILE`.
type server struct {
	URL, MetricsURL string

	cmd  *exec.Cmd
	log  string
	done chan struct{}
	werr error
}

// startServer writes cfg to dir/name.yaml (on fresh loopback ports) and
// runs bin serve with it until GET /v2/ answers.
func startServer(ctx context.Context, bin, dir, name string, cfg engineConfig) (*server, error) {
	var err error
	if cfg.Addr, err = freeAddr(); err != nil {
		return nil, err
	}
	if cfg.DebugAddr, err = freeAddr(); err != nil {
		return nil, err
	}
	path := filepath.Join(dir, name+".yaml")
	if err := cfg.write(path); err != nil {
		return nil, err
	}
	s := &server{
		URL:        "http://" + cfg.Addr,
		MetricsURL: "http://" + cfg.DebugAddr + "/metrics",
		log:        filepath.Join(dir, name+".log"),
		done:       make(chan struct{}),
	}
	logf, err := os.Create(s.log)
	if err != nil {
		return nil, fmt.Errorf("dedupbench: server log: %w", err)
	}
	// Not CommandContext: stop sends SIGTERM and waits.
	s.cmd = exec.Command(bin, "serve", "--config", path)
	s.cmd.Stdout, s.cmd.Stderr = logf, logf
	if err := s.cmd.Start(); err != nil {
		logf.Close()
		return nil, fmt.Errorf("dedupbench: start %s serve: %w", bin, err)
	}
	go func() {
		s.werr = s.cmd.Wait()
		logf.Close()
		close(s.done)
	}()
	if err := s.waitReady(ctx, 30*time.Second); err != nil {
		_ = s.stop()
		return nil, err
	}
	return s, nil
}

func freeAddr() (string, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", fmt.Errorf("dedupbench: find a free port: %w", err)
	}
	defer l.Close()
	return l.Addr().String(), nil
}

func (s *server) waitReady(ctx context.Context, timeout time.Duration) error {
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
			if resp.StatusCode == http.StatusOK {
				return nil
			}
		}
		select {
		case <-s.done:
			return fmt.Errorf("dedupbench: cairn serve exited (%v): %s", s.werr, logTail(s.log))
		case <-ctx.Done():
			return fmt.Errorf("dedupbench: cairn serve at %s did not answer GET /v2/: %w: %s", s.URL, ctx.Err(), logTail(s.log))
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// stop sends SIGTERM to the server's PID and waits (SIGKILL after 20 s).
func (s *server) stop() error {
	select {
	case <-s.done:
		return nil
	default:
	}
	if err := s.cmd.Process.Signal(syscall.SIGTERM); err != nil && !errors.Is(err, os.ErrProcessDone) {
		return fmt.Errorf("dedupbench: signal cairn serve: %w", err)
	}
	select {
	case <-s.done:
		return nil
	case <-time.After(20 * time.Second):
		_ = s.cmd.Process.Kill()
		<-s.done
		return errors.New("dedupbench: cairn serve ignored SIGTERM for 20s and was killed")
	}
}

// logTail returns the last lines of a log file on one line.
func logTail(path string) string {
	b, _ := os.ReadFile(path)
	if len(b) > 1500 {
		b = b[len(b)-1500:]
	}
	t := strings.Join(strings.Fields(string(b)), " ")
	if t == "" {
		return "(no output)"
	}
	return "output: " + t
}

// runCairn runs bin with args to completion and returns its stdout; a
// failure quotes the end of its stderr.
func runCairn(ctx context.Context, bin string, args ...string) ([]byte, error) {
	cmd := exec.CommandContext(ctx, bin, args...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		return nil, fmt.Errorf("dedupbench: cairn %s: %w: %s", strings.Join(args[:min(2, len(args))], " "), err, logTailString(stderr.String()))
	}
	return stdout.Bytes(), nil
}

func logTailString(s string) string {
	if len(s) > 600 {
		s = s[len(s)-600:]
	}
	t := strings.Join(strings.Fields(s), " ")
	if t == "" {
		return "(no output)"
	}
	return t
}

// Stats is the part of `cairn dedup stats --json` the bench reads.
type Stats struct {
	LogicalBytes int64 `json:"logicalBytes"`
	StoredBytes  struct {
		Intact  int64 `json:"intact"`
		Files   int64 `json:"files"`
		Recipes int64 `json:"recipes"`
		Total   int64 `json:"total"`
	} `json:"storedBytes"`
	Ratio  float64          `json:"ratio"`
	Layers map[string]int64 `json:"layers"`
	Files  struct {
		Unique      int64 `json:"unique"`
		Shared      int64 `json:"shared"`
		Bytes       int64 `json:"bytes"`
		StoredBytes int64 `json:"storedBytes"`
	} `json:"files"`
	Encoders map[string]int64 `json:"encoders"`
}

func dedupStats(ctx context.Context, bin, cfgPath string) (*Stats, error) {
	out, err := runCairn(ctx, bin, "dedup", "stats", "--config", cfgPath, "--json")
	if err != nil {
		return nil, err
	}
	var st Stats
	if err := json.Unmarshal(out, &st); err != nil {
		return nil, fmt.Errorf("dedupbench: cairn dedup stats --json: %w", err)
	}
	return &st, nil
}
