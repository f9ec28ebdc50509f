package e2e

import (
	"fmt"
	"net"
	"net/http"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/cairn-registry/cairn/internal/testutil/cairnproc"
	"github.com/cairn-registry/cairn/internal/testutil/objstore"
	"github.com/cairn-registry/cairn/internal/testutil/testenv"
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

// TestTagMovedOnOtherNodeWithRedis: with the redis section configured,
// nodes share link versions, so a tag moved or deleted through node A, or
// an untagged manifest `cairn gc` deleted, is served as such by node B at
// once, though B trusts what it cached for an hour.
func TestTagMovedOnOtherNodeWithRedis(t *testing.T) {
	root := t.TempDir()
	cfg := cairnproc.WriteConfig(t, fmt.Sprintf("version: 0.1\nredis:\n  addrs: [%s]\n  prefix: %q\n"+
		"storage:\n  delete:\n    enabled: true\n  filesystem:\n    rootdirectory: %s\n  cache:\n    manifests:\n      tagttl: 1h\n",
		testenv.RedisAddr(t), objstore.RandomName("cairn-test-")+":", root))
	node := func() *env { return newEnv(t, cairnproc.StartArgs(t, cairnproc.Binary(t), "--config", cfg)).with(t) }
	a, b := node(), node()
	const repo = "multi/app"
	bs := a.uploadBlobSet(repo, 1)
	m1 := ociManifest(t, bs.config, bs.layers, map[string]string{"v": "1"})
	m2 := ociManifest(t, bs.config, bs.layers, map[string]string{"v": "2"})
	m3 := ociManifest(t, bs.config, bs.layers, map[string]string{"v": "3"})
	wantStatus(t, a.putManifest(repo, "v1", mtOCIManifest, m1), http.StatusCreated)
	for _, n := range []*env{a, b} {
		n.getManifest(repo, "v1", sha(m1), mtOCIManifest) // each node caches it
	}

	wantStatus(t, a.putManifest(repo, "v1", mtOCIManifest, m2), http.StatusCreated)
	b.getManifest(repo, "v1", sha(m2), mtOCIManifest)
	if h := b.do(http.MethodHead, "/v2/"+repo+"/manifests/v1", nil); h.Header.Get("Docker-Content-Digest") != sha(m2) {
		t.Errorf("HEAD on B: %v, want digest %s", h, sha(m2))
	}

	// An untagged manifest B has cached is gone on B once `cairn gc`
	// deleted it, and a deleted tag at once.
	wantStatus(t, a.putManifest(repo, sha(m3), mtOCIManifest, m3), http.StatusCreated)
	b.getManifest(repo, sha(m3), sha(m3), mtOCIManifest)
	if out, err := exec.Command(cairnproc.Binary(t), "gc", "--config", cfg, "--delay", "0s", "--delete-untagged", "--quiet").CombinedOutput(); err != nil {
		t.Fatalf("cairn gc: %v\n%s", err, out)
	}
	wantError(t, b.do(http.MethodGet, "/v2/"+repo+"/manifests/"+sha(m3), nil), http.StatusNotFound, "MANIFEST_UNKNOWN")
	wantStatus(t, a.do(http.MethodDelete, "/v2/"+repo+"/manifests/v1", nil), http.StatusAccepted)
	wantError(t, b.do(http.MethodGet, "/v2/"+repo+"/manifests/v1", nil), http.StatusNotFound, "MANIFEST_UNKNOWN")
}

// TestLinkVersionsRedisDown: a node whose Redis does not answer serves and
// takes pushes, reading links from storage on every request, and says in
// its log that other nodes see its writes only within the tag TTL.
func TestLinkVersionsRedisDown(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	down := ln.Addr().String()
	ln.Close() // nothing listens there now
	cfg := cairnproc.WriteConfig(t, "version: 0.1\nredis:\n  addrs: ["+down+"]\n"+
		"storage:\n  filesystem:\n    rootdirectory: "+t.TempDir()+"\n  cache:\n    manifests:\n      tagttl: 1h\n")
	srv := cairnproc.StartArgs(t, cairnproc.Binary(t), "--config", cfg)
	a := newEnv(t, srv).with(t)
	const repo = "down/app"
	bs := a.uploadBlobSet(repo, 1)
	for i := range 3 {
		m := ociManifest(t, bs.config, bs.layers, map[string]string{"v": strconv.Itoa(i)})
		wantStatus(t, a.putManifest(repo, "latest", mtOCIManifest, m), http.StatusCreated)
		a.getManifest(repo, "latest", sha(m), mtOCIManifest)
	}
	if log := srv.Logs(); !strings.Contains(log, "other nodes see this write") {
		t.Errorf("the log does not say that the writes were not shared:\n%s", log)
	}
}
