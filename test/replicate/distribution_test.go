package replicate

import (
	"fmt"
	"strings"
	"testing"

	"github.com/cairn-registry/cairn/internal/testutil/cairnproc"
	"github.com/cairn-registry/cairn/internal/testutil/clitool"
	"github.com/cairn-registry/cairn/internal/testutil/regtest"
)

// distributionConfig runs distribution's registry on addr over root.
const distributionConfig = `version: 0.1
log:
  level: warn
storage:
  filesystem:
    rootdirectory: %s
  delete:
    enabled: true
http:
  addr: %s
`

// newDistribution is distribution's registry (scripts/install-tools.sh
// builds it, pinned, as distribution-registry), not started yet.
func newDistribution(t *testing.T) *node {
	bin := clitool.Path(t, "distribution-registry")
	n := newNode(t, "distribution")
	n.command = []string{bin, "serve", cairnproc.WriteConfig(t, fmt.Sprintf(distributionConfig, n.root, n.addr))}
	return n
}

// TestDistribution: cairn pushes an image, a multi-arch index and a
// referrer to distribution's registry (which keeps referrers by the tag
// schema), filters honoured, across an outage of distribution; a second
// cairn pulls them all back from it; every manifest and blob byte for
// byte.
func TestDistribution(t *testing.T) {
	dist := newDistribution(t)
	dist.start()
	src := newNode(t, "source")
	src.configure(pushTarget(dist))
	src.start()

	web := src.push("app/web:v1", regtest.RandomImage(t, 3, 4096))
	multi := src.pushIndex("app/multi:v1", 2)
	sbom := src.pushReferrer("app/web", web, "application/vnd.example.sbom", `{"spdxVersion":"SPDX-2.3"}`)
	src.push("app/secret:v1", regtest.RandomImage(t, 1, 1024))
	src.push("app/web:tmp-1", regtest.RandomImage(t, 1, 1024))
	waitFor(t, dist, "app/web:v1", "app/multi:v1", "app/web@"+sbom.String())
	waitReferrer(t, dist, "app/web", web, sbom)
	api, _ := get(t, dist.url(), "/v2/app/web/referrers/"+web.String(), "")
	fallback := has(t, dist, "app/web", web.Algorithm+"-"+web.Hex)
	t.Logf("distribution: referrers API answers %d; tag-schema index present: %v", api, fallback)
	sameTree(t, src, dist, "app/web", "v1")
	sameTree(t, src, dist, "app/multi", multi.String())
	sameTree(t, src, dist, "app/web", sbom.String())
	if has(t, dist, "app/web", "tmp-1") {
		t.Error("a filtered tag reached distribution")
	}

	dist.stop()
	web2 := src.push("app/web:v2", regtest.RandomImage(t, 2, 4096))
	waitFailing(t, src, "dr")
	dist.start()
	waitFor(t, dist, "app/web:v2")
	sameTree(t, src, dist, "app/web", "v2")

	back := newNode(t, "back")
	back.configure(fmt.Sprintf(`replication:
  targets:
    - name: from-distribution
      url: %s
      direction: pull
      interval: 1s
      repositories:
        include: ["app/**"]
`, dist.url()))
	back.start()
	waitFor(t, back, "app/web:v1", "app/web:v2", "app/multi:v1", "app/web@"+sbom.String())
	waitReferrer(t, back, "app/web", web, sbom)
	sameTree(t, dist, back, "app/web", "v1")
	sameTree(t, dist, back, "app/web", "v2")
	sameTree(t, dist, back, "app/multi", "v1")
	sameTree(t, dist, back, "app/web", sbom.String())
	if !has(t, back, "app/web", web2.String()) {
		t.Error("app/web:v2 by digest is missing after the pull")
	}

	// A full pass by hand beside the running source: the record in the
	// store says everything is there, so nothing is copied, and the
	// filtered out stay out.
	out, err := cli(t, "replicate", "run", "--config", src.config, "--root", src.root, "--target", "dr")
	if err != nil || !strings.Contains(out, "dr (push): ") || !strings.Contains(out, " 0 manifests ") || !strings.Contains(out, " 0 failed") {
		t.Errorf("cairn replicate run beside the source (%v):\n%s", err, out)
	}
	if has(t, dist, "app/secret", "v1") || has(t, dist, "app/web", "tmp-1") {
		t.Error("a filtered repository or tag reached distribution")
	}
}
