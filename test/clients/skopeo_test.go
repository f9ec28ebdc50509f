package clients

import (
	"bytes"
	"encoding/json"
	"path/filepath"
	"slices"
	"testing"

	"github.com/opencontainers/go-digest"
)

func TestSkopeo(t *testing.T) {
	t.Parallel()
	ct := startClientTest(t, "skopeo")
	srv, api, e, skopeo := ct.srv, ct.api, ct.env, ct.tool
	// --insecure-policy: no /etc/containers/policy.json needed; the tests are
	// about transport, not signature policy.
	s := ct.runner([]string{"--insecure-policy"})

	img := newImage(t, 31, false, 5<<10, 500<<10, 1<<20)
	amd, arm := newImage(t, 32, false, 80<<10), newImage(t, 33, false, 90<<10)
	src, _, idxDesc := imageAndIndex(t, img, amd, arm)

	repo := "clients/skopeo/img"
	ref := "docker://" + srv.Addr + "/" + repo
	var dockerDigest digest.Digest

	if !t.Run("copy oci to registry", func(t *testing.T) {
		s(t, "copy", "--preserve-digests", "--dest-tls-verify=false", "oci:"+src+":v1", ref+":v1")
		api.checkImage(t, repo, "v1", img.Digest())
		if got := s(t, "inspect", "--raw", "--tls-verify=false", ref+":v1"); !bytes.Equal(got, img.Manifest) {
			t.Errorf("skopeo inspect --raw:\n%s\nwant:\n%s", got, img.Manifest)
		}
		if got := s(t, "inspect", "--config", "--raw", "--tls-verify=false", ref+":v1"); !bytes.Equal(got, img.Config) {
			t.Errorf("skopeo inspect --config --raw:\n%s\nwant:\n%s", got, img.Config)
		}
		var info struct {
			Digest digest.Digest
			Layers []digest.Digest
		}
		out := s(t, "inspect", "--tls-verify=false", ref+":v1")
		if err := json.Unmarshal(out, &info); err != nil {
			t.Fatalf("skopeo inspect: %v\n%s", err, out)
		}
		if info.Digest != img.Digest() {
			t.Errorf("skopeo inspect digest %s, want %s", info.Digest, img.Digest())
		}
		for i, layer := range img.Layers {
			if i >= len(info.Layers) || info.Layers[i] != digest.FromBytes(layer) {
				t.Errorf("skopeo inspect layers %v, want layer %d = %s", info.Layers, i, digest.FromBytes(layer))
			}
		}
	}) {
		return // the rest builds on it
	}

	t.Run("copy index with all platforms", func(t *testing.T) {
		s(t, "copy", "--all", "--preserve-digests", "--dest-tls-verify=false", "oci:"+src+":multi", ref+":multi")
		api.checkImage(t, repo, "multi", idxDesc.Digest)
	})

	t.Run("copy registry to oci", func(t *testing.T) {
		out := filepath.Join(t.TempDir(), "out")
		s(t, "copy", "--preserve-digests", "--src-tls-verify=false", ref+":v1", "oci:"+out+":v1")
		checkLayout(t, out, img.Digest())
		s(t, "copy", "--all", "--preserve-digests", "--src-tls-verify=false", ref+":multi", "oci:"+out+":multi")
		checkLayout(t, out, idxDesc.Digest)
	})

	t.Run("convert to docker schema2", func(t *testing.T) {
		s(t, "copy", "--format", "v2s2", "--dest-tls-verify=false", "oci:"+src+":v1", ref+":docker")
		raw := s(t, "inspect", "--raw", "--tls-verify=false", ref+":docker")
		dockerDigest = digest.FromBytes(raw)
		_, mt := api.checkImage(t, repo, "docker", dockerDigest)
		if mt != dockerManifest {
			t.Errorf("Content-Type %q, want %q", mt, dockerManifest)
		}
		// Conversion keeps the layer blobs; only the manifest and media types change.
		m := parseManifest(t, raw)
		for i, layer := range img.Layers {
			if i >= len(m.Layers) || m.Layers[i].Digest != digest.FromBytes(layer) {
				t.Errorf("docker manifest layers %+v, want layer %d = %s", m.Layers, i, digest.FromBytes(layer))
			}
		}

		// An OCI index becomes a Docker manifest list.
		s(t, "copy", "--all", "--format", "v2s2", "--dest-tls-verify=false", "oci:"+src+":multi", ref+":multi-docker")
		raw = s(t, "inspect", "--raw", "--tls-verify=false", ref+":multi-docker")
		_, mt = api.checkImage(t, repo, "multi-docker", digest.FromBytes(raw))
		if mt != dockerList {
			t.Errorf("Content-Type %q, want %q", mt, dockerList)
		}
	})

	t.Run("registry to registry", func(t *testing.T) {
		if dockerDigest == "" {
			t.Skip("needs the docker schema2 tag")
		}
		other := "docker://" + srv.Addr + "/clients/skopeo/other"
		s(t, "copy", "--preserve-digests", "--src-tls-verify=false", "--dest-tls-verify=false", ref+":docker", other+":docker")
		api.checkImage(t, "clients/skopeo/other", "docker", dockerDigest)
		s(t, "copy", "--all", "--preserve-digests", "--src-tls-verify=false", "--dest-tls-verify=false", ref+":multi", other+":multi")
		api.checkImage(t, "clients/skopeo/other", "multi", idxDesc.Digest)
	})

	t.Run("list-tags and delete", func(t *testing.T) {
		var tl struct{ Tags []string }
		out := s(t, "list-tags", "--tls-verify=false", ref)
		if err := json.Unmarshal(out, &tl); err != nil {
			t.Fatalf("skopeo list-tags: %v\n%s", err, out)
		}
		wantSet(t, "skopeo list-tags", tl.Tags, "v1", "multi", "docker")

		s(t, "delete", "--tls-verify=false", ref+"@"+img.Digest().String())
		e.Fail(t, skopeo, "--insecure-policy", "inspect", "--raw", "--tls-verify=false", ref+":v1")
		if tags := api.tags(t, repo); slices.Contains(tags, "v1") {
			t.Errorf("tag v1 still listed after its manifest was deleted: %q", tags)
		}
		// The docker-format manifest shares the layers and stays whole.
		if dockerDigest != "" {
			api.checkImage(t, repo, "docker", dockerDigest)
		}
	})
}
