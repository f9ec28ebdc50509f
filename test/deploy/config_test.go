package deploy

import (
	"path/filepath"
	"strings"
	"testing"
)

// TestExampleConfig: deploy/config.yml loads with `cairn config check`
// (no unknown key, no invalid value) and a registry started with it
// answers its probes.
func TestExampleConfig(t *testing.T) {
	path := filepath.Join(repoRoot(t), "deploy", "config.yml")
	out := configCheck(t, path)
	if !strings.Contains(out, "rootdirectory: /var/lib/cairn") {
		t.Errorf("cairn config check deploy/config.yml:\n%s\nwant the storage in /var/lib/cairn, the systemd unit's StateDirectory", out)
	}
	serveProbes(t, path)
}
