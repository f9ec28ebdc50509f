package auth

import (
	"errors"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"golang.org/x/crypto/bcrypt"
)

func bcryptHash(t *testing.T, pass string) string {
	t.Helper()
	h, err := bcrypt.GenerateFromPassword([]byte(pass), bcrypt.MinCost)
	if err != nil {
		t.Fatal(err)
	}
	return string(h)
}

func TestParseHtpasswd(t *testing.T) {
	alice := bcryptHash(t, "wonderland")
	// htpasswd -B writes $2y$; x/crypto writes $2a$; both are bcrypt.
	bob := "$2y$" + strings.TrimPrefix(bcryptHash(t, "builder"), "$2a$")
	users, err := ParseHtpasswd(strings.NewReader("# users\n\nalice:" + alice + "\n  bob:" + bob + "  \n"))
	if err != nil {
		t.Fatal(err)
	}
	if len(users) != 2 || string(users["alice"]) != alice || string(users["bob"]) != bob {
		t.Errorf("users = %q", users)
	}

	bad := []struct{ name, line, want string }{
		{"md5", "carol:$apr1$Wk3bOemC$jZ6TFpSGiKX6lYc9yLkMA1", `line 2: user "carol" has a MD5 (apr1) hash; cairn accepts only bcrypt`},
		{"sha1", "carol:{SHA}W6ph5Mm5Pz8GgiULbPgzG37mj9g=", `line 2: user "carol" has a SHA-1 hash`},
		{"sha512 crypt", "carol:$6$salt$abc", `line 2: user "carol" has a SHA-512-crypt hash`},
		{"plain", "carol:password", `line 2: user "carol" has a crypt or plain-text hash`},
		{"malformed bcrypt", "carol:$2y$10$short", `line 2: user "carol": malformed bcrypt hash`},
		{"no colon", "carol", `line 2: not of the form user:hash`},
		{"empty user", ":" + alice, `line 2: not of the form user:hash`},
		{"duplicate", "alice:" + alice, `line 2: user "alice" given twice`},
	}
	for _, b := range bad {
		t.Run(b.name, func(t *testing.T) {
			_, err := ParseHtpasswd(strings.NewReader("alice:" + alice + "\n" + b.line + "\n"))
			if err == nil || !strings.HasPrefix(err.Error(), b.want) {
				t.Errorf("err = %v\nwant prefix %s", err, b.want)
			}
		})
	}
	if _, err := ParseHtpasswd(strings.NewReader("# nobody\n")); err == nil {
		t.Error("a file without users was accepted")
	}
}

func TestLoadHtpasswdErrorsNameTheFile(t *testing.T) {
	dir := t.TempDir()
	if _, err := LoadHtpasswd("r", filepath.Join(dir, "missing")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("missing file: err = %v", err)
	}
	p := filepath.Join(dir, "htpasswd")
	if err := os.WriteFile(p, []byte("u:{SHA}x\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := LoadHtpasswd("r", p); err == nil || !strings.HasPrefix(err.Error(), p+": line 1:") {
		t.Errorf("err = %v, want it to name %s and the line", err, p)
	}
}

func TestHtpasswdAuthorize(t *testing.T) {
	h, err := NewHtpasswd("cairn realm", map[string][]byte{"alice": []byte(bcryptHash(t, "wonderland"))})
	if err != nil {
		t.Fatal(err)
	}
	need := Needed(EndpointManifest, "a", http.MethodPut)
	req := func(set func(*http.Request)) *http.Request {
		r := httptest.NewRequest(http.MethodPut, "/v2/a/manifests/latest", nil)
		if set != nil {
			set(r)
		}
		return r
	}
	cases := []struct {
		name    string
		set     func(*http.Request)
		wantErr error
	}{
		{"no credentials", nil, ErrNoCredentials},
		{"bearer instead of basic", func(r *http.Request) { r.Header.Set("Authorization", "Bearer abc") }, ErrNoCredentials},
		{"wrong password", func(r *http.Request) { r.SetBasicAuth("alice", "looking-glass") }, ErrInvalidCredentials},
		{"unknown user", func(r *http.Request) { r.SetBasicAuth("mallory", "wonderland") }, ErrInvalidCredentials},
		{"empty password", func(r *http.Request) { r.SetBasicAuth("alice", "") }, ErrInvalidCredentials},
		{"right password", func(r *http.Request) { r.SetBasicAuth("alice", "wonderland") }, nil},
		// Twice: the second answer comes from the verified cache and must
		// not differ.
		{"right password again", func(r *http.Request) { r.SetBasicAuth("alice", "wonderland") }, nil},
		{"wrong password after a right one", func(r *http.Request) { r.SetBasicAuth("alice", "wonderland!") }, ErrInvalidCredentials},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			g, err := h.Authorize(req(c.set), need)
			if c.wantErr == nil {
				if err != nil || g.Subject != "alice" || !g.Allows(Access{TypeRegistry, "catalog", "*"}) {
					t.Fatalf("grant %+v, err %v; want alice with full access", g, err)
				}
				return
			}
			var ch *Challenge
			if !errors.As(err, &ch) || !errors.Is(err, c.wantErr) {
				t.Fatalf("err = %v, want a challenge for %v", err, c.wantErr)
			}
			if ch.Status() != http.StatusUnauthorized || ch.Code() != "UNAUTHORIZED" {
				t.Errorf("status %d code %s, want 401 UNAUTHORIZED", ch.Status(), ch.Code())
			}
			if got, want := ch.Header(), `Basic realm="cairn realm"`; got != want {
				t.Errorf("WWW-Authenticate = %q, want %q", got, want)
			}
			if strings.Contains(ch.Message(), "mallory") || strings.Contains(ch.Message(), "alice") {
				t.Errorf("message %q names the user", ch.Message())
			}
		})
	}
}
