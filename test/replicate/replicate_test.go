package replicate

import (
	"fmt"
	"strings"
	"testing"

	"github.com/cairn-registry/cairn/internal/testutil/regtest"
)

// pushTarget is a replication section pushing to dst on push events (and
// every interval), with filters: app/** but app/secret, no tmp-* tags.
func pushTarget(dst *node) string {
	return fmt.Sprintf(`replication:
  targets:
    - name: dr
      url: %s
      direction: push
      onpush: true
      interval: 2s
      repositories:
        include: ["app/**"]
        exclude: ["app/secret"]
      tags:
        exclude: ["tmp-*"]
`, dst.url())
}

// TestPushReplication: images, a multi-arch index and a referrer pushed to
// the source arrive on the target byte for byte, filters honoured; with
// the target down for a while (stopped, then started again on its port
// and storage) what was pushed meanwhile arrives afterwards; a source
// killed right after a push resumes at restart without copying again what
// had arrived.
func TestPushReplication(t *testing.T) {
	dst := newNode(t, "target")
	dst.start()
	src := newNode(t, "source")
	src.configure(pushTarget(dst))
	src.start()

	web := src.push("app/web:v1", regtest.RandomImage(t, 3, 4096))
	src.push("app/web:tmp-1", regtest.RandomImage(t, 1, 1024))
	src.push("app/secret:v1", regtest.RandomImage(t, 1, 1024))
	src.push("other/x:v1", regtest.RandomImage(t, 1, 1024))
	multi := src.pushIndex("app/multi:v1", 3)
	sbom := src.pushReferrer("app/web", web, "application/vnd.example.sbom", `{"spdxVersion":"SPDX-2.3"}`)

	waitFor(t, dst, "app/web:v1", "app/multi:v1", "app/web@"+sbom.String())
	waitReferrer(t, dst, "app/web", web, sbom)
	sameTree(t, src, dst, "app/web", "v1")
	sameTree(t, src, dst, "app/multi", "v1")
	sameTree(t, src, dst, "app/multi", multi.String())
	sameTree(t, src, dst, "app/web", sbom.String())

	// The tag filter held in the pass over app/web (the referrer,
	// pushed last, arrived); the repository filters are checked after a
	// full pass, at the end.
	if has(t, dst, "app/web", "tmp-1") {
		t.Error("app/web:tmp-1 was replicated though filtered out")
	}

	// The target down for a while: pushes meanwhile arrive afterwards.
	dst.stop()
	web2 := src.push("app/web:v2", regtest.RandomImage(t, 2, 4096))
	sig := src.pushReferrer("app/web", web2, "application/vnd.example.signature", "signature of v2")
	src.pushIndex("app/multi:v2", 2)
	waitFailing(t, src, "dr")
	dst.start()
	waitFor(t, dst, "app/web:v2", "app/multi:v2")
	waitReferrer(t, dst, "app/web", web2, sig)
	sameTree(t, src, dst, "app/web", "v2")
	sameTree(t, src, dst, "app/multi", "v2")
	sameTree(t, src, dst, "app/web", sig.String())
	sameTree(t, src, dst, "app/web", "v1")

	// The source killed mid-way: once the target has the first layer of
	// a large image, before the rest. At restart the pass copies what is
	// missing and nothing that had arrived (the record in the source's
	// store, and a HEAD for each blob).
	pushBig(t, src, dst, "app/big")
	src.kill()
	midway := !has(t, dst, "app/big", "v1")
	t.Logf("source killed with app/big:v1 not yet on the target: %v", midway)
	src.start()
	waitFor(t, dst, "app/big:v1")
	sameTree(t, src, dst, "app/big", "v1")
	checkResumed(t, src, "dr", "push", "app/big")
	// That was a full pass (the one at start): the filtered out are
	// still not there.
	checkAbsent(t, dst, "app/web:tmp-1", "app/secret:v1", "other/x:v1")
}

