package webui

import (
	"context"
	"fmt"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/cairn-registry/cairn/internal/layout"
	"github.com/cairn-registry/cairn/internal/manifest"
	"github.com/cairn-registry/cairn/internal/registry"
	"github.com/cairn-registry/cairn/internal/storage/driver"
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
func (f fakeRegistry) GetManifest(context.Context, string, string) (*manifest.Manifest, error) {
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

func TestTimeAxis(t *testing.T) {
	start := time.Date(2025, 3, 1, 10, 0, 0, 0, time.UTC)
	var pts []point
	for i := range 5 {
		at := start.Add(time.Duration(i) * 30 * time.Minute)
		pts = append(pts, point{X: float64(at.Unix()), Y: float64(i), Label: at.Format(time.DateTime)})
	}
	line := string(lineChart("t", "bytes", pts))
	for _, want := range []string{`<text class="tick x" x="56.0" y="167">10:00</text>`, ">12:00</text>", "<title>2025-03-01 10:30:00 UTC: 1 B</title>"} {
		if !strings.Contains(line, want) {
			t.Errorf("line chart lacks %q:\n%s", want, line)
		}
	}
	for _, tc := range []struct {
		span float64
		want []string
	}{
		{10, []string{"10:00:00"}},
		{3 * 86400, []string{"Mar 2", "Mar 3", "Mar 4"}},
		{400 * 86400, []string{"2025-", "2026-"}},
	} {
		ticks := timeTicks(float64(start.Unix()), float64(start.Unix())+tc.span)
		if len(ticks) == 0 || len(ticks) > 6 {
			t.Errorf("span %v: %d ticks", tc.span, len(ticks))
		}
		var labels []string
		for _, tk := range ticks {
			labels = append(labels, tk.label)
		}
		for _, w := range tc.want {
			if !strings.Contains(strings.Join(labels, " "), w) {
				t.Errorf("span %v: ticks %q lack %q", tc.span, labels, w)
			}
		}
	}
	runs := string(runChart("r", "bytes", []point{{X: float64(start.Unix()), Y: 2048, Label: "2025-03-01 10:00:00"}, {X: float64(start.Unix() + 5), Y: 0, Label: "2025-03-01 10:00:05"}}))
	if !strings.Contains(runs, ">10:00:00<") || !strings.Contains(runs, "<title>2025-03-01 10:00:05: 0 B</title>") || !strings.Contains(runs, ">2.0 KiB<") {
		t.Errorf("run chart:\n%s", runs)
	}
}

// TestCacheCounts: the cache bars say their hits and misses.
func TestCacheCounts(t *testing.T) {
	h := Handler(Options{Registry: fakeRegistry{}, Prefix: "/ui", Caches: func() []CacheRatio {
		return []CacheRatio{{Cache: "preconstruct", Hits: 12, Lookups: 15}}
	}})
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest("GET", "/ui/", nil))
	if body := rec.Body.String(); !strings.Contains(body, ">12 hits · 3 misses<") || !strings.Contains(body, ">80%<") {
		t.Errorf("cache bars without their counts:\n%s", body)
	}
}

// memStore is a HistoryStore in memory.
type memStore struct {
	mu      sync.Mutex
	content map[string][]byte
	puts    int
}

func (m *memStore) GetContent(_ context.Context, p string) ([]byte, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	b, ok := m.content[p]
	if !ok {
		return nil, driver.PathNotFoundError{Path: p}
	}
	return b, nil
}

func (m *memStore) PutContent(_ context.Context, p string, b []byte) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.content == nil {
		m.content = map[string][]byte{}
	}
	m.content[p] = b
	m.puts++
	return nil
}

// page renders the overview with figures.
func page(t *testing.T, f *Figures) string {
	t.Helper()
	h := Handler(Options{Registry: fakeRegistry{}, Prefix: "/ui", Storage: f.Current, History: f.History()})
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest("GET", "/ui/", nil))
	return rec.Body.String()
}

// TestFiguresMeasuring: before the first measurement the page says so, and
// shows no figure.
func TestFiguresMeasuring(t *testing.T) {
	f := NewFigures(FiguresOptions{Wait: time.Millisecond})
	release := make(chan struct{})
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan struct{})
	go func() {
		f.Run(ctx, func(ctx context.Context) (Storage, error) {
			<-release
			return Storage{Dedup: true, Logical: 3 << 20, Stored: 1 << 20}, nil
		})
		close(done)
	}()
	defer func() { cancel(); <-done }()
	body := page(t, f)
	if !strings.Contains(body, "measuring…") || strings.Contains(body, `id="stored"`) || strings.Contains(body, "0 B") {
		t.Errorf("before a measurement:\n%s", body)
	}
	close(release)
	f.wait = time.Hour // a hang guard: Current waits for the measurement
	body = page(t, f)
	if !strings.Contains(body, `<span id="stored">1.0 MiB</span>`) || !strings.Contains(body, "3.00×") || strings.Contains(body, "measuring…") {
		t.Errorf("after a measurement:\n%s", body)
	}
}

