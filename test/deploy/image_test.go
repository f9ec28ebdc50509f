package deploy

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"crypto/sha256"
	"debug/elf"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"

	"github.com/cairn-registry/cairn/internal/testutil/cairnproc"
	"github.com/cairn-registry/cairn/internal/testutil/clitool"
)

// TestImage builds cairn's image with `cairn-lab image`, pushes it to a
// real cairn, pulls every manifest and blob back by digest and compares
// them with the OCI layout the build wrote, runs the pulled binary's
// `cairn version`, and builds again to check that the digest is the same.
func TestImage(t *testing.T) {
	work := t.TempDir()
	root := snapshot(t, repoRoot(t), filepath.Join(work, "src"))
	lab := filepath.Join(work, "cairn-lab")
	run(t, root, nil, "go", "build", "-o", lab, "./cmd/cairn-lab")

	head, gitErr := runGit(root, "rev-parse", "HEAD")
	var env []string
	if gitErr != nil {
		// The builder takes its timestamps from the commit; without one
		// it needs them given.
		env = []string{"SOURCE_DATE_EPOCH=1700000000"}
	}

	srv := cairnproc.Start(t, "")
	ref := srv.Addr + "/cairn:test"
	oci1 := filepath.Join(work, "oci1")
	start := time.Now()
	digest := strings.TrimSpace(run(t, root, env, lab, "image", "--oci", oci1, "--push", ref, "--insecure"))
	t.Logf("built and pushed %s in %s", digest, time.Since(start).Round(time.Second))

	layout := readLayout(t, oci1)
	if layout.index != digest {
		t.Fatalf("the layout's index is %s; the builder printed %s", layout.index, digest)
	}

	// Another implementation of the layout format reads it: skopeo finds
	// the index by its name in index.json.
	t.Run("skopeo reads the layout", func(t *testing.T) {
		skopeo := clitool.Path(t, "skopeo")
		raw := run(t, work, nil, skopeo, "inspect", "--raw", "oci:"+oci1+":latest")
		sum := sha256.Sum256([]byte(raw))
		if got := "sha256:" + hex.EncodeToString(sum[:]); got != digest {
			t.Errorf("skopeo inspect --raw oci:%s:latest: %s, want %s", oci1, got, digest)
		}
	})

	// Pull back: the tag names the index; every manifest and blob comes
	// back with the bytes that were built.
	hc := &http.Client{Timeout: time.Minute}
	base := srv.URL + "/v2/cairn/"
	body, got := get(t, hc, base+"manifests/test", "application/vnd.oci.image.index.v1+json")
	if got != digest {
		t.Fatalf("GET manifests/test: Docker-Content-Digest %s, want %s", got, digest)
	}
	layout.same(t, digest, body)
	var idx v1.IndexManifest
	if err := json.Unmarshal(body, &idx); err != nil {
		t.Fatal(err)
	}
	if len(idx.Manifests) != 2 {
		t.Fatalf("index has %d manifests, want 2 (linux/amd64, linux/arm64)", len(idx.Manifests))
	}
	binaries := map[string][]byte{}
	for _, d := range idx.Manifests {
		mbody, _ := get(t, hc, base+"manifests/"+d.Digest.String(), string(d.MediaType))
		layout.same(t, d.Digest.String(), mbody)
		var m v1.Manifest
		if err := json.Unmarshal(mbody, &m); err != nil {
			t.Fatal(err)
		}
		cfgBody, _ := get(t, hc, base+"blobs/"+m.Config.Digest.String(), "")
		layout.same(t, m.Config.Digest.String(), cfgBody)
		var cfg v1.ConfigFile
		if err := json.Unmarshal(cfgBody, &cfg); err != nil {
			t.Fatal(err)
		}
		if cfg.OS != d.Platform.OS || cfg.Architecture != d.Platform.Architecture {
			t.Errorf("%s: config says %s/%s", d.Platform, cfg.OS, cfg.Architecture)
		}
		if len(cfg.Config.Entrypoint) != 1 || cfg.Config.Entrypoint[0] != "/usr/bin/cairn" || cfg.Config.User != "65532:65532" {
			t.Errorf("%s: entrypoint %v user %q, want [/usr/bin/cairn] and 65532:65532", d.Platform, cfg.Config.Entrypoint, cfg.Config.User)
		}
		files := map[string][]byte{}
		for _, l := range m.Layers {
			lbody, _ := get(t, hc, base+"blobs/"+l.Digest.String(), "")
			layout.same(t, l.Digest.String(), lbody)
			untar(t, lbody, files)
		}
		if len(files["etc/ssl/certs/ca-certificates.crt"]) == 0 {
			t.Errorf("%s: no CA certificates in the image", d.Platform)
		}
		bin := files["usr/bin/cairn"]
		checkStatic(t, d.Platform.String(), bin, d.Platform.Architecture)
		binaries[d.Platform.Architecture] = bin
	}

	// The binary of this machine's architecture runs and names its build.
	bin, ok := binaries[runtime.GOARCH]
	if !ok {
		t.Fatalf("no %s image to run here", runtime.GOARCH)
	}
	path := filepath.Join(work, "cairn")
	if err := os.WriteFile(path, bin, 0o755); err != nil {
		t.Fatal(err)
	}
	version := run(t, work, nil, path, "version")
	t.Logf("cairn version of the image:\n%s", version)
	if strings.HasPrefix(version, "cairn devel") || !strings.Contains(version, "linux/"+runtime.GOARCH) {
		t.Errorf("cairn version in the image:\n%s\nwant a stamped version and linux/%s", version, runtime.GOARCH)
	}

	// Reproducible: a second build (no push) has the same index digest,
	// hence the same manifests, configs and layers.
	oci2 := filepath.Join(work, "oci2")
	again := strings.TrimSpace(run(t, root, env, lab, "image", "--oci", oci2))
	if again != digest {
		t.Errorf("second build: index %s, first %s: the image is not reproducible", again, digest)
	}

	if gitErr != nil {
		t.Skipf("not a git checkout (git rev-parse HEAD: %v): the image was built, pushed, pulled and run, but the commit `cairn version` prints is not checked", gitErr)
	}
	if want := "commit:   " + head + "\n"; !strings.Contains(version, want) {
		t.Errorf("cairn version in the image:\n%s\nwant the line %q (git rev-parse HEAD)", version, strings.TrimSpace(want))
	}
}