// pullTarget is a replication section pulling from src every second, with
// filters: lib/** but lib/private, no tmp-* tags.
func pullTarget(src *node) string {
	return fmt.Sprintf(`replication:
  targets:
    - name: mirror
      url: %s
      direction: pull
      interval: 1s
      repositories:
        include: ["lib/**"]
        exclude: ["lib/private"]
      tags:
        exclude: ["tmp-*"]
`, src.url())
}

// TestPullReplication: the peer's images, indexes and referrers arrive
// here byte for byte through the registry's checks, filters honoured; with
// the peer down for a while, and with this registry killed mid-way, all
// arrives afterwards without copying again what had arrived; `cairn
// replicate run` does one pass by hand into another store.
func TestPullReplication(t *testing.T) {
	peer := newNode(t, "peer")
	peer.start()
	base := peer.push("lib/base:v1", regtest.RandomImage(t, 3, 4096))
	peer.push("lib/base:tmp-x", regtest.RandomImage(t, 1, 1024))
	peer.push("lib/private:v1", regtest.RandomImage(t, 1, 1024))
	peer.push("other/y:v1", regtest.RandomImage(t, 1, 1024))
	multi := peer.pushIndex("lib/multi:v1", 3)
	sbom := peer.pushReferrer("lib/base", base, "application/vnd.example.sbom", `{"spdxVersion":"SPDX-2.3"}`)

	local := newNode(t, "local")
	local.configure(pullTarget(peer))
	local.start()
	waitFor(t, local, "lib/base:v1", "lib/multi:v1", "lib/base@"+sbom.String())
	waitReferrer(t, local, "lib/base", base, sbom)
	sameTree(t, peer, local, "lib/base", "v1")
	sameTree(t, peer, local, "lib/multi", "v1")
	sameTree(t, peer, local, "lib/multi", multi.String())
	sameTree(t, peer, local, "lib/base", sbom.String())
	checkAbsent(t, local, "lib/base:tmp-x", "lib/private:v1", "other/y:v1")

	// The peer down for a while: passes fail, then catch up.
	peer.stop()
	waitFailing(t, local, "mirror")
	peer.start()
	base2 := peer.push("lib/base:v2", regtest.RandomImage(t, 2, 4096))
	sig := peer.pushReferrer("lib/base", base2, "application/vnd.example.signature", "signature of v2")
	waitFor(t, local, "lib/base:v2")
	waitReferrer(t, local, "lib/base", base2, sig)
	sameTree(t, peer, local, "lib/base", "v2")
	sameTree(t, peer, local, "lib/base", sig.String())

	// This registry killed mid-way through a large image.
	pushBig(t, peer, local, "lib/big")
	midway := !has(t, local, "lib/big", "v1")
	local.kill()
	t.Logf("killed with lib/big:v1 not yet stored a moment before: %v", midway)
	local.start()
	waitFor(t, local, "lib/big:v1")
	sameTree(t, peer, local, "lib/big", "v1")
	checkResumed(t, local, "mirror", "pull", "lib/big")

	// One pass by hand into another store, then another that copies
	// nothing.
	other := newNode(t, "by-hand")
	out, err := cli(t, "replicate", "run", "--config", local.config, "--root", other.root)
	if err != nil {
		t.Fatalf("cairn replicate run: %v\n%s", err, out)
	}
	if !strings.Contains(out, "mirror (pull): ") || !strings.Contains(out, " 0 failed") {
		t.Errorf("cairn replicate run printed:\n%s", out)
	}
	out, err = cli(t, "replicate", "run", "--config", local.config, "--root", other.root, "--target", "mirror")
	if err != nil || !strings.Contains(out, " 0 manifests ") {
		t.Errorf("a second cairn replicate run copied again (%v):\n%s", err, out)
	}
	other.start()
	for _, r := range []string{"lib/base:v1", "lib/base:v2", "lib/multi:v1", "lib/big:v1", "lib/base@" + sbom.String(), "lib/base@" + sig.String()} {
		repo, ref := splitRef(r)
		sameTree(t, peer, other, repo, ref)
	}
	if has(t, other, "lib/private", "v1") {
		t.Error("lib/private was replicated by hand though filtered out")
	}
}
