package e2e

import (
	"crypto/sha256"
	"encoding/hex"
	"io/fs"
	"maps"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"testing"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/opencontainers/go-digest"
	ocispec "github.com/opencontainers/image-spec/specs-go/v1"

	"github.com/cairn-registry/cairn/internal/testutil/cairnproc"
	"github.com/cairn-registry/cairn/internal/testutil/regtest"
)

// snapshot maps every regular file under root/docker (the registry's
// storage tree) to the hash of its content.
func snapshot(t *testing.T, root string) map[string]string {
	t.Helper()
	out := map[string]string{}
	base := filepath.Join(root, "docker")
	err := filepath.WalkDir(base, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if !d.Type().IsRegular() {
			return nil
		}
		b, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		s := sha256.Sum256(b)
		rel, _ := filepath.Rel(root, p)
		out[rel] = hex.EncodeToString(s[:])
		return nil
	})
	if err != nil {
		t.Fatalf("snapshot %s: %v", base, err)
	}
	if len(out) == 0 {
		t.Fatalf("snapshot: no files under %s", base)
	}
	return out
}

// wantDenied checks a write refused by a read-only registry: the spec
// leaves the status open (403 or 405 are common); cairn says DENIED.
func wantDenied(t *testing.T, r regtest.Response) {
	t.Helper()
	wantErrorIn(t, r, []int{http.StatusForbidden, http.StatusMethodNotAllowed}, "DENIED")
}

func TestReadOnly(t *testing.T) {
	t.Parallel()
	root := t.TempDir()
	w := startRoot(t, root)
	const repo = "e2e/ro"
	img := w.pushRandom(repo+":v1", 3, 4096)
	w.push(img, repo+":v2")
	idx := platformIndex(t, false, v1.Platform{OS: "linux", Architecture: "amd64"}, v1.Platform{OS: "linux", Architecture: "arm64"})
	w.pushIndex(idx, repo+"/multi:latest")
	blob := randBytes(t, 2000)
	bd := w.uploadBlob(repo, blob)
	raw, _ := img.RawManifest()
	subject := ocispec.Descriptor{MediaType: mtOCIManifest, Digest: digest.Digest(sha(raw)), Size: int64(len(raw))}
	art := w.pushArtifact(repo, artSBOM, ocispec.MediaTypeEmptyJSON, subject, map[string]string{"a": "b"})
	openUpload := w.startUpload(repo)
	openUpload = w.patchChunk(openUpload, 0, []byte("partial"))
	w.stop()

	before := snapshot(t, root)
	cfg := cairnproc.WriteConfig(t, "version: 0.1\nstorage:\n  filesystem:\n    rootdirectory: "+root+"\n  maintenance:\n    readonly:\n      enabled: true\n")
	e := startRoot(t, root, "--config", cfg)

	// Reads work.
	e.verifyImage(repo, "v1", img)
	e.verifyImage(repo, mustDigest(t, img), img)
	e.verifyIndex(repo+"/multi", "latest", idx)
	e.getBlob(repo, bd, int64(len(blob)))
	if tags, r := e.tagsList(repo, ""); !slices.Equal(tags, []string{"v1", "v2"}) {
		t.Errorf("%v: tags %v", r, tags)
	}
	got, _ := e.referrers(repo, subject.Digest.String(), "")
	sameDescriptors(t, "read-only referrers", got, art)

	// Writes are refused.
	other := randomImage(t, true, 1, 100)
	oraw, _ := other.RawManifest()
	layers, _ := img.Layers()
	ld, _ := layers[0].Digest()
	for _, r := range []regtest.Response{
		e.do(http.MethodPost, "/v2/"+repo+"/blobs/uploads/", nil),
		e.do(http.MethodPost, "/v2/"+repo+"/blobs/uploads/?digest="+sha([]byte("x")), []byte("x"), "Content-Type", "application/octet-stream"),
		e.do(http.MethodPost, "/v2/e2e/ro2/blobs/uploads/?mount="+ld.String()+"&from="+repo, nil),
		e.do(http.MethodPatch, openUpload, []byte("more"), "Content-Type", "application/octet-stream", "Content-Range", "7-10"),
		e.do(http.MethodPut, withQuery(openUpload, "digest", sha([]byte("partial"))), nil),
		e.do(http.MethodDelete, openUpload, nil),
		e.putManifest(repo, "v1", mtOCIManifest, oraw),
		e.putManifest(repo, "new", mtOCIManifest, raw),
		e.do(http.MethodDelete, "/v2/"+repo+"/manifests/v2", nil),
		e.do(http.MethodDelete, "/v2/"+repo+"/manifests/"+mustDigest(t, img), nil),
		e.do(http.MethodDelete, "/v2/"+repo+"/manifests/"+art.desc.Digest.String(), nil),
		e.do(http.MethodDelete, "/v2/"+repo+"/blobs/"+bd, nil),
	} {
		wantDenied(t, r)
	}
	if err := remote.Write(e.ref(repo+":other"), other, e.ropts()...); err == nil {
		t.Errorf("remote.Write to a read-only registry succeeded")
	}

	// Nothing changed: the same image still pulls and the storage tree is
	// the same, file for file.
	e.verifyImage(repo, "v2", img)
	after := snapshot(t, root)
	if !maps.Equal(before, after) {
		for k, v := range after {
			if before[k] != v {
				t.Errorf("read-only server changed or added %s", k)
			}
		}
		for k := range before {
			if _, ok := after[k]; !ok {
				t.Errorf("read-only server removed %s", k)
			}
		}
	}
}
