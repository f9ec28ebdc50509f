// Package tracing tests OpenTelemetry tracing through `cairn serve`: a
// collector in the test receives OTLP over HTTP, as one configured by the
// standard OTEL_* environment would.
package tracing

import (
	"compress/gzip"
	"encoding/hex"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/google/go-containerregistry/pkg/v1/remote"
	coltrace "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	"google.golang.org/protobuf/proto"

	"github.com/cairn-registry/cairn/internal/testutil/cairnproc"
	"github.com/cairn-registry/cairn/internal/testutil/regtest"
)

func TestMain(m *testing.M) { os.Exit(cairnproc.Main(m)) }

type span struct {
	name, trace, id, parent string
}

// collector receives OTLP/HTTP trace exports.
type collector struct {
	mu    sync.Mutex
	spans []span
}

func (c *collector) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	var body io.Reader = r.Body
	if r.Header.Get("Content-Encoding") == "gzip" {
		zr, err := gzip.NewReader(r.Body)
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		body = zr
	}
	b, err := io.ReadAll(body)
	var req coltrace.ExportTraceServiceRequest
	if err == nil {
		err = proto.Unmarshal(b, &req)
	}
	if err != nil || r.URL.Path != "/v1/traces" {
		http.Error(w, "bad export", http.StatusBadRequest)
		return
	}
	c.mu.Lock()
	for _, rs := range req.ResourceSpans {
		for _, ss := range rs.ScopeSpans {
			for _, s := range ss.Spans {
				c.spans = append(c.spans, span{name: s.Name, trace: hex.EncodeToString(s.TraceId), id: hex.EncodeToString(s.SpanId), parent: hex.EncodeToString(s.ParentSpanId)})
			}
		}
	}
	c.mu.Unlock()
	out, _ := proto.Marshal(&coltrace.ExportTraceServiceResponse{})
	w.Header().Set("Content-Type", "application/x-protobuf")
	w.Write(out)
}

// TestPushIsTraced: a push's requests are spans named by method and
// route, with the storage calls they made as child spans; a caller's
// traceparent makes the request span its child. Tracing is off without the
// environment.
func TestPushIsTraced(t *testing.T) {
	col := &collector{}
	srv := httptest.NewServer(col)
	defer srv.Close()
	t.Setenv("OTEL_EXPORTER_OTLP_ENDPOINT", srv.URL)
	t.Setenv("OTEL_BSP_SCHEDULE_DELAY", "50")
	cairn := cairnproc.Start(t, "")

	img := regtest.RandomImage(t, 2, 32<<10)
	if err := remote.Write(regtest.Ref(t, cairn.Addr, "traced/app:v1"), img, remote.WithContext(t.Context())); err != nil {
		t.Fatal(err)
	}
	hc := &http.Client{Timeout: time.Minute}
	defer hc.CloseIdleConnections()
	const traceID, parentID = "4bf92f3577b34da6a3ce929d0e0e4736", "00f067aa0ba902b7"
	r := regtest.Do(t, hc, http.MethodGet, cairn.URL+"/v2/traced/app/manifests/v1", nil,
		"Accept", regtest.ManifestAccept, "traceparent", "00-"+traceID+"-"+parentID+"-01")
	if r.Status != http.StatusOK {
		t.Fatal(r)
	}
	cairn.Stop() // flushes what is left

	col.mu.Lock()
	spans := col.spans
	col.mu.Unlock()
	byID := map[string]span{}
	for _, s := range spans {
		byID[s.id] = s
	}
	// The request span a storage span descends from.
	request := func(s span) (span, bool) {
		for s.parent != "" {
			p, ok := byID[s.parent]
			if !ok {
				return s, false
			}
			s = p
		}
		return s, true
	}
	found := map[string]bool{}
	for _, s := range spans {
		if s.name == "storage.put_content" || s.name == "storage.writer" || s.name == "storage.move" {
			if req, ok := request(s); ok {
				found[req.name+" > "+s.name] = true
			}
		}
		if s.name == "GET manifest" && s.trace == traceID && s.parent == parentID {
			found["propagated"] = true
		}
	}
	for _, want := range []string{"PUT manifest > storage.put_content", "propagated"} {
		if !found[want] {
			t.Errorf("no %q among %d spans: %v", want, len(spans), found)
		}
	}
	var uploads bool
	for k := range found {
		if k == "PUT upload > storage.move" || k == "PUT upload > storage.writer" || k == "PATCH upload > storage.writer" || k == "POST upload_start > storage.writer" {
			uploads = true
		}
	}
	if !uploads {
		t.Errorf("no upload request with storage spans: %v", found)
	}

	// Off without the environment.
	t.Setenv("OTEL_EXPORTER_OTLP_ENDPOINT", "")
	before := len(spans)
	quiet := cairnproc.Start(t, "")
	regtest.Do(t, hc, http.MethodGet, quiet.URL+"/v2/", nil)
	quiet.Stop()
	col.mu.Lock()
	defer col.mu.Unlock()
	if len(col.spans) != before {
		t.Errorf("%d spans exported with tracing off", len(col.spans)-before)
	}
}
