package webui

import (
	"path/filepath"
	"strings"
	"testing"
	"time"

	"golang.org/x/crypto/bcrypt"

	"github.com/cairn-registry/cairn/internal/auth"
	"github.com/cairn-registry/cairn/internal/testutil/cairnproc"
	"github.com/cairn-registry/cairn/internal/testutil/htpasswdtest"
)

// TestRobotKeysPageInBrowser: headless Chromium shows an admin the robot
// keys (name, scopes, expiry; never the key) and the form to create one;
// a screenshot is kept as a test artifact.
func TestRobotKeysPageInBrowser(t *testing.T) {
	users := htpasswdtest.File(t, bcrypt.MinCost, "alice", "alice-pw")
	srv := cairnproc.Start(t, "", "--config", cairnproc.WriteConfig(t, "ui:\n  enabled: true\nauth:\n  htpasswd:\n    realm: cairn\n    path: "+users+`
  accesscontrol:
    adminpolicy: {users: [alice], actions: ["*"]}
    repositories:
      "team/**": {defaultpolicy: [pull]}
`))
	// The robot file is cairn serve's default, beside the storage.
	_, key, err := auth.CreateRobot(filepath.Join(srv.Root, "cairn-robots.json"), auth.RobotRequest{Name: "ci", Scopes: []string{"team/**:pull,push", "cache/*:pull"}, Expires: "never"}, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	// Chromium sends the URL's credentials as Basic on the top-level page.
	url := strings.Replace(srv.URL, "://", "://alice:alice-pw@", 1) + "/ui/robots/"
	dom := chromium(t, url, filepath.Join(t.ArtifactDir(), "robots.png"))
	for _, want := range []string{"robot$ci", "team/**:pull,push", "cache/*:pull", "never", `id="create"`, `name="csrf"`} {
		if !strings.Contains(dom, want) {
			t.Errorf("the page lacks %q:\n%s", want, dom)
		}
	}
	if strings.Contains(dom, key) {
		t.Error("the page shows the key")
	}
}
