// Package htpasswdtest writes htpasswd files for tests of cairn's Basic
// authentication: bcrypt entries in the form `htpasswd -B` writes.
package htpasswdtest

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"golang.org/x/crypto/bcrypt"
)

// File writes an htpasswd file, named htpasswd in a new temporary
// directory, and returns its path. It holds a line "user:hash" for each
// user, password pair, hashed with bcrypt at cost; the hashes carry the
// $2y$ prefix, as htpasswd -B writes them (Go's bcrypt writes $2a$, the
// same hash otherwise).
func File(t testing.TB, cost int, userPass ...string) string {
	t.Helper()
	var b strings.Builder
	for i := 0; i+1 < len(userPass); i += 2 {
		h, err := bcrypt.GenerateFromPassword([]byte(userPass[i+1]), cost)
		if err != nil {
			t.Fatal(err)
		}
		fmt.Fprintf(&b, "%s:$2y$%s\n", userPass[i], strings.TrimPrefix(string(h), "$2a$"))
	}
	p := filepath.Join(t.TempDir(), "htpasswd")
	if err := os.WriteFile(p, []byte(b.String()), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}
