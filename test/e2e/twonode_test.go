package e2e

import (
	"net/http"
	"testing"
	"time"

	"github.com/cairn-registry/cairn/internal/testutil/cairnproc"
	"github.com/cairn-registry/cairn/internal/testutil/objstore"
)

// twoNodeTTL is the tag TTL of the nodes below: the documented bound on how
// long a node may serve a tag as it was before another node moved it.
const twoNodeTTL = 2 * time.Second

// TestTagMovedOnOtherNode (issue 13): two `cairn serve` over one store, as
// behind a load balancer, each caching manifests and links. A tag moved or
// deleted through node A is served as moved by A at once and by node B
// within storage.cache.manifests.tagttl; a node with tagttl 0s sees it at
// once.
func TestTagMovedOnOtherNode(t *testing.T) {
	t.Run("filesystem", func(t *testing.T) {
		storage := "storage:\n  filesystem:\n    rootdirectory: " + t.TempDir() + "\n"
		twoNodes(t, storage)
	})
	t.Run("s3", func(t *testing.T) {
		_, section := objstore.S3Bucket(t, "cairn-twonode-")
		twoNodes(t, "storage:\n"+section)
	})
}

func twoNodes(t *testing.T, storage string) {
	node := func(ttl string) *env {
		cfg := cairnproc.WriteConfig(t, "version: 0.1\n"+storage+"  cache:\n    manifests:\n      tagttl: "+ttl+"\n")
		return newEnv(t, cairnproc.StartArgs(t, cairnproc.Binary(t), "--config", cfg)).with(t)
	}
	a, b, now := node(twoNodeTTL.String()), node(twoNodeTTL.String()), node("0s")
	const repo = "multi/app"
	bs := a.uploadBlobSet(repo, 1)
	m1 := ociManifest(t, bs.config, bs.layers, map[string]string{"v": "1"})
	m2 := ociManifest(t, bs.config, bs.layers, map[string]string{"v": "2"})
	wantStatus(t, a.putManifest(repo, "v1", mtOCIManifest, m1), http.StatusCreated)
	for _, n := range []*env{a, b, now} {
		n.getManifest(repo, "v1", sha(m1), mtOCIManifest) // each node caches it
	}

	wantStatus(t, a.putManifest(repo, "v1", mtOCIManifest, m2), http.StatusCreated)
	moved := time.Now()
	a.getManifest(repo, "v1", sha(m2), mtOCIManifest)
	now.getManifest(repo, "v1", sha(m2), mtOCIManifest)
	time.Sleep(twoNodeTTL - time.Since(moved))
	b.getManifest(repo, "v1", sha(m2), mtOCIManifest)
	if h := b.do(http.MethodHead, "/v2/"+repo+"/manifests/v1", nil); h.Header.Get("Docker-Content-Digest") != sha(m2) {
		t.Errorf("HEAD on B after the bound: %v, want digest %s", h, sha(m2))
	}

	// A deleted tag, and a deleted manifest, are gone on B within the bound.
	b.getManifest(repo, sha(m1), sha(m1), mtOCIManifest)
	wantStatus(t, a.do(http.MethodDelete, "/v2/"+repo+"/manifests/v1", nil), http.StatusAccepted)
	wantStatus(t, a.do(http.MethodDelete, "/v2/"+repo+"/manifests/"+sha(m1), nil), http.StatusAccepted)
	deleted := time.Now()
	wantError(t, a.do(http.MethodGet, "/v2/"+repo+"/manifests/v1", nil), http.StatusNotFound, "MANIFEST_UNKNOWN")
	wantError(t, now.do(http.MethodGet, "/v2/"+repo+"/manifests/"+sha(m1), nil), http.StatusNotFound, "MANIFEST_UNKNOWN")
	time.Sleep(twoNodeTTL - time.Since(deleted))
	wantError(t, b.do(http.MethodGet, "/v2/"+repo+"/manifests/v1", nil), http.StatusNotFound, "MANIFEST_UNKNOWN")
	wantError(t, b.do(http.MethodGet, "/v2/"+repo+"/manifests/"+sha(m1), nil), http.StatusNotFound, "MANIFEST_UNKNOWN")
}
