package clients

import (
	"bytes"
	"net/http"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/opencontainers/go-digest"

	"github.com/cairn-registry/cairn/internal/testutil/regtest"
)

func TestCrane(t *testing.T) {
	t.Parallel()
	ct := startClientTest(t, "crane")
	srv, api, e, crane := ct.srv, ct.api, ct.env, ct.tool
	c := ct.runner(nil, "--insecure")

	img := newImage(t, 1, false, 1<<10, 300<<10, 3<<20)
	dimg := newImage(t, 2, true, 64<<10, 200<<10)
	keep := newImage(t, 3, false, 10<<10)
	src := filepath.Join(t.TempDir(), "src")
	l := newLayout(t, src)
	l.addImage(img, "v1")
	dsrc := filepath.Join(t.TempDir(), "dsrc")
	newLayout(t, dsrc).addImage(dimg, "v1")
	ksrc := filepath.Join(t.TempDir(), "ksrc")
	newLayout(t, ksrc).addImage(keep, "keep")

	repo := "clients/crane/img"
	ref := srv.Addr + "/" + repo

	if !t.Run("push", func(t *testing.T) {
		out := c(t, "push", src, ref+":v1")
		if !strings.Contains(string(out), img.Digest().String()) {
			t.Errorf("crane push printed %q, want the digest %s", out, img.Digest())
		}
		api.checkImage(t, repo, "v1", img.Digest())
	}) {
		return // the rest builds on it
	}

	t.Run("push docker media types", func(t *testing.T) {
		c(t, "push", dsrc, ref+":docker")
		_, mt := api.checkImage(t, repo, "docker", dimg.Digest())
		if mt != dockerManifest {
			t.Errorf("Content-Type %q, want %q", mt, dockerManifest)
		}
	})

	t.Run("digest manifest config blob", func(t *testing.T) {
		if got := strings.TrimSpace(string(c(t, "digest", ref+":v1"))); got != img.Digest().String() {
			t.Errorf("crane digest = %s, want %s", got, img.Digest())
		}
		if got := c(t, "manifest", ref+":v1"); !bytes.Equal(got, img.Manifest) {
			t.Errorf("crane manifest:\n%s\nwant:\n%s", got, img.Manifest)
		}
		if got := c(t, "config", ref+":v1"); !bytes.Equal(got, img.Config) {
			t.Errorf("crane config:\n%s\nwant:\n%s", got, img.Config)
		}
		for i, layer := range img.Layers {
			got := c(t, "blob", ref+"@"+digestOf(layer))
			if !bytes.Equal(got, layer) {
				t.Errorf("crane blob layer %d: %d bytes, want %d, byte-identical", i, len(got), len(layer))
			}
		}
	})

	t.Run("pull", func(t *testing.T) {
		for _, tag := range []string{"v1", "docker"} {
			want := img.Digest()
			if tag == "docker" {
				want = dimg.Digest()
			}
			out := filepath.Join(t.TempDir(), "pulled")
			c(t, "pull", "--format=oci", ref+":"+tag, out)
			checkLayout(t, out, want)
		}
	})

	t.Run("copy to another repo", func(t *testing.T) {
		c(t, "copy", ref+":v1", srv.Addr+"/clients/crane/copy:v1")
		api.checkImage(t, "clients/crane/copy", "v1", img.Digest())
		if got := strings.TrimSpace(string(c(t, "digest", srv.Addr+"/clients/crane/copy:v1"))); got != img.Digest().String() {
			t.Errorf("crane digest of copy = %s, want %s", got, img.Digest())
		}
	})

	t.Run("cross-repo mount", func(t *testing.T) {
		// What crane copy asks for first: mount the blob from the source repo
		// instead of uploading it again.
		layer := digestOf(img.Layers[2])
		// Blobs are scoped to repositories: before the mount, the target
		// repository does not serve it.
		e.Fail(t, crane, "blob", "--insecure", srv.Addr+"/clients/crane/mounted@"+layer)
		resp := regtest.Do(t, http.DefaultClient, http.MethodPost, srv.URL+"/v2/clients/crane/mounted/blobs/uploads/?mount="+layer+"&from="+repo, nil)
		if resp.Status != http.StatusCreated {
			t.Errorf("mount %s from %s: %v, want 201", layer, repo, resp)
		}
		got := c(t, "blob", srv.Addr+"/clients/crane/mounted@"+layer)
		if !bytes.Equal(got, img.Layers[2]) {
			t.Errorf("mounted blob differs: %d bytes, want %d", len(got), len(img.Layers[2]))
		}
	})

	t.Run("tag ls catalog", func(t *testing.T) {
		c(t, "tag", ref+":v1", "v2")
		api.checkImage(t, repo, "v2", img.Digest())
		tags := lines(c(t, "ls", ref))
		wantSet(t, "crane ls", tags, "v1", "v2", "docker")
		catalog := lines(c(t, "catalog", srv.Addr))
		wantSet(t, "crane catalog", catalog, repo, "clients/crane/copy")
	})

	t.Run("delete", func(t *testing.T) {
		c(t, "push", ksrc, ref+":keep")
		c(t, "delete", ref+"@"+img.Digest().String())
		out := e.Fail(t, crane, "manifest", "--insecure", ref+":v1")
		if !strings.Contains(out, "MANIFEST_UNKNOWN") && !strings.Contains(out, "404") {
			t.Errorf("crane manifest after delete: want MANIFEST_UNKNOWN / 404, got:\n%s", out)
		}
		e.Fail(t, crane, "manifest", "--insecure", ref+"@"+img.Digest().String())
		tags := lines(c(t, "ls", ref))
		for _, gone := range []string{"v1", "v2"} {
			if slices.Contains(tags, gone) {
				t.Errorf("crane ls after deleting the manifest still lists tag %s: %q", gone, tags)
			}
		}
		wantSet(t, "crane ls after delete", tags, "keep", "docker")
		// Other repositories holding the same manifest keep it.
		api.checkImage(t, "clients/crane/copy", "v1", img.Digest())
		api.checkImage(t, repo, "keep", keep.Digest())
	})
}

func digestOf(b []byte) string { return digest.FromBytes(b).String() }
