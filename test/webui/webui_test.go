// Package webui tests the built-in web page in a real browser: headless
// Chromium renders it against a real `cairn serve` holding pushed images.
package webui

import (
	"context"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/google/go-containerregistry/pkg/authn"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/random"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"golang.org/x/crypto/bcrypt"

	"github.com/cairn-registry/cairn/internal/testutil/cairnproc"
	"github.com/cairn-registry/cairn/internal/testutil/clitool"
	"github.com/cairn-registry/cairn/internal/testutil/htpasswdtest"
	"github.com/cairn-registry/cairn/internal/testutil/regtest"
)

func TestMain(m *testing.M) { os.Exit(cairnproc.Main(m)) }

// chromium renders url headless and returns the DOM after scripts ran;
// with shot, it also saves a screenshot there.
func chromium(t *testing.T, url, shot string) string {
	t.Helper()
	bin := clitool.Path(t, "chromium")
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute) // a hang guard
	defer cancel()
	args := []string{"--headless", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage", "--no-first-run",
		"--user-data-dir=" + t.TempDir(), "--window-size=1280,1800"}
	if shot != "" {
		out, err := exec.CommandContext(ctx, bin, append(args, "--screenshot="+shot, url)...).CombinedOutput()
		if err != nil {
			t.Fatalf("chromium --screenshot: %v\n%s", err, out)
		}
	}
	out, err := exec.CommandContext(ctx, bin, append(args, "--dump-dom", url)...).Output()
	if err != nil {
		t.Fatalf("chromium --dump-dom %s: %v", url, err)
	}
	return string(out)
}

// seed pushes an image with a signature (a referrer), and a two-platform
// index.
func seed(t *testing.T, addr string, opts ...remote.Option) {
	t.Helper()
	opts = append(opts, remote.WithContext(t.Context()))
	img := regtest.RandomImage(t, 2, 64<<10)
	if err := remote.Write(regtest.Ref(t, addr, "team/app:v1"), img, opts...); err != nil {
		t.Fatal(err)
	}
	desc, err := remote.Head(regtest.Ref(t, addr, "team/app:v1"), opts...)
	if err != nil {
		t.Fatal(err)
	}
	sig := mutate.Subject(mutate.ConfigMediaType(empty.Image, "application/vnd.example.signature"), *desc).(v1.Image)
	sd, _ := sig.Digest()
	if err := remote.Write(regtest.Ref(t, addr, "team/app@"+sd.String()), sig, opts...); err != nil {
		t.Fatal(err)
	}
	idx, err := random.Index(32<<10, 1, 2)
	if err != nil {
		t.Fatal(err)
	}
	m, err := idx.IndexManifest()
	if err != nil {
		t.Fatal(err)
	}
	adds := []mutate.IndexAddendum{}
	for i, platform := range []v1.Platform{{OS: "linux", Architecture: "amd64"}, {OS: "linux", Architecture: "arm64", Variant: "v8"}} {
		child, err := idx.Image(m.Manifests[i].Digest)
		if err != nil {
			t.Fatal(err)
		}
		p := platform
		adds = append(adds, mutate.IndexAddendum{Add: child, Descriptor: v1.Descriptor{Platform: &p}})
	}
	multi := mutate.AppendManifests(empty.Index, adds...)
	if err := remote.WriteIndex(regtest.Ref(t, addr, "public/multi:latest"), multi, opts...); err != nil {
		t.Fatal(err)
	}
}

// chart returns the SVG of the plot captioned caption in page.
func chart(page, caption string) string {
	for _, fig := range strings.Split(page, `<figure class="chart">`)[1:] {
		if strings.HasPrefix(fig, "<figcaption>"+caption+"<") {
			fig, _, _ = strings.Cut(fig, "</figure>")
			return fig
		}
	}
	return ""
}

