package metrics

import (
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"

	"github.com/cairn-registry/cairn/internal/storage/driver"
	"github.com/cairn-registry/cairn/internal/storage/driver/filesystem"
	"github.com/cairn-registry/cairn/internal/storage/driver/inmemory"
)

// value returns the value of the sample of metric name (without the cairn_
// prefix) whose labels include want, or -1 when there is none. Histograms
// report their sample count.
func value(t *testing.T, m *Metrics, name string, want map[string]string) float64 {
	t.Helper()
	families, err := m.Gatherer().Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range families {
		if f.GetName() != "cairn_"+name {
			continue
		}
	samples:
		for _, s := range f.GetMetric() {
			have := map[string]string{}
			for _, l := range s.GetLabel() {
				have[l.GetName()] = l.GetValue()
			}
			for k, v := range want {
				if have[k] != v {
					continue samples
				}
			}
			switch f.GetType() {
			case dto.MetricType_COUNTER:
				return s.GetCounter().GetValue()
			case dto.MetricType_GAUGE:
				return s.GetGauge().GetValue()
			case dto.MetricType_HISTOGRAM:
				return float64(s.GetHistogram().GetSampleCount())
			}
		}
	}
	return -1
}

func op(name string) map[string]string {
	return map[string]string{"driver": "inmemory", "operation": name}
}

// fileStater is a driver with a StatFile of its own, which counts its calls.
type fileStater struct {
	driver.Driver
	statFiles int
}

func (f *fileStater) StatFile(ctx context.Context, p string) (driver.FileInfo, error) {
	f.statFiles++
	fi, err := f.Stat(ctx, p)
	if err == nil && fi.IsDir {
		return driver.FileInfo{}, driver.PathNotFoundError{Path: p, Driver: f.Name()}
	}
	return fi, err
}

func TestInstrumentDriver(t *testing.T) {
	ctx := context.Background()
	m := New()
	inner := &fileStater{Driver: inmemory.New()}
	d := InstrumentDriver(inner, m, nil)
	if d.Name() != "inmemory" {
		t.Errorf("Name() = %q", d.Name())
	}
	// Every operation is exported from the start, at zero.
	for _, o := range operations {
		if got := value(t, m, "storage_operations_total", op(o)); got != 0 {
			t.Errorf("%s before any call = %v, want 0", o, got)
		}
	}

	if err := d.PutContent(ctx, "/a/b", []byte("hello")); err != nil {
		t.Fatal(err)
	}
	if b, err := d.GetContent(ctx, "/a/b"); err != nil || string(b) != "hello" {
		t.Fatalf("GetContent = %q, %v", b, err)
	}
	// A missing path is an answer, not a storage failure.
	if _, err := d.Stat(ctx, "/missing"); !errors.Is(err, driver.ErrNotFound) {
		t.Fatalf("Stat(/missing) = %v", err)
	}
	// StatFile is observed as a stat, not bypassed: driver.As would find
	// the wrapped driver's own StatFile.
	if _, err := driver.StatFile(ctx, d, "/a"); !errors.Is(err, driver.ErrNotFound) {
		t.Fatalf("StatFile(/a) = %v", err)
	}
	if inner.statFiles != 1 {
		t.Errorf("the wrapped driver's StatFile ran %d times, want 1", inner.statFiles)
	}
	// An invalid path is a failure.
	if _, err := d.GetContent(ctx, "relative"); err == nil {
		t.Fatal("GetContent(relative) succeeded")
	}
	w, err := d.Writer(ctx, "/a/upload", false)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := w.Write([]byte("data")); err != nil {
		t.Fatal(err)
	}
	if err := w.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	w.Close()
	rc, err := d.Reader(ctx, "/a/upload", 0)
	if err != nil {
		t.Fatal(err)
	}
	if b, _ := io.ReadAll(rc); string(b) != "data" {
		t.Errorf("read back %q", b)
	}
	rc.Close()
	rc, err = d.ReadRange(ctx, "/a/upload", 1, 2)
	if err != nil {
		t.Fatal(err)
	}
	if b, _ := io.ReadAll(rc); string(b) != "at" {
		t.Errorf("read range %q, want %q", b, "at")
	}
	rc.Close()
	if _, err := d.ReadRange(ctx, "/a/missing", 0, 1); !errors.Is(err, driver.ErrNotFound) {
		t.Fatalf("ReadRange(/a/missing) = %v", err)
	}
	if n, err := d.DeleteFiles(ctx, []string{"/a/b", "/a/upload", "/a/never"}); err != nil || n != 3 {
		t.Fatalf("DeleteFiles = %d, %v", n, err)
	}

	want := []struct {
		op            string
		calls, errors float64
	}{
		{opPutContent, 1, 0},
		{opGetContent, 2, 1},
		{opStat, 2, 0},
		{opWriter, 1, 0},
		{opCommit, 1, 0},
		{opReader, 1, 0},
		{opReadRange, 2, 0},
		{opDeleteFiles, 1, 0},
		{opList, 0, 0},
	}
	for _, w := range want {
		if got := value(t, m, "storage_operations_total", op(w.op)); got != w.calls {
			t.Errorf("%s calls = %v, want %v", w.op, got, w.calls)
		}
		if got := value(t, m, "storage_errors_total", op(w.op)); got != w.errors {
			t.Errorf("%s errors = %v, want %v", w.op, got, w.errors)
		}
		if got := value(t, m, "storage_operation_duration_seconds", op(w.op)); got != w.calls {
			t.Errorf("%s latency samples = %v, want %v", w.op, got, w.calls)
		}
	}
	if got := value(t, m, "storage_deleted_files_total", map[string]string{"driver": "inmemory"}); got != 3 {
		t.Errorf("deleted files = %v, want 3", got)
	}
}

