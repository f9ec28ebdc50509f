package dedupbench

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	"github.com/cairn-registry/cairn/internal/bench"
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
	Parses               bool // storage.dedup.packs.parses
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
    packs:
      parses: %t
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
`, c.Addr, c.DebugAddr, c.Root, c.Mode, c.Parses, c.Meta, c.CacheDir, c.PreconstructSize, c.PrefetchSize, c.Predictor, c.RepullRatio)
	if err := os.WriteFile(path, []byte(y), 0o644); err != nil {
		return fmt.Errorf("dedupbench: write config: %w", err)
	}
	return nil
}

// server is a running `cairn serve --config FILE`.
type server struct {
	*bench.LocalServer
	MetricsURL string
}

// startServer writes cfg to dir/name.yaml (on fresh loopback ports) and
// runs bin serve with it until GET /v2/ answers.
func startServer(ctx context.Context, bin, dir, name string, cfg engineConfig) (*server, error) {
	var err error
	if cfg.Addr, err = bench.FreeAddr(); err != nil {
		return nil, err
	}
	if cfg.DebugAddr, err = bench.FreeAddr(); err != nil {
		return nil, err
	}
	path := filepath.Join(dir, name+".yaml")
	if err := cfg.write(path); err != nil {
		return nil, err
	}
	ls, err := bench.StartServerWith(ctx, bin, cfg.Addr, filepath.Join(dir, name+".log"), "--config", path)
	if err != nil {
		return nil, err
	}
	return &server{LocalServer: ls, MetricsURL: "http://" + cfg.DebugAddr + "/metrics"}, nil
}

// runCairn runs bin with args to completion and returns its stdout; a
// failure quotes the end of its stderr.
func runCairn(ctx context.Context, bin string, args ...string) ([]byte, error) {
	out, _, err := runCairnCPU(ctx, bin, args...)
	return out, err
}

// runCairnCPU is runCairn that also returns the CPU time (user and
// system) the process used.
func runCairnCPU(ctx context.Context, bin string, args ...string) ([]byte, time.Duration, error) {
	cmd := exec.CommandContext(ctx, bin, args...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		return nil, 0, fmt.Errorf("dedupbench: cairn %s: %w: %s", strings.Join(args[:min(2, len(args))], " "), err, logTailString(stderr.String()))
	}
	return stdout.Bytes(), cmd.ProcessState.UserTime() + cmd.ProcessState.SystemTime(), nil
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
