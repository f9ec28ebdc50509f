package dedup

import (
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/cairn-registry/cairn/internal/layout"
	"github.com/cairn-registry/cairn/internal/testutil/cairnproc"
	"github.com/cairn-registry/cairn/internal/testutil/poll"
)

// redisProc is a redis-server of the test's own, on addr, without
// persistence: stopping it loses everything, as a crash of an unpersisted
// Redis does.
type redisProc struct {
	t    *testing.T
	addr string
	cmd  *exec.Cmd
}

func startRedis(t *testing.T, addr string) *redisProc {
	t.Helper()
	bin, err := exec.LookPath("redis-server")
	if err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatal("redis-server not found")
		}
		t.Skip("redis-server not found")
	}
	_, port, _ := strings.Cut(addr, ":")
	cmd := exec.Command(bin, "--port", port, "--bind", "127.0.0.1", "--save", "", "--appendonly", "no", "--dir", t.TempDir())
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	r := &redisProc{t: t, addr: addr, cmd: cmd}
	t.Cleanup(r.stop)
	poll.Until(t, 50*time.Millisecond, func() string {
		if out, err := exec.Command("redis-cli", "-p", port, "ping").Output(); err != nil || strings.TrimSpace(string(out)) != "PONG" {
			return "redis-server on " + addr
		}
		return ""
	})
	return r
}

// stop kills the server by its PID and waits for it.
func (r *redisProc) stop() {
	if r.cmd.ProcessState == nil {
		r.cmd.Process.Kill()
		r.cmd.Wait()
	}
}

// TestRedisOutageDefersIntake stops the metadata store's Redis while images
// are pushed: the pushes succeed, their dedup intake is written to storage
// and counted as deferred, and once a Redis answers again (empty: it kept
// nothing) the running node records them, rebuilds the index from storage,
// and every layer ends up deduplicated and pulls byte for byte. Before
// this, those layers stayed intact for good.
func TestRedisOutageDefersIntake(t *testing.T) {
	addr := cairnproc.FreeAddr(t)
	r := startRedis(t, addr)
	debug := cairnproc.FreeAddr(t)
	cfg := cairnproc.WriteConfig(t, fmt.Sprintf(`version: 0.1
log: {level: debug}
http:
  debug: {addr: %q}
storage:
  filesystem: {rootdirectory: /unused}
  dedup:
    mode: full
    workers: 1
    metadata: {redis: {addr: %q, prefix: "outage:"}}
`, debug, addr))
	root := t.TempDir()
	srv := cairnproc.Start(t, root, "--config", cfg)
	all := allLayers(t)
	before, during := all[:3], all[3:6]
	push(t, srv, "outage/before", before)
	waitState(t, root, before, false)

	if code := readyz(t, debug); code != http.StatusOK {
		t.Fatalf("/readyz = %d with Redis up", code)
	}
	r.stop()
	if code := readyz(t, debug); code != http.StatusServiceUnavailable {
		t.Fatalf("/readyz = %d with the metadata store down, want 503", code)
	}
	push(t, srv, "outage/during", during)
	intake := filepath.Join(root, layout.DedupIntakeDir)
	poll.Until(t, 100*time.Millisecond, func() string {
		if es, _ := os.ReadDir(intake); len(es) == 0 {
			return "the deferred intake record"
		}
		return ""
	})

	startRedis(t, addr)
	if code := readyz(t, debug); code != http.StatusOK {
		t.Fatalf("/readyz = %d with Redis back", code)
	}
	waitState(t, root, append(append([]testLayer{}, before...), during...), false)
	poll.Until(t, 200*time.Millisecond, func() string {
		if es, _ := os.ReadDir(intake); len(es) > 0 {
			return fmt.Sprintf("%d deferred intake records to be drained", len(es))
		}
		return ""
	})
	// The layers deduplicated before the outage are served once the
	// index is rebuilt (a 503 or a cut pull until then).
	pullAfterRebuild(t, srv, "outage/before", before)
	pullAll(t, srv, "outage/during", during)
}

// readyz returns the status of the debug listener's /readyz.
func readyz(t *testing.T, debug string) int {
	t.Helper()
	resp, err := http.Get("http://" + debug + "/readyz")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	return resp.StatusCode
}
