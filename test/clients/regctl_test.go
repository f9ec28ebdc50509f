package clients

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/opencontainers/go-digest"
)

func TestRegctl(t *testing.T) {
	t.Parallel()
	ct := startClientTest(t, "regctl") // regctl keeps its config in $HOME/.regctl
	srv, api := ct.srv, ct.api
	r := ct.runner(nil)
	r(t, "registry", "set", srv.Addr, "--tls", "disabled")

	img := newImage(t, 11, false, 2<<10, 400<<10, 2<<20)
	amd, arm := newImage(t, 12, false, 100<<10), newImage(t, 13, false, 120<<10)
	src, idxRaw, idxDesc := imageAndIndex(t, img, amd, arm)

	repo := "clients/regctl/img"
	ref := srv.Addr + "/" + repo

	if !t.Run("copy ocidir to registry", func(t *testing.T) {
		r(t, "image", "copy", "ocidir://"+src+":v1", ref+":v1")
		api.checkImage(t, repo, "v1", img.Digest())
		if got := strings.TrimSpace(string(r(t, "image", "digest", ref+":v1"))); got != img.Digest().String() {
			t.Errorf("regctl image digest = %s, want %s", got, img.Digest())
		}
		if got := r(t, "manifest", "get", "--format", "raw-body", ref+":v1"); !bytes.Equal(got, img.Manifest) {
			t.Errorf("regctl manifest get:\n%s\nwant:\n%s", got, img.Manifest)
		}
		for d, want := range img.blobs() {
			if got := r(t, "blob", "get", ref, d.String()); !bytes.Equal(got, want) {
				t.Errorf("regctl blob get %s: %d bytes, want %d, byte-identical", d, len(got), len(want))
			}
		}
	}) {
		return // the rest builds on it
	}

	t.Run("copy index to registry", func(t *testing.T) {
		r(t, "image", "copy", "ocidir://"+src+":multi", ref+":multi")
		api.checkImage(t, repo, "multi", idxDesc.Digest)
		if got := r(t, "manifest", "get", "--format", "raw-body", ref+":multi"); !bytes.Equal(got, idxRaw) {
			t.Errorf("regctl manifest get index:\n%s\nwant:\n%s", got, idxRaw)
		}
		// The platform's image is reachable through the index.
		got := r(t, "manifest", "get", "--format", "raw-body", "--platform", "linux/arm64", ref+":multi")
		if !bytes.Equal(got, arm.Manifest) {
			t.Errorf("regctl manifest get --platform linux/arm64:\n%s\nwant:\n%s", got, arm.Manifest)
		}
	})

	t.Run("tag ls", func(t *testing.T) {
		wantSet(t, "regctl tag ls", lines(r(t, "tag", "ls", ref)), "v1", "multi")
	})

	t.Run("copy registry to ocidir", func(t *testing.T) {
		out := filepath.Join(t.TempDir(), "out")
		r(t, "image", "copy", ref+":v1", "ocidir://"+out+":v1")
		checkLayout(t, out, img.Digest())
		r(t, "image", "copy", ref+":multi", "ocidir://"+out+":multi")
		checkLayout(t, out, idxDesc.Digest)
	})

	t.Run("retag and cross-repo copy", func(t *testing.T) {
		r(t, "image", "copy", ref+":v1", ref+":v1-again")
		api.checkImage(t, repo, "v1-again", img.Digest())
		r(t, "image", "copy", ref+":multi", srv.Addr+"/clients/regctl/other:multi")
		api.checkImage(t, "clients/regctl/other", "multi", idxDesc.Digest)
	})

	t.Run("chunked upload", func(t *testing.T) {
		// Blobs above 256 KiB go up in 1 MiB PATCH chunks (Content-Range)
		// instead of one request.
		big := newImage(t, 14, false, 300<<10, 3<<20+12345)
		dir := filepath.Join(t.TempDir(), "big")
		newLayout(t, dir).addImage(big, "v1")
		r(t, "registry", "set", srv.Addr, "--tls", "disabled", "--blob-max", "262144", "--blob-chunk", "1048576")
		defer r(t, "registry", "set", srv.Addr, "--tls", "disabled", "--blob-max", "-1", "--blob-chunk", "0")
		r(t, "image", "copy", "ocidir://"+dir+":v1", srv.Addr+"/clients/regctl/chunked:v1")
		api.checkImage(t, "clients/regctl/chunked", "v1", big.Digest())
	})

	t.Run("artifact referrers", func(t *testing.T) {
		note := []byte("reviewed-by: cairn tests\n")
		f := filepath.Join(t.TempDir(), "note.txt")
		if err := os.WriteFile(f, note, 0o644); err != nil {
			t.Fatal(err)
		}
		const artifactType = "application/vnd.cairn.test.note.v1"
		r(t, "artifact", "put", "--artifact-type", artifactType, "--file", f, "--file-media-type", "text/plain",
			"--subject", ref+":v1", ref)
		out := r(t, "artifact", "list", "--format", "{{json .Manifest}}", ref+":v1")
		var idx manifestRefs
		if err := json.Unmarshal(out, &idx); err != nil {
			t.Fatalf("regctl artifact list: %v\n%s", err, out)
		}
		var found digest.Digest
		for _, m := range idx.Manifests {
			if m.ArtifactType == artifactType {
				found = m.Digest
			}
		}
		if found == "" {
			t.Fatalf("regctl artifact list: no %s referrer of %s in\n%s", artifactType, img.Digest(), out)
		}
		raw, _ := api.checkImage(t, repo, found.String(), found)
		if m := parseManifest(t, raw); m.Subject == nil || m.Subject.Digest != img.Digest() {
			t.Errorf("referrer %s: subject %+v, want %s", found, m.Subject, img.Digest())
		}
		got := r(t, "artifact", "get", ref+"@"+found.String())
		if !bytes.Equal(got, note) {
			t.Errorf("regctl artifact get: %q, want %q", got, note)
		}
		// The referrer travels with the image when asked to.
		out2 := filepath.Join(t.TempDir(), "withrefs")
		r(t, "image", "copy", "--referrers", ref+":v1", "ocidir://"+out2+":v1")
		checkLayout(t, out2, img.Digest())
		if _, err := os.Stat(filepath.Join(out2, "blobs", "sha256", found.Encoded())); err != nil {
			t.Errorf("regctl image copy --referrers did not copy referrer %s: %v", found, err)
		}
	})
}
