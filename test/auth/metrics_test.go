package auth

import (
	"bufio"
	"io"
	"net/http"
	"os"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/v1/remote"

	"github.com/cairn-registry/cairn/internal/testutil/cairnproc"
)

// sample is one line of the Prometheus text format.
type sample struct {
	name   string
	labels map[string]string
	value  float64
}

var labelRE = regexp.MustCompile(`(\w+)="((?:[^"\\]|\\.)*)"`)

// scrape reads the metrics at url.
// scrapeUntil scrapes url until done holds for its samples; a metric that
// never arrives ends the test at its -timeout.
func scrapeUntil(t *testing.T, hc *http.Client, url string, done func([]sample) bool) []sample {
	t.Helper()
	for {
		s := scrape(t, hc, url)
		if done(s) {
			return s
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func scrape(t *testing.T, hc *http.Client, url string) []sample {
	t.Helper()
	resp, err := hc.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Fatalf("GET %s: %d", url, resp.StatusCode)
	}
	var out []sample
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		i := strings.LastIndexByte(line, ' ')
		v, err := strconv.ParseFloat(line[i+1:], 64)
		if err != nil {
			t.Fatalf("metrics line %q: %v", line, err)
		}
		s := sample{name: line[:i], labels: map[string]string{}, value: v}
		if j := strings.IndexByte(line[:i], '{'); j >= 0 {
			s.name = line[:j]
			for _, m := range labelRE.FindAllStringSubmatch(line[j:i], -1) {
				s.labels[m[1]] = m[2]
			}
		}
		out = append(out, s)
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}

// sum adds the samples of name whose labels include the given pairs;
// -1 when no sample matches (the metric is not exported).
func sum(samples []sample, name string, labels ...string) float64 {
	total, found := 0.0, false
outer:
	for _, s := range samples {
		if s.name != name {
			continue
		}
		for i := 0; i+1 < len(labels); i += 2 {
			if s.labels[labels[i]] != labels[i+1] {
				continue outer
			}
		}
		total, found = total+s.value, true
	}
	if !found {
		return -1
	}
	return total
}

// TestMetricsAndHealth pushes and pulls an image and reads the debug
// listener: request, byte and storage driver counters move with the
// traffic; /readyz follows whether the storage root can be read.
func TestMetricsAndHealth(t *testing.T) {
	t.Parallel()
	debugAddr := cairnproc.FreeAddr(t)
	srv := startConfig(t, "http:\n  debug:\n    addr: "+debugAddr+"\n")
	debug := "http://" + debugAddr
	hc := &http.Client{Timeout: 30 * time.Second}
	defer hc.CloseIdleConnections()

	img := newImage(t, 3)
	m, err := img.img.Manifest()
	if err != nil {
		t.Fatal(err)
	}
	var layerBytes int64
	for _, l := range m.Layers {
		layerBytes += l.Size
	}

	before := scrape(t, hc, debug+"/metrics")
	for _, name := range []string{
		"cairn_uploads_in_progress", "cairn_dedup_saved_bytes", "cairn_gc_duration_seconds_count",
		"go_goroutines", "process_open_fds",
	} {
		if sum(before, name) < 0 {
			t.Errorf("%s is not exported", name)
		}
	}
	if got := sum(before, "cairn_storage_operations_total", "driver", "filesystem", "operation", "move"); got != 0 {
		t.Errorf("move operations before any push = %v, want 0 (exported at zero)", got)
	}

	ref, err := name.ParseReference(srv.Addr+"/metrics/app:v1", name.Insecure)
	if err != nil {
		t.Fatal(err)
	}
	if err := remote.Write(ref, img.img, remote.WithContext(t.Context())); err != nil {
		t.Fatalf("push: %v", err)
	}
	// A request is counted when its handler returns, which can be just
	// after the client has its response: scrape until the last one is in.
	pushed := scrapeUntil(t, hc, debug+"/metrics", func(s []sample) bool {
		return max(sum(s, "cairn_http_requests_total", "route", "manifest", "method", "PUT", "status", "201"), 0)-max(sum(before, "cairn_http_requests_total", "route", "manifest", "method", "PUT", "status", "201"), 0) >= 1
	})

	pulled, err := remote.Image(ref, remote.WithContext(t.Context()))
	if err != nil {
		t.Fatal(err)
	}
	layers, err := pulled.Layers()
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range layers {
		rc, err := l.Compressed()
		if err != nil {
			t.Fatal(err)
		}
		if _, err := io.Copy(io.Discard, rc); err != nil {
			t.Fatal(err)
		}
		rc.Close()
	}
	after := scrapeUntil(t, hc, debug+"/metrics", func(s []sample) bool {
		return max(sum(s, "cairn_http_requests_total", "route", "blob", "method", "GET", "status", "200"), 0)-max(sum(pushed, "cairn_http_requests_total", "route", "blob", "method", "GET", "status", "200"), 0) >= float64(len(m.Layers))
	})

	delta := func(a, b []sample, name string, labels ...string) float64 {
		return max(sum(b, name, labels...), 0) - max(sum(a, name, labels...), 0)
	}
	checks := []struct {
		what    string
		got     float64
		atLeast float64
	}{
		// The push.
		{"manifest PUT 201", delta(before, pushed, "cairn_http_requests_total", "route", "manifest", "method", "PUT", "status", "201"), 1},
		{"upload requests", delta(before, pushed, "cairn_http_requests_total", "route", "upload"), float64(len(m.Layers) + 1)},
		{"upload body bytes", delta(before, pushed, "cairn_http_request_body_bytes_total", "route", "upload"), float64(img.size)},
		{"upload latency samples", delta(before, pushed, "cairn_http_request_duration_seconds_count", "route", "upload"), float64(len(m.Layers) + 1)},
		// A blob commit names the blob without replacing one (move_new) and
		// writes its link unsynced (put_cached): see registry's seal.go.
		{"storage moves (blob commits)", delta(before, pushed, "cairn_storage_operations_total", "driver", "filesystem", "operation", "move") +
			delta(before, pushed, "cairn_storage_operations_total", "driver", "filesystem", "operation", "move_new"), float64(len(m.Layers) + 1)},
		{"storage link writes", delta(before, pushed, "cairn_storage_operations_total", "driver", "filesystem", "operation", "put_content") +
			delta(before, pushed, "cairn_storage_operations_total", "driver", "filesystem", "operation", "put_cached"), float64(len(m.Layers) + 2)},
		{"storage syncs (blobs sealed by the manifest)", delta(before, pushed, "cairn_storage_operations_total", "driver", "filesystem", "operation", "sync"), float64(len(m.Layers) + 1)},
		// The pull.
		{"manifest GET 200", delta(pushed, after, "cairn_http_requests_total", "route", "manifest", "method", "GET", "status", "200"), 1},
		{"blob GET 200", delta(pushed, after, "cairn_http_requests_total", "route", "blob", "method", "GET", "status", "200"), float64(len(m.Layers))},
		{"blob bytes out", delta(pushed, after, "cairn_http_response_body_bytes_total", "route", "blob", "method", "GET"), float64(layerBytes)},
		{"storage readers (blob GETs)", delta(pushed, after, "cairn_storage_operations_total", "driver", "filesystem", "operation", "reader"), float64(len(m.Layers))},
		{"storage link reads", delta(pushed, after, "cairn_storage_operations_total", "driver", "filesystem", "operation", "get_content"), 1},
		{"storage call latency samples", delta(pushed, after, "cairn_storage_operation_duration_seconds_count", "driver", "filesystem", "operation", "reader"), float64(len(m.Layers))},
	}
	for _, c := range checks {
		t.Logf("%s: +%v", c.what, c.got)
		if c.got < c.atLeast {
			t.Errorf("%s moved by %v, want at least %v", c.what, c.got, c.atLeast)
		}
	}
	if got := sum(after, "cairn_uploads_in_progress"); got != 0 {
		t.Errorf("uploads in progress after the push = %v, want 0", got)
	}
	if got := sum(after, "cairn_storage_errors_total"); got != 0 {
		t.Errorf("storage errors after a clean push and pull = %v, want 0", got)
	}

	get := func(url string) (int, string) {
		t.Helper()
		resp, err := hc.Get(url)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	if code, _ := get(debug + "/healthz"); code != 200 {
		t.Errorf("/healthz: %d", code)
	}
	if code, body := get(debug + "/readyz"); code != 200 {
		t.Errorf("/readyz: %d %s", code, body)
	}
	if code, body := get(debug + "/debug/pprof/"); code != 200 || !strings.Contains(body, "goroutine") {
		t.Errorf("/debug/pprof/ on the debug listener: %d", code)
	}
	// The registry's own port serves none of it.
	for _, p := range []string{"/metrics", "/debug/pprof/", "/healthz", "/readyz"} {
		if code, _ := get(srv.URL + p); code != 404 {
			t.Errorf("%s on the registry port: %d, want 404", p, code)
		}
	}

	// Storage that cannot be read makes the process unready, not dead.
	restore := makeUnreadable(t, srv.Root)
	if code, body := get(debug + "/readyz"); code != http.StatusServiceUnavailable || !strings.Contains(body, "storage") {
		t.Errorf("/readyz with an unreadable root: %d %q, want 503 naming storage", code, body)
	}
	if code, _ := get(debug + "/healthz"); code != 200 {
		t.Errorf("/healthz with an unreadable root: %d, want 200", code)
	}
	restore()
	if code, body := get(debug + "/readyz"); code != 200 {
		t.Errorf("/readyz after the root is readable again: %d %s", code, body)
	}
	if _, err := remote.Image(ref, remote.WithContext(t.Context())); err != nil {
		t.Errorf("pull after recovery: %v", err)
	}
}

// makeUnreadable takes away read permission from dir and returns the
// function that gives it back. A privileged test process (root reads
// anything) instead moves the directory away and leaves a file in its
// place, which no one can list either.
func makeUnreadable(t *testing.T, dir string) (restore func()) {
	t.Helper()
	if err := os.Chmod(dir, 0); err != nil {
		t.Fatal(err)
	}
	if _, err := os.ReadDir(dir); err != nil {
		return func() {
			if err := os.Chmod(dir, 0o755); err != nil {
				t.Fatal(err)
			}
		}
	}
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	moved := dir + ".moved"
	if err := os.Rename(dir, moved); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(dir, []byte("not a directory"), 0); err != nil {
		t.Fatal(err)
	}
	return func() {
		if err := os.Remove(dir); err != nil {
			t.Fatal(err)
		}
		if err := os.Rename(moved, dir); err != nil {
			t.Fatal(err)
		}
	}
}
