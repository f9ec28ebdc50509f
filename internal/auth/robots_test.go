package auth

import (
	"bytes"
	"errors"
	"log/slog"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/cairn-registry/cairn/internal/notify"
)

func TestParseRobotLifetime(t *testing.T) {
	for in, want := range map[string]time.Duration{"never": 0, "90d": 90 * 24 * time.Hour, "1d": 24 * time.Hour, "36h": 36 * time.Hour} {
		if got, err := ParseRobotLifetime(in); err != nil || got != want {
			t.Errorf("ParseRobotLifetime(%q) = %v, %v; want %v", in, got, err, want)
		}
	}
	for _, bad := range []string{"", "0d", "-1d", "xd", "-5h", "0s", "soon"} {
		if _, err := ParseRobotLifetime(bad); err == nil {
			t.Errorf("ParseRobotLifetime(%q) accepted", bad)
		}
	}
}

// TestCreateAndRevokeRobot: create refuses a name in use, bad names,
// scopes and expiries as requests (ErrRobotRequest, nothing written);
// revoke removes the key; the file keeps only hashes.
func TestCreateAndRevokeRobot(t *testing.T) {
	path := filepath.Join(t.TempDir(), "robots.json")
	now := time.Now()
	rb, secret, err := CreateRobot(path, RobotRequest{Name: "ci", Scopes: []string{"team/**:pull,push"}, Expires: "1h"}, now)
	if err != nil || !strings.HasPrefix(secret, "cairn_rk_") || rb.Expires.Before(now) {
		t.Fatalf("create: %+v %q %v", rb, secret, err)
	}
	if rb, _, err := CreateRobot(path, RobotRequest{Name: "default", Scopes: []string{"a:pull"}}, now); err != nil || rb.Expires.Sub(now) < 89*24*time.Hour {
		t.Errorf("default expiry: %v, %v", rb.Expires, err)
	}
	for _, req := range []RobotRequest{
		{Name: "ci", Scopes: []string{"team/**:pull"}},
		{Name: "other", Scopes: []string{"team/**"}},
		{Name: "other", Scopes: []string{"Team/**:pull"}},
		{Name: "other", Scopes: []string{"team/**:read"}},
		{Name: "other"},
		{Name: "Other", Scopes: []string{"team/**:pull"}},
		{Name: "other", Scopes: []string{"team/**:pull"}, Expires: "soon"},
	} {
		if _, _, err := CreateRobot(path, req, now); !errors.Is(err, ErrRobotRequest) {
			t.Errorf("CreateRobot(%+v) = %v, want ErrRobotRequest", req, err)
		}
	}
	robots, err := ReadRobots(path)
	if err != nil || len(robots) != 2 || strings.Contains(robots[0].Hash, secret) || robots[0].Hash == "" {
		t.Fatalf("file: %+v, %v", robots, err)
	}
	if gone, err := RevokeRobot(path, "ci"); err != nil || gone.Name != "ci" {
		t.Fatalf("revoke: %+v, %v", gone, err)
	}
	if _, err := RevokeRobot(path, "ci"); !errors.Is(err, ErrRobotRequest) {
		t.Errorf("revoking a robot twice: %v, want ErrRobotRequest", err)
	}
	if robots, _ := ReadRobots(path); len(robots) != 1 {
		t.Errorf("after revoke: %+v", robots)
	}
}

// TestRobotChangeAudit: the audit line names the key, who and how, and
// never holds the secret; the event's actor is the robot.
func TestRobotChangeAudit(t *testing.T) {
	path := filepath.Join(t.TempDir(), "robots.json")
	rb, secret, err := CreateRobot(path, RobotRequest{Name: "ci", Scopes: []string{"team/**:pull"}, Expires: "never"}, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	var b bytes.Buffer
	c := RobotChange{Action: notify.ActionRobotCreate, Robot: rb, By: "alice", Via: "web", File: path}
	c.Audit(slog.New(slog.NewTextHandler(&b, nil)))
	for _, want := range []string{"msg=audit", "action=robot.create", "user=robot$ci", "by=alice", "via=web", "expires=never", `scopes=team/**:pull`} {
		if !strings.Contains(b.String(), want) {
			t.Errorf("audit line %q lacks %q", b.String(), want)
		}
	}
	if strings.Contains(b.String(), secret) || strings.Contains(b.String(), rb.Hash) {
		t.Errorf("audit line holds the key or its hash: %s", b.String())
	}
	if e := c.Event(); e.Action != notify.ActionRobotCreate || e.Actor.Name != "robot$ci" {
		t.Errorf("event %+v", e)
	}
}

// TestManagesRobots: admins with every action, and users without access
// control; never anonymous callers, robots, or admins limited to pull.
func TestManagesRobots(t *testing.T) {
	ac := &acl{admin: Policy{Users: []string{"alice"}, Actions: []string{"*"}}}
	pullAdmin := &acl{admin: Policy{Users: []string{"alice"}, Actions: []string{"pull"}}}
	for _, c := range []struct {
		what string
		g    Grant
		want bool
	}{
		{"admin", Grant{Subject: "alice", acl: &aclCaller{acl: ac, user: "alice", authenticated: true}}, true},
		{"not admin", Grant{Subject: "bob", acl: &aclCaller{acl: ac, user: "bob", authenticated: true}}, false},
		{"admin with pull only", Grant{Subject: "alice", acl: &aclCaller{acl: pullAdmin, user: "alice", authenticated: true}}, false},
		{"anonymous", Grant{acl: &aclCaller{acl: ac}}, false},
		{"user without access control", Grant{Subject: "alice", all: true}, true},
		{"anonymous without access control", Grant{anonymousPull: true}, false},
		{"robot", Grant{Subject: "robot$alice", robot: &Robot{Name: "alice"}, acl: &aclCaller{acl: ac}}, false},
		{"robot token", Grant{Subject: "robot$ci", robotID: "x", access: map[resource][]string{}}, false},
		{"external token", Grant{Subject: "alice", access: map[resource][]string{}}, false},
	} {
		if got := c.g.ManagesRobots(); got != c.want {
			t.Errorf("%s: ManagesRobots = %v, want %v", c.what, got, c.want)
		}
	}
}