// TestVersionOverride: a build without VCS information says what -ldflags
// -X gave it, as a release pipeline building from a source archive would.
func TestVersionOverride(t *testing.T) {
	root := repoRoot(t)
	bin := filepath.Join(t.TempDir(), "cairn")
	const rev = "0123456789abcdef0123456789abcdef01234567"
	run(t, root, nil, "go", "build", "-buildvcs=false", "-o", bin,
		"-ldflags=-X main.version=v9.8.7 -X main.commit="+rev+" -X main.commitTime=2026-01-02T03:04:05Z -X main.modified=false", "./cmd/cairn")
	out := run(t, root, nil, bin, "version")
	for _, want := range []string{"cairn v9.8.7\n", "commit:   " + rev + "\n", "time:     2026-01-02T03:04:05Z\n", "modified: no\n"} {
		if !strings.Contains(out, want) {
			t.Errorf("cairn version:\n%s\nwant the line %q", out, strings.TrimSpace(want))
		}
	}
}

// snapshot copies the repository as it is now (the files git tracks and the
// untracked ones it does not ignore, and .git) to dst, so that both image
// builds see one source and one `git status`: a file another process writes
// into the work tree meanwhile would change the stamped vcs.modified, hence
// the binary and the digest. Outside git it returns root as it is.
func snapshot(t *testing.T, root, dst string) string {
	t.Helper()
	list, err := runGit(root, "ls-files", "-z", "--cached", "--others", "--exclude-standard")
	if err != nil {
		return root
	}
	if fi, err := os.Stat(filepath.Join(root, ".git")); err != nil || !fi.IsDir() {
		return root // a worktree or submodule: its .git is elsewhere
	}
	for _, f := range strings.Split(list, "\x00") {
		if f == "" {
			continue
		}
		if err := copyFile(filepath.Join(root, f), filepath.Join(dst, f)); err != nil && !errors.Is(err, os.ErrNotExist) {
			t.Fatal(err) // a tracked file deleted in the work tree is skipped, as git status reports it
		}
	}
	gitDir := filepath.Join(root, ".git")
	err = filepath.WalkDir(gitDir, func(p string, d os.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		rel, err := filepath.Rel(root, p)
		if err != nil {
			return err
		}
		return copyFile(p, filepath.Join(dst, rel))
	})
	if err != nil {
		t.Fatalf("copy .git: %v", err)
	}
	return dst
}

