// Package clitool finds the real client tools (crane, skopeo, podman, ...)
// that end-to-end tests drive, with one policy for when one is missing.
package clitool

import (
	"os"
	"os/exec"
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