// TestPageInBrowser: the page lists the repositories and tags with their
// platforms and referrers, and draws the storage plots (dedup's figures,
// GC runs, cache hits); a screenshot is kept as a test artifact.
func TestPageInBrowser(t *testing.T) {
	srv := cairnproc.Start(t, "", "--config", cairnproc.WriteConfig(t, `ui:
  enabled: true
storage:
  delete:
    enabled: true
  gc:
    enabled: true
    interval: 1s
    delay: 0s
  dedup:
    mode: full
`))
	seed(t, srv.Addr)
	// Something for GC to free, and reads of deduplicated layers for the
	// cache: poll until the page shows both (the only time limit is the
	// test's).
	doomed := regtest.RandomImage(t, 1, 32<<10)
	if err := remote.Write(regtest.Ref(t, srv.Addr, "tmp/doomed:v1"), doomed, remote.WithContext(t.Context())); err != nil {
		t.Fatal(err)
	}
	dd, _ := doomed.Digest()
	hc := &http.Client{Timeout: time.Minute}
	defer hc.CloseIdleConnections()
	if r := regtest.Do(t, hc, http.MethodDelete, srv.URL+"/v2/tmp/doomed/manifests/"+dd.String(), nil); r.Status != http.StatusAccepted {
		t.Fatal(r)
	}
	img, err := remote.Image(regtest.Ref(t, srv.Addr, "team/app:v1"))
	if err != nil {
		t.Fatal(err)
	}
	ls, err := img.Layers()
	if err != nil {
		t.Fatal(err)
	}
	ld, _ := ls[0].Digest()
	deadline, _ := t.Deadline()
	for {
		regtest.Do(t, hc, http.MethodGet, srv.URL+"/v2/team/app/blobs/"+ld.String(), nil)
		page := string(regtest.Do(t, hc, http.MethodGet, srv.URL+"/ui/", nil).Body)
		if strings.Contains(chart(page, "Bytes freed per GC run"), `class="bar"`) && strings.Contains(chart(page, "Cache hit ratio"), `class="bar"`) {
			break
		}
		if time.Until(deadline) < 30*time.Second {
			t.Fatalf("no GC run or cache lookup on the page as the test's -timeout nears:\n%s", page)
		}
		time.Sleep(200 * time.Millisecond)
	}

	shot := filepath.Join(t.ArtifactDir(), "overview.png")
	dom := chromium(t, srv.URL+"/ui/", shot)
	for _, want := range []string{`href="/ui/repo/team/app"`, `href="/ui/repo/public/multi"`, "Dedup ratio", "Bytes freed per GC run", "Cache hit ratio", "Logical (blue) and stored (green) bytes"} {
		if !strings.Contains(dom, want) {
			t.Errorf("overview lacks %q:\n%s", want, dom)
		}
	}
	if n := strings.Count(dom, `<figure class="chart">`); n != 4 {
		t.Errorf("%d plots rendered, want 4", n)
	}
	for _, c := range []string{"Logical (blue) and stored (green) bytes", "Dedup ratio"} {
		if !strings.Contains(chart(dom, c), "<polyline") {
			t.Errorf("plot %q has no line:\n%s", c, chart(dom, c))
		}
	}
	// The cache bars say their counts; the GC runs and the lines are dated.
	if c := chart(dom, "Cache hit ratio"); !regexp.MustCompile(`>\d+ hits · \d+ misses<`).MatchString(c) {
		t.Errorf("cache bars without their hits and misses:\n%s", c)
	}
	for _, c := range []string{"Logical (blue) and stored (green) bytes", "Bytes freed per GC run"} {
		if !regexp.MustCompile(`>\d\d:\d\d(:\d\d)?</text>`).MatchString(chart(dom, c)) {
			t.Errorf("plot %q without time labels:\n%s", c, chart(dom, c))
		}
	}
	if fi, err := os.Stat(shot); err != nil || fi.Size() < 10_000 {
		t.Errorf("screenshot %s: %v", shot, err)
	}
	t.Logf("screenshot: %s", shot)

	dom = chromium(t, srv.URL+"/ui/repo/public/multi", filepath.Join(t.ArtifactDir(), "repository.png"))
	for _, want := range []string{">latest<", "linux/amd64", "linux/arm64/v8", "application/vnd.oci.image.index.v1+json"} {
		if !strings.Contains(dom, want) {
			t.Errorf("repository page lacks %q:\n%s", want, dom)
		}
	}
	dom = chromium(t, srv.URL+"/ui/repo/team/app", "")
	if !strings.Contains(dom, ">v1<") || !strings.Contains(dom, "application/vnd.example.signature") {
		t.Errorf("team/app page lacks the tag or its signature:\n%s", dom)
	}
}

// TestPageUnderAuth: with authentication on, an anonymous visitor sees no
// repository; a user sees those they may pull.
func TestPageUnderAuth(t *testing.T) {
	users := htpasswdtest.File(t, bcrypt.MinCost, "alice", "alice-pw", "bob", "bob-pw")
	srv := cairnproc.Start(t, "", "--config", cairnproc.WriteConfig(t, "ui:\n  enabled: true\nauth:\n  htpasswd:\n    realm: cairn\n    path: "+users+`
  accesscontrol:
    adminpolicy: {users: [alice], actions: ["*"]}
    repositories:
      "public/**": {defaultpolicy: [pull]}
`))
	seed(t, srv.Addr, remote.WithAuth(&authn.Basic{Username: "alice", Password: "alice-pw"}))

	dom := chromium(t, srv.URL+"/ui/", filepath.Join(t.ArtifactDir(), "anonymous.png"))
	for _, private := range []string{"team/app", "public/multi", "Repositories"} {
		if strings.Contains(dom, private) {
			t.Errorf("an anonymous visitor sees %q:\n%s", private, dom)
		}
	}
	hc := &http.Client{Timeout: time.Minute}
	defer hc.CloseIdleConnections()
	page := func(user, path string) regtest.Response {
		req, err := http.NewRequest(http.MethodGet, srv.URL+path, nil)
		if err != nil {
			t.Fatal(err)
		}
		if user != "" {
			req.SetBasicAuth(user, user+"-pw")
		}
		return regtest.Send(t, hc, req)
	}
	if r := page("", "/ui/"); r.Status != http.StatusUnauthorized || !strings.HasPrefix(r.Header.Get("WWW-Authenticate"), "Basic") {
		t.Errorf("anonymous: %v", r)
	}
	if r := page("alice", "/ui/"); r.Status != http.StatusOK || !strings.Contains(string(r.Body), "team/app") || !strings.Contains(string(r.Body), "public/multi") {
		t.Errorf("alice: %v", r)
	}
	r := page("bob", "/ui/")
	if r.Status != http.StatusOK || strings.Contains(string(r.Body), "team/app") || !strings.Contains(string(r.Body), "public/multi") {
		t.Errorf("bob sees: %v", r)
	}
	for _, path := range []string{"/ui/repo/team/app", "/ui/repo/team/missing"} {
		if r := page("bob", path); r.Status != http.StatusNotFound {
			t.Errorf("bob %s: %v, want 404 alike", path, r)
		}
	}
}
