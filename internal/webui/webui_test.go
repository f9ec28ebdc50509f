package webui

import (
	"context"
	"fmt"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/cairn-registry/cairn/internal/registry"
	"github.com/opencontainers/go-digest"
	ocispec "github.com/opencontainers/image-spec/specs-go/v1"
)

func TestCharts(t *testing.T) {
	line := string(lineChart("t", "bytes", []point{{X: 1, Y: 100}, {X: 2, Y: 300}}, []point{{X: 1, Y: 50}}))
	if strings.Count(line, "<polyline") != 2 || !strings.Contains(line, "500 B") {
		t.Errorf("line chart %s", line)
	}
	bar := string(barChart("b", "%", []point{{Y: 50, Label: "preconstruct"}, {Y: 100, Label: "prefetch"}}))
	if strings.Count(bar, `class="bar"`) != 2 || !strings.Contains(bar, ">preconstruct<") || !strings.Contains(bar, "100%") {
		t.Errorf("bar chart %s", bar)
	}
	if e := string(barChart("e", "bytes", nil)); !strings.Contains(e, "no data yet") {
		t.Errorf("empty chart %s", e)
	}
	for v, want := range map[float64]float64{0: 1, 3: 5, 7: 10, 120: 200, 1e6 + 1: 2e6} {
		if got := niceMax(v); got != want {
			t.Errorf("niceMax(%v) = %v, want %v", v, got, want)
		}
	}
	if strings.Contains(string(barChart("<x>", "", []point{{Y: 1, Label: "<script>"}})), "<script>") {
		t.Error("labels are not escaped")
	}
}

// fakeRegistry holds n repositories with one tag each.
type fakeRegistry struct{ names []string }

func (f fakeRegistry) Repositories(context.Context, int, string) ([]string, bool, error) {
	return f.names, false, nil
}
func (f fakeRegistry) Tags(context.Context, string) ([]string, error) { return []string{"v1"}, nil }
func (f fakeRegistry) GetManifest(context.Context, string, string) (*registry.Manifest, error) {
	return nil, registry.ErrManifestUnknown
}
func (f fakeRegistry) Referrers(context.Context, string, digest.Digest, string) ([]ocispec.Descriptor, error) {
	return nil, nil
}

// TestOverviewPages: the overview lists repositories a page at a time.
func TestOverviewPages(t *testing.T) {
	var names []string
	for i := range 150 {
		names = append(names, fmt.Sprintf("r/%03d", i))
	}
	h := Handler(Options{Registry: fakeRegistry{names}, Prefix: "/ui"})
	get := func(url string) string {
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, httptest.NewRequest("GET", url, nil))
		if rec.Code != 200 {
			t.Fatalf("GET %s: %d", url, rec.Code)
		}
		return rec.Body.String()
	}
	first := get("/ui/")
	if n := strings.Count(first, `href="/ui/repo/`); n != 100 || !strings.Contains(first, `href="/ui/?last=r%2f099"`) || !strings.Contains(first, ">150<") {
		t.Fatalf("first page: %d repositories:\n%s", n, first)
	}
	second := get("/ui/?last=r%2f099")
	if n := strings.Count(second, `href="/ui/repo/`); n != 50 || strings.Contains(second, `id="next"`) || !strings.Contains(second, "r/149") {
		t.Fatalf("second page: %d repositories", n)
	}
}
