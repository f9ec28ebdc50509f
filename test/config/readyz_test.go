package config

import (
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/cairn-registry/cairn/internal/testutil/cairnproc"
	"github.com/cairn-registry/cairn/internal/testutil/regtest"
)

// TestReadyzProvesWrites: /readyz must not say ready while the store
// refuses writes (the first push would fail). The root is a tmpfs
// remounted read-only, then read-write again; /readyz follows, naming the
// cause. Needs root to mount; skips without it, except in CI.
func TestReadyzProvesWrites(t *testing.T) {
	dir := t.TempDir()
	if out, err := exec.Command("mount", "-t", "tmpfs", "-o", "size=64m", "tmpfs", dir).CombinedOutput(); err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatalf("mount tmpfs: %v: %s", err, out)
		}
		t.Skipf("mount tmpfs (needs root): %v: %s", err, out)
	}
	t.Cleanup(func() {
		// After the server stopped (cleanups run last registered first).
		exec.Command("mount", "-o", "remount,rw", dir).Run()
		if out, err := exec.Command("umount", dir).CombinedOutput(); err != nil {
			t.Errorf("umount %s: %v: %s", dir, err, out)
		}
	})
	remount := func(mode string) {
		t.Helper()
		if out, err := exec.Command("mount", "-o", "remount,"+mode, dir).CombinedOutput(); err != nil {
			t.Fatalf("remount %s %s: %v: %s", dir, mode, err, out)
		}
		err := os.WriteFile(filepath.Join(dir, "probe"), nil, 0o644)
		if (err == nil) != (mode == "rw") {
			t.Fatalf("after remount,%s a write gives %v", mode, err)
		}
		os.Remove(filepath.Join(dir, "probe"))
	}

	debug := cairnproc.FreeAddr(t)
	cfg := cairnproc.WriteConfig(t, fmt.Sprintf("http:\n  debug:\n    addr: %q\n", debug))
	srv := cairnproc.Start(t, dir, "--config", cfg)
	readyz := func() regtest.Response {
		return regtest.Do(t, hc, http.MethodGet, "http://"+debug+"/readyz", nil)
	}
	ready := func(want bool) {
		t.Helper()
		eventually(t, fmt.Sprintf("/readyz ready=%v", want), func() (bool, string) {
			r := readyz()
			state := fmt.Sprintf("%d %q", r.Status, r.Body)
			if want {
				return r.Status == http.StatusOK, state
			}
			return r.Status == http.StatusServiceUnavailable && strings.Contains(string(r.Body), "read-only"), state
		})
	}
	ready(true)
	remount("ro")
	ready(false)
	remount("rw")
	ready(true)
	srv.Stop()
}