// copyFile copies a regular file or a symbolic link, keeping its mode.
func copyFile(src, dst string) error {
	fi, err := os.Lstat(src)
	if err != nil {
		return err
	}
	if err := os.MkdirAll(filepath.Dir(dst), 0o755); err != nil {
		return err
	}
	if fi.Mode()&os.ModeSymlink != 0 {
		target, err := os.Readlink(src)
		if err != nil {
			return err
		}
		return os.Symlink(target, dst)
	}
	if !fi.Mode().IsRegular() {
		return nil
	}
	b, err := os.ReadFile(src)
	if err != nil {
		return err
	}
	return os.WriteFile(dst, b, fi.Mode().Perm())
}

func runGit(dir string, args ...string) (string, error) {
	out, errOut, err := runErr(dir, nil, "git", args...)
	if err != nil {
		return "", fmt.Errorf("%w: %s", err, strings.TrimSpace(errOut))
	}
	return strings.TrimSpace(out), nil
}

// ociLayout is an OCI image layout on disk: its one index, and its blobs.
type ociLayout struct {
	dir   string
	index string
}

func readLayout(t *testing.T, dir string) ociLayout {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(dir, "index.json"))
	if err != nil {
		t.Fatal(err)
	}
	var top v1.IndexManifest
	if err := json.Unmarshal(b, &top); err != nil {
		t.Fatalf("index.json: %v", err)
	}
	if len(top.Manifests) != 1 {
		t.Fatalf("index.json names %d manifests, want the image's index alone", len(top.Manifests))
	}
	return ociLayout{dir: dir, index: top.Manifests[0].Digest.String()}
}

// same fails the test unless body is byte for byte the layout's blob named
// digest, and hashes to it.
func (l ociLayout) same(t *testing.T, digest string, body []byte) {
	t.Helper()
	sum := sha256.Sum256(body)
	if got := "sha256:" + hex.EncodeToString(sum[:]); got != digest {
		t.Fatalf("pulled %s: its bytes hash to %s", digest, got)
	}
	want, err := os.ReadFile(filepath.Join(l.dir, "blobs", "sha256", strings.TrimPrefix(digest, "sha256:")))
	if err != nil {
		t.Fatalf("the built layout has no %s: %v", digest, err)
	}
	if !bytes.Equal(body, want) {
		t.Fatalf("pulled %s differs from the built blob", digest)
	}
}

// get GETs url and returns its body and Docker-Content-Digest.
func get(t *testing.T, hc *http.Client, url, accept string) ([]byte, string) {
	t.Helper()
	req, err := http.NewRequest(http.MethodGet, url, nil)
	if err != nil {
		t.Fatal(err)
	}
	if accept != "" {
		req.Header.Set("Accept", accept)
	}
	resp, err := hc.Do(req)
	if err != nil {
		t.Fatalf("GET %s: %v", url, err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("GET %s: %v", url, err)
	}
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("GET %s: %s\n%s", url, resp.Status, body)
	}
	return body, resp.Header.Get("Docker-Content-Digest")
}

// untar adds a gzip-compressed layer's regular files to files.
func untar(t *testing.T, layer []byte, files map[string][]byte) {
	t.Helper()
	zr, err := gzip.NewReader(bytes.NewReader(layer))
	if err != nil {
		t.Fatalf("layer: %v", err)
	}
	tr := tar.NewReader(zr)
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return
		}
		if err != nil {
			t.Fatalf("layer: %v", err)
		}
		if h.Typeflag == tar.TypeReg {
			b, err := io.ReadAll(tr)
			if err != nil {
				t.Fatalf("layer %s: %v", h.Name, err)
			}
			files[h.Name] = b
		}
	}
}

// checkStatic asserts that bin is an ELF executable for arch that needs no
// dynamic loader: the image has no libc.
func checkStatic(t *testing.T, platform string, bin []byte, arch string) {
	t.Helper()
	f, err := elf.NewFile(bytes.NewReader(bin))
	if err != nil {
		t.Errorf("%s: /usr/bin/cairn is not an ELF file: %v", platform, err)
		return
	}
	want := map[string]elf.Machine{"amd64": elf.EM_X86_64, "arm64": elf.EM_AARCH64}[arch]
	if f.Machine != want {
		t.Errorf("%s: /usr/bin/cairn is for %s, want %s", platform, f.Machine, want)
	}
	for _, p := range f.Progs {
		if p.Type == elf.PT_INTERP {
			t.Errorf("%s: /usr/bin/cairn asks for a dynamic loader (not static)", platform)
		}
	}
}
