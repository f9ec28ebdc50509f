package webui

import (
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"golang.org/x/crypto/bcrypt"

	"github.com/cairn-registry/cairn/internal/auth"
)

// TestLoginRedirect: with a login configured (OIDC), a visitor without
// credentials is sent there and back, one with wrong credentials is
// refused as before, and a logged-in visitor sees who they are and where
// to log out.
func TestLoginRedirect(t *testing.T) {
	hash, err := bcrypt.GenerateFromPassword([]byte("pw"), bcrypt.MinCost)
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "htpasswd")
	if err := os.WriteFile(path, []byte("alice:"+string(hash)+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	users, err := auth.LoadHtpasswd("cairn", path)
	if err != nil {
		t.Fatal(err)
	}
	basic, err := auth.NewBasic("cairn", auth.NewAccounts(users, nil, nil), nil, false)
	if err != nil {
		t.Fatal(err)
	}
	h := Handler(Options{Registry: fakeRegistry{[]string{"team/app"}}, Prefix: "/ui", Auth: basic, Login: auth.LoginURL, Logout: "/auth/oidc/logout"})
	get := func(user, pass string) *httptest.ResponseRecorder {
		req := httptest.NewRequest(http.MethodGet, "/ui/repo/team/app?x=1", nil)
		if user != "" {
			req.SetBasicAuth(user, pass)
		}
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		return rec
	}
	if rec := get("", ""); rec.Code != http.StatusSeeOther || rec.Header().Get("Location") != "/auth/oidc/login?next=%2Fui%2Frepo%2Fteam%2Fapp%3Fx%3D1" {
		t.Errorf("no credentials: %d, Location %q", rec.Code, rec.Header().Get("Location"))
	}
	if rec := get("alice", "wrong"); rec.Code != http.StatusUnauthorized {
		t.Errorf("a wrong password: %d, want 401", rec.Code)
	}
	rec := get("alice", "pw")
	if body := rec.Body.String(); rec.Code != 200 || !strings.Contains(body, `id="user">alice<`) || !strings.Contains(body, `href="/auth/oidc/logout"`) {
		t.Errorf("alice: %d\n%s", rec.Code, body)
	}
}
