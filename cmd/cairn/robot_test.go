package main

import (
	"bytes"
	"errors"
	"path/filepath"
	"strings"
	"testing"

	"github.com/cairn-registry/cairn/internal/auth"
)

// TestRobotCommands: create prints the key once and writes the audit
// line; a refused request is a usage error; list never shows the key;
// revoke removes it. The checks themselves are auth's (robots_test.go).
func TestRobotCommands(t *testing.T) {
	path := filepath.Join(t.TempDir(), "robots.json")
	run := func(args ...string) (string, string, error) {
		var out, errOut bytes.Buffer
		err := runRobot(t.Context(), append(args, "--file", path), &out, &errOut)
		return out.String(), errOut.String(), err
	}
	out, logs, err := run("create", "ci", "--scope", "team/**:pull,push", "--expires", "1d")
	if err != nil || !strings.Contains(out, "key:     cairn_rk_") {
		t.Fatalf("create: %q %v", out, err)
	}
	key := strings.TrimSpace(strings.SplitN(strings.SplitN(out, "key:", 2)[1], "\n", 2)[0])
	for _, want := range []string{"action=robot.create", "user=robot$ci", "via=cli", "scopes=team/**:pull,push"} {
		if !strings.Contains(logs, want) {
			t.Errorf("create's audit line %q lacks %q", logs, want)
		}
	}
	if strings.Contains(logs, key) {
		t.Error("the key is in the log")
	}
	if _, _, err := run("create", "ci", "--scope", "team/**:pull"); !errors.Is(err, errUsage) || !errors.Is(err, auth.ErrRobotRequest) {
		t.Errorf("a second robot of the same name: %v, want a usage error", err)
	}
	if out, _, err := run("list"); err != nil || !strings.Contains(out, "robot$ci") || strings.Contains(out, key) {
		t.Errorf("list: %q %v", out, err)
	}
	if out, logs, err := run("revoke", "ci"); err != nil || out != "revoked robot$ci\n" || !strings.Contains(logs, "action=robot.revoke") {
		t.Errorf("revoke: %q %q %v", out, logs, err)
	}
	if _, _, err := run("revoke", "ci"); !errors.Is(err, errUsage) {
		t.Errorf("revoking twice: %v, want a usage error", err)
	}
}
