package webui

import (
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/opencontainers/go-digest"

	"github.com/cairn-registry/cairn/internal/layout"
	"github.com/cairn-registry/cairn/internal/testutil/cairnproc"
	"github.com/cairn-registry/cairn/internal/testutil/poll"
	"github.com/cairn-registry/cairn/internal/testutil/regtest"
)

// dedupConfig serves the page with dedup on, logging each layer dedup
// processed (at debug level), and GC every second when gc.
func dedupConfig(t *testing.T, gc bool) string {
	yml := `log:
  level: debug
ui:
  enabled: true
storage:
  dedup:
    mode: full
`
	if gc {
		yml += `  delete:
    enabled: true
  gc:
    enabled: true
    interval: 1s
    delay: 0s
`
	}
	return cairnproc.WriteConfig(t, yml)
}

// pushDeduplicated pushes an image of random layers as repo:v1 and waits
// until dedup replaced every layer by its recipe and told serve so: the
// log line that follows the event. There is no time limit but the test's.
func pushDeduplicated(t *testing.T, srv *cairnproc.Server, repo string) []v1.Hash {
	t.Helper()
	img := regtest.RandomImage(t, 3, 64<<10)
	if err := remote.Write(regtest.Ref(t, srv.Addr, repo+":v1"), img, remote.WithContext(t.Context())); err != nil {
		t.Fatal(err)
	}
	ls, err := img.Layers()
	if err != nil {
		t.Fatal(err)
	}
	var digests []v1.Hash
	for _, l := range ls {
		d, err := l.Digest()
		if err != nil {
			t.Fatal(err)
		}
		digests = append(digests, d)
	}
	poll.Until(t, 200*time.Millisecond, func() string {
		for _, d := range digests {
			dir := filepath.Join(srv.Root, layout.BlobDir(digest.Digest(d.String())))
			if _, err := os.Stat(filepath.Join(dir, layout.BlobRecipeLeaf)); err != nil {
				return "the recipe of " + d.String()
			}
			if _, err := os.Stat(filepath.Join(dir, layout.BlobDataLeaf)); err == nil {
				return "the removal of the intact copy of " + d.String()
			}
			if !regexp.MustCompile(`msg="dedup: layer processed" layer=` + regexp.QuoteMeta(d.String()) + ` outcome=deduplicated`).MatchString(srv.Logs()) {
				return "the log of " + d.String() + " deduplicated"
			}
		}
		return ""
	})
	return digests
}

// overview fetches the page until its figures are measured and show every
// change serve was told of before the request (a page that says
// "measuring…" or "refreshing…" is fetched again).
func overview(t *testing.T, srv *cairnproc.Server) string {
	t.Helper()
	hc := &http.Client{Timeout: time.Minute} // a hang guard
	defer hc.CloseIdleConnections()
	var page string
	poll.Until(t, 200*time.Millisecond, func() string {
		r := regtest.Do(t, hc, http.MethodGet, srv.URL+"/ui/", nil)
		if r.Status != http.StatusOK {
			t.Fatalf("GET /ui/: %v", r)
		}
		page = string(r.Body)
		if strings.Contains(page, "measuring…") || strings.Contains(page, "refreshing…") {
			return "the figures to be measured"
		}
		return ""
	})
	return page
}

// figure returns the text of the element of id in page.
func figure(page, id string) string {
	m := regexp.MustCompile(`id="` + id + `">([^<]*)<`).FindStringSubmatch(page)
	if m == nil {
		return ""
	}
	return m[1]
}

// points returns the tooltips of the history's points in a plot (the
// latest measurement, not yet a sample, left out).
func points(svg string) []string {
	var out []string
	for _, m := range regexp.MustCompile(`<circle class="dot c0" [^>]*><title>([^<]*)</title>`).FindAllStringSubmatch(svg, -1) {
		out = append(out, m[1])
	}
	return out
}

// timeLabels are the time axis' labels of a plot.
var timeLabels = regexp.MustCompile(`<text class="tick x"[^>]*>\d\d:\d\d(:\d\d)?</text>`)

// TestFiguresFollowDedup: once layers are deduplicated, the next page
// view shows what is stored and the ratio, not the figures of an earlier
// view (0 B for a minute before), on plots with a time axis.
func TestFiguresFollowDedup(t *testing.T) {
	srv := cairnproc.Start(t, "", "--config", dedupConfig(t, false))
	// The page seen first on an empty store, as an operator would.
	if page := overview(t, srv); strings.Contains(page, "0.00×") {
		t.Errorf("a ratio of nothing:\n%s", page)
	}
	pushDeduplicated(t, srv, "team/app")
	page := overview(t, srv)
	logical, stored, ratio := figure(page, "logical"), figure(page, "stored"), figure(page, "ratio")
	if logical == "" || stored == "" || strings.HasPrefix(logical, "0 ") || strings.HasPrefix(stored, "0 ") || ratio == "" || ratio == "0.00×" {
		t.Errorf("after dedup: logical %q, stored %q, ratio %q:\n%s", logical, stored, ratio, page)
	}
	t.Logf("after dedup: %s of images stored in %s: %s", logical, stored, ratio)
	for _, c := range []string{"Logical (blue) and stored (green) bytes", "Dedup ratio"} {
		if svg := chart(page, c); !timeLabels.MatchString(svg) {
			t.Errorf("plot %q has no time labels:\n%s", c, svg)
		}
	}
}

// TestHistorySurvivesRestart: the plots of a restarted serve still have
// the points and GC runs of before.
func TestHistorySurvivesRestart(t *testing.T) {
	root := t.TempDir()
	cfg := dedupConfig(t, true)
	srv := cairnproc.Start(t, root, "--config", cfg)
	pushDeduplicated(t, srv, "team/app")
	var page string
	poll.Until(t, 200*time.Millisecond, func() string {
		page = overview(t, srv)
		if s := figure(page, "stored"); s == "" || strings.HasPrefix(s, "0 ") || !strings.Contains(chart(page, "Bytes freed per GC run"), `class="bar"`) {
			return "the deduplicated figures and a GC run on the page"
		}
		return ""
	})
	before := points(chart(page, "Logical (blue) and stored (green) bytes"))
	runs := regexp.MustCompile(`<rect class="bar"[^>]*><title>[^<]*</title>`).FindAllString(chart(page, "Bytes freed per GC run"), -1)
	if len(before) == 0 || len(runs) == 0 {
		t.Fatalf("no dated points or GC runs on the page before the restart:\n%s", page)
	}
	t.Logf("before the restart: points %q, %d GC runs", before, len(runs))
	srv.Stop()

	srv = cairnproc.Start(t, root, "--config", cfg)
	page = overview(t, srv)
	after := points(chart(page, "Logical (blue) and stored (green) bytes"))
	t.Logf("after the restart: points %q", after)
	for _, p := range before {
		if !slices.Contains(after, p) {
			t.Errorf("point %q of before the restart is gone: %q", p, after)
		}
	}
	// The GC runs of before are dated before the restart: each must still
	// be on the plot (it holds 200).
	freed := chart(page, "Bytes freed per GC run")
	for _, r := range runs {
		_, title, _ := strings.Cut(r, "<title>")
		if !strings.Contains(freed, "<title>"+title) {
			t.Errorf("GC run %q of before the restart is gone", title)
		}
	}
	if !timeLabels.MatchString(chart(page, "Logical (blue) and stored (green) bytes")) {
		t.Errorf("no time labels after the restart")
	}
}
