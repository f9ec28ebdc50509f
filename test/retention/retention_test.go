// Package retention tests retention policies through `cairn serve` (which
// records pulls) and `cairn gc` (which applies the policies, then
// collects): a dry run changes nothing and names what a real run deletes;
// the survivors, computed here from the seed independently of cairn's
// code, pull byte-exact afterwards.
package retention

import (
	"encoding/json"
	"net/http"
	"os"
	"os/exec"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/random"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/types"

	"github.com/cairn-registry/cairn/internal/testutil/cairnproc"
	"github.com/cairn-registry/cairn/internal/testutil/regtest"
)

func TestMain(m *testing.M) { os.Exit(cairnproc.Main(m)) }

const config = `storage:
  delete:
    enabled: true
retention:
  delay: 0s
  policies:
    - repositories: ["ci/**"]
      deleteuntagged: true
      keeptags:
        - patterns: ["v[0-9.]+"]
        - mostrecentlypushedcount: 2
        - pulledwithin: 1h
`

func TestRetention(t *testing.T) {
	cfg := cairnproc.WriteConfig(t, config)
	srv := cairnproc.Start(t, "", "--config", cfg)
	root := srv.Root
	hc := &http.Client{Timeout: time.Minute}
	defer hc.CloseIdleConnections()

	// One base layer every image shares, and one of its own each.
	base, err := random.Layer(64<<10, types.OCILayer)
	if err != nil {
		t.Fatal(err)
	}
	images := map[string]v1.Image{}
	digests := map[string]string{}
	push := func(repo, tag string) {
		t.Helper()
		own, err := random.Layer(16<<10, types.OCILayer)
		if err != nil {
			t.Fatal(err)
		}
		img, err := regtest.OCIImage(base, own)
		if err != nil {
			t.Fatal(err)
		}
		if err := remote.Write(regtest.Ref(t, srv.Addr, repo+":"+tag), img, remote.WithContext(t.Context())); err != nil {
			t.Fatal(err)
		}
		d, _ := img.Digest()
		images[repo+":"+tag], digests[repo+":"+tag] = img, d.String()
		time.Sleep(10 * time.Millisecond) // distinct push times, in this order
	}
	// Pushed in this order: the two most recent are t5 and t6.
	for _, tag := range []string{"v1.0", "v2.0", "t1", "t2", "t3", "t4", "t5", "t6"} {
		push("ci/app", tag)
	}
	for _, tag := range []string{"x1", "x2"} {
		push("keep/app", tag) // no policy governs keep/*
	}
	// An untagged image, and a signature (a referrer) of t2's image.
	untagged, err := regtest.OCIImage(base)
	if err != nil {
		t.Fatal(err)
	}
	ud, _ := untagged.Digest()
	if err := remote.Write(regtest.Ref(t, srv.Addr, "ci/app@"+ud.String()), untagged, remote.WithContext(t.Context())); err != nil {
		t.Fatal(err)
	}
	t2desc, err := remote.Head(regtest.Ref(t, srv.Addr, "ci/app:t2"))
	if err != nil {
		t.Fatal(err)
	}
	sig := mutate.Subject(mutate.ConfigMediaType(empty.Image, "application/vnd.example.signature"), *t2desc).(v1.Image)
	sd, _ := sig.Digest()
	if err := remote.Write(regtest.Ref(t, srv.Addr, "ci/app@"+sd.String()), sig, remote.WithContext(t.Context())); err != nil {
		t.Fatal(err)
	}
	// t2 is pulled (by tag, as clients resolve it).
	if r := regtest.Do(t, hc, http.MethodGet, srv.URL+"/v2/ci/app/manifests/t2", nil, "Accept", regtest.ManifestAccept); r.Status != http.StatusOK {
		t.Fatal(r)
	}
	srv.Stop() // records the pull

	// Expected, from the seed and the policy: patterns keep v1.0 and v2.0,
	// the two most recent pushes t5 and t6, the pull t2; t2's signature
	// stays with it; t1, t3, t4 and the untagged image go.
	gone := []string{"t1", "t3", "t4"}
	kept := []string{"t2", "t5", "t6", "v1.0", "v2.0"}

	out := cairnGC(t, cfg, root, "--dry-run")
	if !strings.Contains(out, "would delete 3 tags and 4 untagged manifests") {
		t.Errorf("dry run summary:\n%s", out)
	}
	for _, tag := range gone {
		if !regexp.MustCompile(`would delete tag"? repository=ci/app tag=` + regexp.QuoteMeta(tag) + `\b`).MatchString(out) {
			t.Errorf("dry run does not name tag %s:\n%s", tag, out)
		}
	}
	srv = cairnproc.Start(t, root, "--config", cfg)
	if got := tags(t, srv, "ci/app"); len(got) != 8 {
		t.Errorf("after the dry run ci/app has tags %v", got)
	}
	srv.Stop()

	out = cairnGC(t, cfg, root)
	if !strings.Contains(out, "deleted 3 tags and 4 untagged manifests") {
		t.Errorf("summary:\n%s", out)
	}
	srv = cairnproc.Start(t, root, "--config", cfg)
	if got := tags(t, srv, "ci/app"); !slices.Equal(got, kept) {
		t.Errorf("ci/app tags %v, want %v", got, kept)
	}
	if got := tags(t, srv, "keep/app"); !slices.Equal(got, []string{"x1", "x2"}) {
		t.Errorf("keep/app tags %v", got)
	}
	for _, tag := range kept {
		if err := regtest.CheckPull(t.Context(), regtest.Ref(t, srv.Addr, "ci/app:"+tag), digests["ci/app:"+tag]); err != nil {
			t.Errorf("survivor %s: %v", tag, err)
		}
	}
	for _, tag := range []string{"x1", "x2"} {
		if err := regtest.CheckPull(t.Context(), regtest.Ref(t, srv.Addr, "keep/app:"+tag), digests["keep/app:"+tag]); err != nil {
			t.Errorf("keep/app:%s: %v", tag, err)
		}
	}
	if r := regtest.Do(t, hc, http.MethodGet, srv.URL+"/v2/ci/app/manifests/"+sd.String(), nil, "Accept", regtest.ManifestAccept+",application/vnd.oci.image.manifest.v1+json"); r.Status != http.StatusOK {
		t.Errorf("t2's signature: %v", r)
	}
	for _, ref := range []string{"t1", "t3", "t4", ud.String(), digests["ci/app:t1"]} {
		if r := regtest.Do(t, hc, http.MethodGet, srv.URL+"/v2/ci/app/manifests/"+ref, nil, "Accept", regtest.ManifestAccept); r.Status != http.StatusNotFound {
			t.Errorf("deleted %s: %v", ref, r)
		}
	}
}

func cairnGC(t *testing.T, cfg, root string, args ...string) string {
	t.Helper()
	cmd := exec.Command(cairnproc.Binary(t), append([]string{"gc", "--config", cfg, "--root", root, "--quiet=false"}, args...)...)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("cairn gc %v: %v\n%s", args, err, out)
	}
	return string(out)
}

func tags(t *testing.T, srv *cairnproc.Server, repo string) []string {
	t.Helper()
	hc := &http.Client{Timeout: time.Minute}
	defer hc.CloseIdleConnections()
	var list struct{ Tags []string }
	r := regtest.Do(t, hc, http.MethodGet, srv.URL+"/v2/"+repo+"/tags/list", nil)
	if err := json.Unmarshal(r.Body, &list); err != nil || r.Status != http.StatusOK {
		t.Fatalf("tags of %s: %v", repo, r)
	}
	slices.Sort(list.Tags)
	return list.Tags
}
