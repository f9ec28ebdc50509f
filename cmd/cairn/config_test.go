package main

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// Every command's -h says what it does, its flags and the configuration
// keys it reads (or that it reads none), on stdout, with status 0.
func TestEveryCommandHelp(t *testing.T) {
	cases := []struct {
		args []string
		want []string
	}{
		{[]string{"serve", "-h"}, []string{"usage: cairn serve", "Runs the registry", "-config", "-addr", "-root", "-check", "Keys it reads", "http.addr"}},
		{[]string{"config", "check", "-h"}, []string{"usage: cairn config check", "effective", "masked", "-root", "auth.ldap.ca", "bindpasswordfile", "Exit status"}},
		{[]string{"config", "-h"}, []string{"usage: cairn config check"}},
		{[]string{"gc", "-h"}, []string{"usage: cairn gc", "-dry-run", "Keys it reads", "storage.gc."}},
		{[]string{"scrub", "-h"}, []string{"usage: cairn scrub", "-repair", "Keys it reads", "storage.dedup.metadata"}},
		{[]string{"dedup", "run", "-h"}, []string{"usage: cairn dedup run", "-mode", "Keys it reads", "storage.dedup."}},
		{[]string{"bench", "registry", "-h"}, []string{"usage: cairn bench registry", "-url", "Reads no configuration"}},
		{[]string{"version", "-h"}, []string{"usage: cairn version", "Reads no configuration"}},
		{[]string{"replicate", "-h"}, []string{"usage: cairn replicate", "-target"}},
		{[]string{"robot", "-h"}, []string{"usage: cairn robot"}},
		{[]string{"help"}, []string{"serve", "config", "gc", "dedup", "scrub", "bench", "version"}},
	}
	for _, tc := range cases {
		var out, errOut bytes.Buffer
		code := run(context.Background(), tc.args, &out, &errOut)
		if code != 0 {
			t.Errorf("cairn %s: exit %d, stderr %q", strings.Join(tc.args, " "), code, errOut.String())
			continue
		}
		for _, w := range tc.want {
			if !strings.Contains(out.String(), w) {
				t.Errorf("cairn %s lacks %q:\n%s", strings.Join(tc.args, " "), w, out.String())
			}
		}
	}
}

// cairn config check: the effective configuration with secrets masked and
// status 0 for a good file; status 1 and one line naming the key, the
// file:line and the key meant for a misspelt one; status 2 for a bad
// command line.
func TestConfigCheckCommand(t *testing.T) {
	dir := t.TempDir()
	good := filepath.Join(dir, "good.yml")
	root := filepath.Join(dir, "data")
	if err := os.WriteFile(good, []byte("storage:\n  filesystem:\n    rootdirectory: "+root+"\nredis:\n  addrs: [127.0.0.1:6379]\n  password: redis-hunter2\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	var out, errOut bytes.Buffer
	if code := run(context.Background(), []string{"config", "check", good}, &out, &errOut); code != 0 {
		t.Fatalf("exit %d: %s", code, errOut.String())
	}
	if s := out.String(); strings.Contains(s, "redis-hunter2") || !strings.Contains(s, "rootdirectory: "+root) || !strings.Contains(s, "password: '********'") {
		t.Errorf("output:\n%s", s)
	}
	if _, err := os.Stat(root); !os.IsNotExist(err) {
		t.Errorf("check touched the storage root: %v", err)
	}

	bad := filepath.Join(dir, "bad.yml")
	if err := os.WriteFile(bad, []byte("storage:\n  filesystem:\n    rootdir: "+root+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	out.Reset()
	errOut.Reset()
	code := run(context.Background(), []string{"config", "check", bad}, &out, &errOut)
	want := "cairn: config: storage.filesystem.rootdir: unknown key; did you mean rootdirectory? (" + bad + ":3)\n"
	if code != 1 || errOut.String() != want || out.Len() != 0 {
		t.Errorf("exit %d, stderr %q, stdout %q; want 1, %q", code, errOut.String(), out.String(), want)
	}

	for _, args := range [][]string{{"config"}, {"config", "lint"}, {"config", "check", good, "extra"}, {"config", "check", "--nope"}} {
		if code := run(context.Background(), args, &out, &errOut); code != 2 {
			t.Errorf("cairn %q: exit %d, want 2", args, code)
		}
	}
}

// cairn config check reads the files auth.ldap names, as its -h says: a
// bind password file or CA file that does not read fails the check, naming
// its key.
func TestConfigCheckReadsLDAPFiles(t *testing.T) {
	dir := t.TempDir()
	pwFile := filepath.Join(dir, "bindpw")
	notPEM := filepath.Join(dir, "ca.txt")
	for f, b := range map[string]string{pwFile: "secret\n", notPEM: "not a certificate\n"} {
		if err := os.WriteFile(f, []byte(b), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	missing := filepath.Join(dir, "missing")
	for _, tc := range []struct{ pw, ca, want string }{
		{missing, "", "auth.ldap.bindpasswordfile: open " + missing},
		{pwFile, missing, "auth.ldap.ca: open " + missing},
		{pwFile, notPEM, "auth.ldap.ca: " + notPEM + " holds no PEM certificate"},
	} {
		cfg := filepath.Join(dir, "cairn.yml")
		// Port 1 on the loopback: nothing answers there, and nothing may ask.
		yml := "auth:\n  ldap:\n    url: ldap://127.0.0.1:1\n    userbase: ou=people,dc=example\n" +
			"    binddn: cn=cairn,dc=example\n    bindpasswordfile: " + tc.pw + "\n"
		if tc.ca != "" {
			yml += "    starttls: true\n    ca: " + tc.ca + "\n"
		}
		if err := os.WriteFile(cfg, []byte(yml), 0o600); err != nil {
			t.Fatal(err)
		}
		var out, errOut bytes.Buffer
		code := run(context.Background(), []string{"config", "check", cfg}, &out, &errOut)
		if code != 1 || !strings.Contains(errOut.String(), tc.want) {
			t.Errorf("bindpasswordfile %s, ca %q: exit %d, stderr %q; want 1 and %q", tc.pw, tc.ca, code, errOut.String(), tc.want)
		}
	}
}
