package config

import (
	"strings"
	"testing"
	"time"
)

const replicationConfig = `
replication:
  targets:
    - name: dr
      url: https://dr.example.com
      username: replicator
      passwordfile: /run/secrets/dr
      direction: push
      onpush: true
      interval: 10m
      repositories:
        include: ["team/**"]
        exclude: ["team/scratch"]
      tags:
        exclude: ["tmp-*"]
    - name: upstream
      url: http://10.0.0.2:5000
      direction: pull
      interval: 1h
      disabled: true
`

func TestReplicationLoads(t *testing.T) {
	c, _, err := Parse([]byte(replicationConfig))
	if err != nil {
		t.Fatal(err)
	}
	r := c.Replication
	if len(r.Targets) != 2 || len(r.Enabled()) != 1 {
		t.Fatalf("targets %+v", r.Targets)
	}
	dr := r.Targets[0]
	if dr.Name != "dr" || dr.Direction != "push" || !dr.OnPush || dr.Interval != 10*time.Minute ||
		dr.PasswordFile != "/run/secrets/dr" || dr.Repositories.Exclude[0] != "team/scratch" || dr.Tags.Exclude[0] != "tmp-*" {
		t.Fatalf("dr: %+v", dr)
	}
}

func TestReplicationRefusals(t *testing.T) {
	target := func(extra string) string {
		return "replication:\n  targets:\n    - name: t\n      url: http://x.example\n" + extra
	}
	for _, c := range []struct{ doc, want string }{
		{target("      direction: sideways\n      interval: 1m\n"), `direction: "sideways" is not push or pull`},
		{target("      direction: pull\n      onpush: true\n      interval: 1m\n"), "onpush: only push targets"},
		{target("      direction: pull\n"), "interval: required unless onpush"},
		{target("      direction: push\n      interval: 1m\n      password: a\n      passwordenv: B\n"), "give one of password"},
		{target("      direction: push\n      interval: 1m\n      repositories:\n        include: [Team]\n"), "repositories:"},
		{target("      direction: push\n      interval: 1m\n      tags:\n        include: [\"v1/x\"]\n"), "is not a tag pattern"},
		{"replication:\n  targets:\n    - name: Bad/Name\n      url: http://x.example\n      direction: push\n      interval: 1m\n", "replication.targets[0].name"},
		{"replication:\n  targets:\n    - name: t\n      url: ftp://x\n      direction: push\n      interval: 1m\n", "url:"},
		{target("      direction: push\n      interval: 1m\n") + "    - name: t\n      url: http://y.example\n      direction: push\n      interval: 1m\n", "names two targets"},
	} {
		_, _, err := Parse([]byte(c.doc))
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: got %v, want an error with %q", c.doc, err, c.want)
		}
	}
}