func TestObserveRequestAndOthers(t *testing.T) {
	m := New()
	other := New() // a second registry shares nothing with the first
	m.ObserveRequest("blob", http.MethodGet, 200, 0, 1000, 20*time.Millisecond)
	m.ObserveRequest("blob", http.MethodGet, 200, 0, 500, 10*time.Millisecond)
	m.ObserveRequest("upload", http.MethodPatch, 202, 4096, 0, time.Second)
	m.ObserveRequest("base", "BREW", 405, 0, 0, time.Millisecond)
	m.UploadsInProgress(1)
	m.UploadsInProgress(1)
	m.UploadsInProgress(-1)
	m.GCRun(nil, time.Minute)
	m.GCRun(errors.New("boom"), time.Second)
	m.GCDeleted("blobs", 7)
	m.GCDeleted("blobs", 0)
	m.SetDedupSavedBytes(1 << 20)
	m.DedupRebuildFailed("missing_file")
	m.DedupCacheWriteFailed("preconstruct", "no_space")
	m.CacheLookup("preconstruct", true)
	m.CacheLookup("preconstruct", true)
	m.CacheLookup("preconstruct", false)

	checks := []struct {
		name   string
		labels map[string]string
		want   float64
	}{
		{"http_requests_total", map[string]string{"route": "blob", "method": "GET", "status": "200"}, 2},
		{"http_requests_total", map[string]string{"route": "upload", "method": "PATCH", "status": "202"}, 1},
		{"http_requests_total", map[string]string{"route": "base", "method": "OTHER", "status": "405"}, 1},
		{"http_request_duration_seconds", map[string]string{"route": "blob", "method": "GET"}, 2},
		{"http_response_body_bytes_total", map[string]string{"route": "blob", "method": "GET"}, 1500},
		{"http_request_body_bytes_total", map[string]string{"route": "upload", "method": "PATCH"}, 4096},
		{"uploads_in_progress", nil, 1},
		{"gc_runs_total", map[string]string{"result": "ok"}, 1},
		{"gc_runs_total", map[string]string{"result": "error"}, 1},
		{"gc_duration_seconds", nil, 2},
		{"gc_deleted_total", map[string]string{"kind": "blobs"}, 7},
		{"dedup_saved_bytes", nil, 1 << 20},
		{"dedup_rebuild_failures_total", map[string]string{"reason": "missing_file"}, 1},
		{"dedup_cache_write_failures_total", map[string]string{"cache": "preconstruct", "reason": "no_space"}, 1},
		{"cache_requests_total", map[string]string{"cache": "preconstruct", "result": "hit"}, 2},
		{"cache_requests_total", map[string]string{"cache": "preconstruct", "result": "miss"}, 1},
	}
	for _, c := range checks {
		if got := value(t, m, c.name, c.labels); got != c.want {
			t.Errorf("%s%v = %v, want %v", c.name, c.labels, got, c.want)
		}
	}
	if got := value(t, other, "http_requests_total", map[string]string{"route": "blob"}); got != -1 {
		t.Errorf("a second Metrics sees the first's requests: %v", got)
	}
}

