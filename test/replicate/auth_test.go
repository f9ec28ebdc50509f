package replicate

import (
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-containerregistry/pkg/authn"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"golang.org/x/crypto/bcrypt"

	"github.com/cairn-registry/cairn/internal/testutil/htpasswdtest"
	"github.com/cairn-registry/cairn/internal/testutil/poll"
	"github.com/cairn-registry/cairn/internal/testutil/regtest"
)

// TestPushWithCredentials: a target behind htpasswd is reached with the
// username and a password read from a file, onpush alone (no interval):
// with Basic, and through cairn's own token service (Bearer tokens for
// the push scope).
func TestPushWithCredentials(t *testing.T) {
	t.Run("basic", func(t *testing.T) { pushWithCredentials(t, "") })
	t.Run("token", func(t *testing.T) { pushWithCredentials(t, "  tokenservice:\n    service: replication-test\n") })
}

func pushWithCredentials(t *testing.T, authExtra string) {
	htpasswd := htpasswdtest.File(t, bcrypt.MinCost, "replicator", "s3cret")
	pwFile := filepath.Join(t.TempDir(), "password")
	if err := os.WriteFile(pwFile, []byte("s3cret\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	dst := newNode(t, "target")
	dst.configure("auth:\n  htpasswd:\n    realm: replication-test\n    path: " + htpasswd + "\n" + authExtra)
	dst.start()
	src := newNode(t, "source")
	src.configure(fmt.Sprintf(`replication:
  targets:
    - name: dr
      url: %s
      username: replicator
      passwordfile: %s
      direction: push
      onpush: true
`, dst.url(), pwFile))
	src.start()

	d := src.push("app/web:v1", regtest.RandomImage(t, 2, 2048))
	auth := remote.WithAuth(&authn.Basic{Username: "replicator", Password: "s3cret"})
	poll.Within(t, hangGuard, 100*time.Millisecond, func() string {
		if err := regtest.CheckPull(t.Context(), dst.ref("app/web:v1"), d.String(), auth); err != nil {
			return "app/web:v1 on the target (" + err.Error() + ")"
		}
		return ""
	})
	resp, err := http.Get(dst.url() + "/v2/")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	challenge := resp.Header.Get("WWW-Authenticate")
	if want := map[bool]string{false: "Basic", true: "Bearer"}[authExtra != ""]; !strings.HasPrefix(challenge, want) {
		t.Errorf("the target challenges with %q, want %s", challenge, want)
	}
}
