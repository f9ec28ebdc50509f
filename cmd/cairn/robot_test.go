package main

import (
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/cairn-registry/cairn/internal/auth"
)

func TestParseLifetime(t *testing.T) {
	for in, want := range map[string]time.Duration{"never": 0, "90d": 90 * 24 * time.Hour, "1d": 24 * time.Hour, "36h": 36 * time.Hour} {
		if got, err := parseLifetime(in); err != nil || got != want {
			t.Errorf("parseLifetime(%q) = %v, %v; want %v", in, got, err, want)
		}
	}
	for _, bad := range []string{"", "0d", "-1d", "xd", "-5h", "0s", "soon"} {
		if _, err := parseLifetime(bad); err == nil {
			t.Errorf("parseLifetime(%q) accepted", bad)
		}
	}
}

// TestRobotFile: create refuses a name in use and bad scopes; revoke
// removes the key; the file keeps only hashes.
func TestRobotFile(t *testing.T) {
	path := filepath.Join(t.TempDir(), "robots.json")
	now := time.Now()
	rb, secret, err := createRobot(path, "ci", []string{"team/**:pull,push"}, time.Hour, now)
	if err != nil || !strings.HasPrefix(secret, "cairn_rk_") || rb.Expires.Before(now) {
		t.Fatalf("create: %+v %q %v", rb, secret, err)
	}
	if _, _, err := createRobot(path, "ci", []string{"team/**:pull"}, 0, now); err == nil {
		t.Error("a second robot of the same name was created")
	}
	for _, scope := range []string{"team/**", "Team/**:pull", "team/**:read"} {
		if _, _, err := createRobot(path, "other", []string{scope}, 0, now); err == nil {
			t.Errorf("scope %q accepted", scope)
		}
	}
	robots, err := auth.ReadRobots(path)
	if err != nil || len(robots) != 1 || strings.Contains(robots[0].Hash, secret) || robots[0].Hash == "" {
		t.Fatalf("file: %+v, %v", robots, err)
	}
	if err := revokeRobot(path, "ci"); err != nil {
		t.Fatal(err)
	}
	if err := revokeRobot(path, "ci"); err == nil {
		t.Error("revoking a robot twice succeeded")
	}
	if robots, _ := auth.ReadRobots(path); len(robots) != 0 {
		t.Errorf("after revoke: %+v", robots)
	}
}