func get(t *testing.T, h http.Handler, path string) (int, string) {
	t.Helper()
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, path, nil))
	return rec.Code, rec.Body.String()
}

func TestDebugHandler(t *testing.T) {
	m := New()
	m.ObserveRequest("manifest", http.MethodGet, 200, 0, 10, time.Millisecond)
	var readyErr error
	h := DebugHandler(DebugOptions{Metrics: m, Ready: func(context.Context) error { return readyErr }})

	if code, body := get(t, h, "/metrics"); code != 200 ||
		!strings.Contains(body, `cairn_http_requests_total{method="GET",route="manifest",status="200"} 1`) ||
		!strings.Contains(body, "go_goroutines") || !strings.Contains(body, "process_") {
		t.Errorf("/metrics: %d\n%.2000s", code, body)
	}
	if code, body := get(t, h, "/healthz"); code != 200 || body != "ok\n" {
		t.Errorf("/healthz: %d %q", code, body)
	}
	if code, _ := get(t, h, "/readyz"); code != 200 {
		t.Errorf("/readyz while ready: %d", code)
	}
	readyErr = errors.New("storage on fire")
	if code, body := get(t, h, "/readyz"); code != http.StatusServiceUnavailable || !strings.Contains(body, "storage on fire") {
		t.Errorf("/readyz while unready: %d %q", code, body)
	}
	if code, body := get(t, h, "/debug/pprof/"); code != 200 || !strings.Contains(body, "goroutine") {
		t.Errorf("/debug/pprof/: %d", code)
	}
	if code, _ := get(t, h, "/v2/"); code != 404 {
		t.Errorf("/v2/ on the debug handler: %d, want 404", code)
	}

	custom := DebugHandler(DebugOptions{MetricsPath: "/prom", Metrics: m})
	if code, _ := get(t, custom, "/prom"); code != 200 {
		t.Errorf("custom metrics path: %d", code)
	}
	if code, _ := get(t, custom, "/metrics"); code != 404 {
		t.Errorf("/metrics with a custom path: %d, want 404", code)
	}
	none := DebugHandler(DebugOptions{})
	if code, _ := get(t, none, "/metrics"); code != 404 {
		t.Errorf("/metrics with metrics disabled: %d, want 404", code)
	}
	if code, _ := get(t, none, "/readyz"); code != 200 {
		t.Errorf("/readyz without a check: %d", code)
	}
}

func TestStorageReady(t *testing.T) {
	root := filepath.Join(t.TempDir(), "root")
	d, err := filesystem.New(root)
	if err != nil {
		t.Fatal(err)
	}
	ready := StorageReady(d)
	ctx := context.Background()
	if err := ready(ctx); err != nil {
		t.Fatalf("empty root: %v", err)
	}
	// The root replaced by a file: storage that cannot be listed.
	if err := os.Rename(root, root+".away"); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(root, []byte("not a directory"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := ready(ctx); err == nil || !strings.Contains(err.Error(), "filesystem") {
		t.Errorf("root is a file: err = %v", err)
	}
	if err := os.Remove(root); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(root+".away", root); err != nil {
		t.Fatal(err)
	}
	if err := ready(ctx); err != nil {
		t.Errorf("root restored: %v", err)
	}
}
