package clients

import (
	"encoding/json"
	"math/rand/v2"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/opencontainers/go-digest"
	ocispec "github.com/opencontainers/image-spec/specs-go/v1"
)

func TestOras(t *testing.T) {
	t.Parallel()
	ct := startClientTest(t, "oras")
	srv, api, e, oras := ct.srv, ct.api, ct.env, ct.tool
	o := ct.runner(nil, "--plain-http")

	// Files to push, in a directory of their own: oras names layers by the
	// relative paths it is given.
	srcDir := t.TempDir()
	rng := rand.New(rand.NewChaCha8(seedBytes(21)))
	data := make([]byte, 700<<10)
	for i := range data {
		data[i] = byte(rng.Uint32())
	}
	files := map[string][]byte{
		"hello.txt": []byte("hello from cairn\n"),
		"data.bin":  data,
		"empty.txt": {},
	}
	for name, b := range files {
		if err := os.WriteFile(filepath.Join(srcDir, name), b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	e.Dir = srcDir

	const artifactType = "application/vnd.cairn.test.bundle.v1"
	repo := "clients/oras/artifact"
	ref := srv.Addr + "/" + repo
	var subject digest.Digest

	if !t.Run("push", func(t *testing.T) {
		out := o(t, "push", ref+":v1", "--artifact-type", artifactType, "--format", "json",
			"hello.txt:text/plain", "data.bin:application/octet-stream", "empty.txt")
		subject = pushedDigest(t, out)
		raw, mt := api.checkImage(t, repo, "v1", subject)
		m := parseManifest(t, raw)
		if mt != ocispec.MediaTypeImageManifest || m.ArtifactType != artifactType {
			t.Errorf("manifest media type %q artifactType %q, want %q and %q", mt, m.ArtifactType, ocispec.MediaTypeImageManifest, artifactType)
		}
		if len(m.Layers) != len(files) {
			t.Errorf("manifest has %d layers, want %d:\n%s", len(m.Layers), len(files), raw)
		}
	}) {
		return // the rest builds on it
	}

	t.Run("manifest fetch and resolve", func(t *testing.T) {
		raw := o(t, "manifest", "fetch", ref+":v1")
		if got := digest.FromBytes(raw); got != subject {
			t.Errorf("oras manifest fetch: body hashes to %s, want %s", got, subject)
		}
		var desc ocispec.Descriptor
		out := o(t, "manifest", "fetch", "--descriptor", ref+":v1")
		if err := json.Unmarshal(out, &desc); err != nil {
			t.Fatalf("oras manifest fetch --descriptor: %v\n%s", err, out)
		}
		if desc.Digest != subject || desc.MediaType != ocispec.MediaTypeImageManifest {
			t.Errorf("oras manifest fetch --descriptor = %+v, want digest %s", desc, subject)
		}
	})

	t.Run("pull", func(t *testing.T) {
		out := t.TempDir()
		o(t, "pull", ref+":v1", "-o", out)
		compareFiles(t, out, files)
		if got := listFiles(t, out); len(got) != len(files) {
			t.Errorf("oras pull wrote %q, want exactly %d files", got, len(files))
		}
	})

	t.Run("attach and discover", func(t *testing.T) {
		sig := []byte("signature-bytes")
		if err := os.WriteFile(filepath.Join(srcDir, "sig.txt"), sig, 0o644); err != nil {
			t.Fatal(err)
		}
		const sigType = "application/vnd.cairn.test.signature.v1"
		out := o(t, "attach", ref+":v1", "--artifact-type", sigType, "--format", "json", "sig.txt")
		referrer := pushedDigest(t, out)
		raw, _ := api.checkImage(t, repo, referrer.String(), referrer)
		if m := parseManifest(t, raw); m.Subject == nil || m.Subject.Digest != subject {
			t.Errorf("attached manifest subject %+v, want %s", m.Subject, subject)
		}

		out = o(t, "discover", ref+":v1", "--format", "json")
		var found struct {
			Manifests []ocispec.Descriptor `json:"manifests"`
		}
		if err := json.Unmarshal(out, &found); err != nil {
			t.Fatalf("oras discover: %v\n%s", err, out)
		}
		if !hasReferrer(found.Manifests, referrer, sigType) {
			t.Errorf("oras discover: %s (%s) not among %+v", referrer, sigType, found.Manifests)
		}
		// Same answer through the referrers API itself, so oras did not need
		// its tag-schema fallback (which would leave a sha256-<hex> tag).
		resp := api.get(t, "/v2/"+repo+"/referrers/"+subject.String())
		body := resp.Body
		if resp.Status != http.StatusOK {
			t.Fatalf("GET referrers: status %d: %s", resp.Status, body)
		}
		if ct := resp.Header.Get("Content-Type"); ct != ocispec.MediaTypeImageIndex {
			t.Errorf("GET referrers: Content-Type %q, want %q", ct, ocispec.MediaTypeImageIndex)
		}
		if idx := parseManifest(t, body); !hasReferrer(idx.Manifests, referrer, sigType) {
			t.Errorf("GET referrers: %s (%s) missing:\n%s", referrer, sigType, body)
		}
		for _, tag := range api.tags(t, repo) {
			if strings.HasPrefix(tag, "sha256-") {
				t.Errorf("tag %q exists: oras fell back to the referrers tag schema", tag)
			}
		}

		pulled := t.TempDir()
		o(t, "pull", ref+"@"+referrer.String(), "-o", pulled)
		compareFiles(t, pulled, map[string][]byte{"sig.txt": sig})
	})

	t.Run("repo tags and ls", func(t *testing.T) {
		o(t, "tag", ref+":v1", "v2")
		wantSet(t, "oras repo tags", lines(o(t, "repo", "tags", ref)), "v1", "v2")
		wantSet(t, "oras repo ls", lines(o(t, "repo", "ls", srv.Addr+"/clients/oras")), "artifact")
	})

	t.Run("copy to another repo", func(t *testing.T) {
		e.Run(t, oras, "cp", "-r", "--from-plain-http", "--to-plain-http", ref+":v1", srv.Addr+"/clients/oras/copy:v1")
		api.checkImage(t, "clients/oras/copy", "v1", subject)
		resp := api.get(t, "/v2/clients/oras/copy/referrers/"+subject.String())
		if resp.Status != http.StatusOK || len(parseManifest(t, resp.Body).Manifests) != 1 {
			t.Errorf("referrers of the copy (oras cp -r): status %d, want one referrer:\n%s", resp.Status, resp.Body)
		}
	})
}

// pushedDigest reads the digest from the JSON oras push/attach --format json print.
func pushedDigest(t *testing.T, out []byte) digest.Digest {
	t.Helper()
	var d struct {
		Digest digest.Digest `json:"digest"`
	}
	if err := json.Unmarshal(out, &d); err != nil || d.Digest.Validate() != nil {
		t.Fatalf("oras output has no digest (%v):\n%s", err, out)
	}
	return d.Digest
}

func hasReferrer(ms []ocispec.Descriptor, d digest.Digest, artifactType string) bool {
	for _, m := range ms {
		if m.Digest == d && m.ArtifactType == artifactType {
			return true
		}
	}
	return false
}
