package clients

import (
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/opencontainers/go-digest"
)

func TestPodman(t *testing.T) {
	t.Parallel()
	ct := startClientTest(t, "podman")
	srv, api, e, podman := ct.srv, ct.api, ct.env, ct.tool

	// Private storage (vfs needs no kernel overlay or fuse), no systemd, no
	// event journal, and an accept-anything signature policy, so podman runs
	// the same as root in a bare CI container as on a workstation.
	state := t.TempDir()
	policy := filepath.Join(state, "policy.json")
	if err := os.WriteFile(policy, []byte(`{"default":[{"type":"insecureAcceptAnything"}]}`), 0o644); err != nil {
		t.Fatal(err)
	}
	global := []string{
		"--root", filepath.Join(state, "root"),
		"--runroot", filepath.Join(state, "runroot"),
		"--tmpdir", filepath.Join(state, "tmp"),
		"--storage-driver", "vfs",
		"--events-backend", "none",
		"--cgroup-manager", "cgroupfs",
	}
	p := ct.runner(global)
	t.Cleanup(func() {
		// vfs layers can hold read-only dirs; let podman remove its images
		// before the temp dir goes.
		_, _, _ = e.Exec(podman, append(slices.Clone(global), "rmi", "--all", "--force")...)
	})

	img := newImage(t, 41, false, 3<<10, 600<<10, 1<<20)
	layoutDir := filepath.Join(t.TempDir(), "layout")
	newLayout(t, layoutDir).addImage(img, "v1")
	archive := filepath.Join(t.TempDir(), "image.tar")
	tarDir(t, layoutDir, archive)
	// Podman names an image by its config digest; the config travels
	// unchanged through storage, push and pull.
	imageID := digest.FromBytes(img.Config).Encoded()

	repo := "clients/podman/img"
	ref := srv.Addr + "/" + repo
	pushed := map[string]digest.Digest{} // tag -> manifest digest podman reported

	if !t.Run("load oci-archive", func(t *testing.T) {
		out := lines(p(t, "pull", "-q", "--signature-policy", policy, "oci-archive:"+archive))
		if len(out) == 0 || out[len(out)-1] != imageID {
			t.Fatalf("podman pull oci-archive printed %q, want image ID %s", out, imageID)
		}
	}) {
		return // the rest builds on it
	}

	for _, tc := range []struct{ tag, format, mediaType string }{
		{"v1", "oci", "application/vnd.oci.image.manifest.v1+json"},
		{"docker", "v2s2", dockerManifest},
	} {
		t.Run("push "+tc.format, func(t *testing.T) {
			df := filepath.Join(t.TempDir(), "digest")
			p(t, "push", "--tls-verify=false", "--signature-policy", policy, "--format", tc.format,
				"--digestfile", df, imageID, "docker://"+ref+":"+tc.tag)
			b, err := os.ReadFile(df)
			if err != nil {
				t.Fatal(err)
			}
			d, err := digest.Parse(strings.TrimSpace(string(b)))
			if err != nil {
				t.Fatalf("podman --digestfile: %v (%q)", err, b)
			}
			raw, mt := api.checkImage(t, repo, tc.tag, d)
			if mt != tc.mediaType {
				t.Errorf("Content-Type %q, want %q", mt, tc.mediaType)
			}
			if m := parseManifest(t, raw); m.Config == nil || m.Config.Digest.Encoded() != imageID {
				t.Errorf("pushed manifest config %+v, want digest sha256:%s", m.Config, imageID)
			}
			pushed[tc.tag] = d
		})
	}

	t.Run("pull back", func(t *testing.T) {
		if len(pushed) != 2 {
			t.Skip("needs both pushes")
		}
		for _, tag := range []string{"v1", "docker"} {
			want := pushed[tag]
			// Both tags hold the same image (same config, so same image ID):
			// start empty so the digest podman records is this pull's.
			p(t, "rmi", "--all", "--force")
			out := lines(p(t, "pull", "-q", "--tls-verify=false", "--signature-policy", policy, ref+":"+tag))
			if len(out) == 0 || out[len(out)-1] != imageID {
				t.Errorf("podman pull %s printed %q, want image ID %s", tag, out, imageID)
			}
			var info []struct {
				Digest      digest.Digest
				RepoDigests []string
				RootFS      struct{ Layers []digest.Digest }
			}
			raw := p(t, "image", "inspect", ref+":"+tag)
			if err := json.Unmarshal(raw, &info); err != nil || len(info) != 1 {
				t.Fatalf("podman image inspect: %v\n%s", err, raw)
			}
			if info[0].Digest != want {
				t.Errorf("podman image inspect %s: digest %s, want %s (what push reported)", tag, info[0].Digest, want)
			}
			if !slices.Contains(info[0].RepoDigests, ref+"@"+want.String()) {
				t.Errorf("podman image inspect %s: RepoDigests %q lack %s@%s", tag, info[0].RepoDigests, ref, want)
			}
			if !slices.Equal(info[0].RootFS.Layers, img.DiffIDs) {
				t.Errorf("podman image inspect %s: layers %v, want %v", tag, info[0].RootFS.Layers, img.DiffIDs)
			}
		}
		// By digest, too.
		out := lines(p(t, "pull", "-q", "--tls-verify=false", "--signature-policy", policy, ref+"@"+pushed["v1"].String()))
		if len(out) == 0 || out[len(out)-1] != imageID {
			t.Errorf("podman pull by digest printed %q, want image ID %s", out, imageID)
		}
	})
}
