package e2e

import (
	"fmt"
	"net/http"
	"testing"

	"github.com/cairn-registry/cairn/internal/testutil/cairnproc"
)

// TestSparseManifests: by default a manifest naming a layer or an index
// child that was never pushed is refused with MANIFEST_BLOB_UNKNOWN; with
// validation.manifests.sparse it is stored and served, and with
// indexes.platforms: list only the listed platforms must exist.
func TestSparseManifests(t *testing.T) {
	t.Parallel()
	const repo = "e2e/sparse"
	missing := sha(randBytes(t, 64))
	manifestFor := func(e *env) []byte {
		cfg := e.uploadBlob(repo, []byte("{}"))
		layer := e.uploadBlob(repo, randBytes(t, 100))
		return []byte(fmt.Sprintf(`{"schemaVersion":2,"mediaType":"application/vnd.oci.image.manifest.v1+json",`+
			`"config":{"mediaType":"application/vnd.oci.image.config.v1+json","digest":%q,"size":2},`+
			`"layers":[{"mediaType":"application/vnd.oci.image.layer.v1.tar+gzip","digest":%q,"size":100},`+
			`{"mediaType":"application/vnd.oci.image.layer.v1.tar+gzip","digest":%q,"size":64}]}`, cfg, layer, missing))
	}
	index := func(present string, size int) []byte {
		return []byte(fmt.Sprintf(`{"schemaVersion":2,"mediaType":"application/vnd.oci.image.index.v1+json","manifests":[`+
			`{"mediaType":"application/vnd.oci.image.manifest.v1+json","digest":%q,"size":%d,"platform":{"os":"linux","architecture":"amd64"}},`+
			`{"mediaType":"application/vnd.oci.image.manifest.v1+json","digest":%q,"size":10,"platform":{"os":"linux","architecture":"arm64"}}]}`,
			present, size, missing))
	}

	strict := start(t)
	wantError(t, strict.putManifest(repo, "img", mtOCIManifest, manifestFor(strict)), http.StatusBadRequest, "MANIFEST_BLOB_UNKNOWN")
	wantError(t, strict.do(http.MethodGet, "/v2/"+repo+"/manifests/img", nil), http.StatusNotFound, "MANIFEST_UNKNOWN")

	sparse := start(t, "--config", cairnproc.WriteConfig(t, "validation:\n  manifests:\n    sparse: true\n"))
	body := manifestFor(sparse)
	wantStatus(t, sparse.putManifest(repo, "img", mtOCIManifest, body), http.StatusCreated)
	sparse.getManifest(repo, "img", sha(body), mtOCIManifest)
	wantError(t, sparse.do(http.MethodGet, "/v2/"+repo+"/blobs/"+missing, nil), http.StatusNotFound, "BLOB_UNKNOWN")
	idx := index(sha(body), len(body))
	wantStatus(t, sparse.putManifest(repo, "idx", mtOCIIndex, idx), http.StatusCreated)
	sparse.getManifest(repo, "idx", sha(idx), mtOCIIndex)

	// Only amd64 must exist: the index whose arm64 child is missing is
	// accepted, one whose amd64 child is missing is not.
	listed := start(t, "--config", cairnproc.WriteConfig(t, "validation:\n  manifests:\n    indexes:\n      platforms: list\n      platformlist:\n        - os: linux\n          architecture: amd64\n"))
	cfg := listed.uploadBlob(repo, []byte("{}"))
	img := []byte(fmt.Sprintf(`{"schemaVersion":2,"mediaType":"application/vnd.oci.image.manifest.v1+json",`+
		`"config":{"mediaType":"application/vnd.oci.image.config.v1+json","digest":%q,"size":2},"layers":[]}`, cfg))
	wantStatus(t, listed.putManifest(repo, "amd64", mtOCIManifest, img), http.StatusCreated)
	wantStatus(t, listed.putManifest(repo, "idx", mtOCIIndex, index(sha(img), len(img))), http.StatusCreated)
	wantError(t, listed.putManifest(repo, "bad", mtOCIIndex, index(missing, 10)), http.StatusBadRequest, "MANIFEST_BLOB_UNKNOWN")
}
