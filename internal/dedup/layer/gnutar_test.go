package layer

import (
	"bytes"
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// gnuTar runs GNU tar with args in dir and returns the archive it wrote to
// stdout; it skips the test when GNU tar is not installed.
func gnuTar(t *testing.T, dir string, args ...string) []byte {
	t.Helper()
	path, err := exec.LookPath("tar")
	if err != nil {
		t.Skip("no tar on PATH")
	}
	if v, err := exec.Command(path, "--version").Output(); err != nil || !bytes.Contains(v, []byte("GNU tar")) {
		t.Skip("tar is not GNU tar")
	}
	cmd := exec.Command(path, append([]string{"-C", dir, "-cf", "-", "--sort=name", "--mtime=@1700000000", "--owner=0", "--group=0", "--numeric-owner"}, args...)...)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("tar %v: %v: %s", args, err, stderr.String())
	}
	return out
}

func writeTree(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	long := filepath.Join(dir, strings.Repeat("long-name-segment-", 8), strings.Repeat("x", 150))
	files := map[string]string{
		"etc/hosts":        "127.0.0.1 localhost\n",
		"etc/empty":        "",
		"usr/bin/tool":     strings.Repeat("\x7fELF binary-ish ", 90000), // > spoolMax
		"usr/share/a.txt":  "same content",
		"usr/share/b.txt":  "same content",
		"var/lib/data.bin": strings.Repeat("z", 513),
	}
	for name, body := range files {
		p := filepath.Join(dir, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.MkdirAll(filepath.Dir(long), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(long, []byte("deep"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("hosts", filepath.Join(dir, "etc/hosts.link")); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(long, filepath.Join(dir, "long.link")); err != nil {
		t.Fatal(err)
	}
	if err := os.Link(filepath.Join(dir, "etc/hosts"), filepath.Join(dir, "etc/hosts.hard")); err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(filepath.Join(dir, "empty-dir"), 0o700); err != nil {
		t.Fatal(err)
	}
	return dir
}

func TestRoundTripGNUTar(t *testing.T) {
	dir := writeTree(t)
	for _, format := range []string{"gnu", "oldgnu", "posix", "ustar"} {
		t.Run(format, func(t *testing.T) {
			args := []string{"--format=" + format, "."}
			if format == "ustar" {
				// ustar cannot hold the long names.
				args = []string{"--format=ustar", "etc", "usr", "var", "empty-dir"}
			}
			roundTrip(t, gnuTar(t, dir, args...), newMemStore())
		})
	}
	t.Run("blocking factor padding", func(t *testing.T) {
		// -b 64 pads the archive to 32 KiB records: zeros beyond the EOF blocks.
		roundTrip(t, gnuTar(t, dir, "--format=posix", "-b", "64", "etc"), newMemStore())
	})
}

// TestSparseRejected: tar readers expand a sparse member's holes, so its
// payload is not the bytes in the tar. Disassemble must refuse such a tar
// early (before expanding a hole into the store), never return a recipe that
// would not rebuild it.
func TestSparseRejected(t *testing.T) {
	dir := t.TempDir()
	f, err := os.Create(filepath.Join(dir, "sparse.img"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.WriteAt([]byte("data at 1 GiB"), 1<<30); err != nil {
		t.Fatal(err)
	}
	if _, err := f.WriteAt([]byte("data at start"), 0); err != nil {
		t.Fatal(err)
	}
	f.Close()
	for _, format := range []string{"gnu", "posix"} {
		t.Run(format, func(t *testing.T) {
			tb := gnuTar(t, dir, "--sparse", "--format="+format, "sparse.img")
			if len(tb) > 1<<20 {
				t.Skipf("tar did not write a sparse member (%d bytes)", len(tb))
			}
			fs := newMemStore()
			_, err := Disassemble(context.Background(), bytes.NewReader(tb), fs)
			if !errors.Is(err, ErrNotReproducible) {
				t.Fatalf("Disassemble = %v, want ErrNotReproducible", err)
			}
			for d, b := range fs.files {
				if len(b) > 1<<20 {
					t.Errorf("stored %s of %d bytes: a hole was expanded", d, len(b))
				}
			}
		})
	}
}