// TestFiguresFollowChanges: a change is measured before the next page view
// shows figures, and a burst of changes takes few measurements.
func TestFiguresFollowChanges(t *testing.T) {
	f := NewFigures(FiguresOptions{MinInterval: 20 * time.Millisecond, Wait: time.Hour})
	var mu sync.Mutex
	var stored int64 = 100
	measures := 0
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan struct{})
	go func() {
		f.Run(ctx, func(ctx context.Context) (Storage, error) {
			mu.Lock()
			defer mu.Unlock()
			measures++
			return Storage{Dedup: true, Logical: 1000, Stored: stored}, nil
		})
		close(done)
	}()
	defer func() { cancel(); <-done }()
	if st, _ := f.Current(t.Context()); st.Stored != 100 {
		t.Fatalf("first figures %+v", st)
	}
	mu.Lock()
	stored = 50
	mu.Unlock()
	for range 100 {
		f.LayerDeduplicated("")
	}
	st, _ := f.Current(t.Context())
	if st.Stored != 50 || st.Refreshing || st.Measuring {
		t.Errorf("figures after the change: %+v", st)
	}
	mu.Lock()
	n := measures
	mu.Unlock()
	if n > 5 {
		t.Errorf("%d measurements for a burst of 100 changes", n)
	}
	samples, _ := f.History().snapshot()
	if len(samples) != 2 || samples[0].Stored != 100 || samples[1].Stored != 50 {
		t.Errorf("samples %+v", samples)
	}
}

// TestHistoryKeptInStore: a restart continues the history from storage;
// a GC run is written at once.
func TestHistoryKeptInStore(t *testing.T) {
	store := &memStore{}
	run := func(h *History, measure func(context.Context) (Storage, error), during func(f *Figures)) {
		f := NewFigures(FiguresOptions{History: h, Store: store, Wait: time.Hour})
		ctx, cancel := context.WithCancel(t.Context())
		done := make(chan struct{})
		go func() { f.Run(ctx, measure); close(done) }()
		f.Current(t.Context())
		during(f)
		cancel()
		<-done
	}
	at := time.Date(2025, 3, 1, 10, 0, 0, 0, time.UTC)
	first := &History{}
	run(first, func(context.Context) (Storage, error) { return Storage{Dedup: true, Logical: 10, Stored: 5}, nil }, func(f *Figures) {
		f.History().AddGCRun(GCRun{At: at, Freed: 4096, Blobs: 2})
	})
	if store.puts == 0 {
		t.Fatal("nothing written")
	}
	second := &History{}
	run(second, func(context.Context) (Storage, error) { return Storage{Dedup: true, Logical: 20, Stored: 5}, nil }, func(*Figures) {})
	samples, runs := second.snapshot()
	if len(samples) != 2 || samples[0].Logical != 10 || samples[1].Logical != 20 || len(runs) != 1 || runs[0].Freed != 4096 || !runs[0].At.Equal(at) {
		t.Errorf("after a restart: samples %+v, runs %+v", samples, runs)
	}
	// Unreadable: started afresh, not fatal.
	store.content[layout.UIHistory] = []byte("{")
	third := &History{}
	run(third, func(context.Context) (Storage, error) { return Storage{}, nil }, func(*Figures) {})
	if s, r := third.snapshot(); len(s)+len(r) != 0 {
		t.Errorf("from a corrupt history: %+v %+v", s, r)
	}
}

// TestHistoryBounded: samples thin out but keep their span.
func TestHistoryBounded(t *testing.T) {
	h := &History{}
	start := time.Unix(0, 0)
	for i := range 5000 {
		h.AddSample(Sample{At: start.Add(time.Duration(i) * time.Minute), Logical: int64(i)})
		h.AddGCRun(GCRun{At: start.Add(time.Duration(i) * time.Minute)})
	}
	s, r := h.snapshot()
	if len(s) > maxSamples || s[0].Logical != 0 || s[len(s)-1].Logical != 4999 || len(r) != maxRuns {
		t.Errorf("%d samples from %d to %d, %d runs", len(s), s[0].Logical, s[len(s)-1].Logical, len(r))
	}
}
