package notify

import (
	"bytes"
	"crypto/sha256"
	"fmt"
	"net/http"
	"testing"

	"golang.org/x/crypto/bcrypt"

	"github.com/cairn-registry/cairn/internal/notify"
	"github.com/cairn-registry/cairn/internal/testutil/cairnproc"
	"github.com/cairn-registry/cairn/internal/testutil/htpasswdtest"
)

// TestActorAndMonolithicPush: with htpasswd, events name the user as
// actor; a blob pushed in one POST (?digest=) is a push event with its
// size; a refused request (wrong password) gives no event.
func TestActorAndMonolithicPush(t *testing.T) {
	rc := newReceiver(t)
	htpasswd := htpasswdtest.File(t, bcrypt.MinCost, "alice", "secret")
	srv := startCairn(t, "", `
auth:
  htpasswd: {realm: cairn, path: `+htpasswd+`}
notifications:
  endpoints:
    - name: e
      url: `+rc.srv.URL+`/hook
      headers:
        X-Test: ["yes"]
`, cairnproc.FreeAddr(t))
	blob := bytes.Repeat([]byte("cairn"), 1000)
	d := fmt.Sprintf("sha256:%x", sha256.Sum256(blob))
	post := func(password string) int {
		req, _ := http.NewRequest(http.MethodPost, srv.URL+"/v2/actor/x/blobs/uploads/?digest="+d, bytes.NewReader(blob))
		req.SetBasicAuth("alice", password)
		req.Header.Set("User-Agent", "notify-test/1")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	if s := post("wrong"); s != http.StatusUnauthorized {
		t.Fatalf("wrong password: %d", s)
	}
	if s := post("secret"); s != http.StatusCreated {
		t.Fatalf("monolithic push: %d", s)
	}
	evs := rc.waitFor(t, srv, "blob push", func(ev notify.Event) bool { return ev.Action == notify.ActionPush })
	if len(evs) != 1 {
		t.Fatalf("%d events, want the push alone:\n%s", len(evs), dump(evs))
	}
	ev := evs[0]
	if ev.Actor.Name != "alice" || ev.Request.Method != http.MethodPost || ev.Request.UserAgent != "notify-test/1" ||
		ev.Target.Digest.String() != d || ev.Target.Size != int64(len(blob)) || ev.Target.Repository != "actor/x" {
		t.Errorf("event = %+v", ev)
	}
}
