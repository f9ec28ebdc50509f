// Package notify tests registry notifications end to end: a real cairn
// serve, real crane commands, and a webhook receiver in the test.
package notify

import (
	"encoding/json"
	"fmt"
	"mime"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/random"

	"github.com/cairn-registry/cairn/internal/notify"
	"github.com/cairn-registry/cairn/internal/testutil/cairnproc"
	"github.com/cairn-registry/cairn/internal/testutil/clitool"
	"github.com/cairn-registry/cairn/internal/testutil/regtest"
)

func TestMain(m *testing.M) { os.Exit(cairnproc.Main(m)) }

// hangGuard bounds every wait; on a busy machine deliveries can take a
// while, so it is generous and never a timing assertion.
const hangGuard = 2 * time.Minute

// receiver is a webhook endpoint: it records every event it accepted, in
// arrival order, and answers 503 while failing is set.
type receiver struct {
	srv     *httptest.Server
	failing atomic.Bool
	refused atomic.Int64 // requests answered 503

	mu     sync.Mutex
	events []notify.Event
	bad    []string // envelopes that broke the format
}

func newReceiver(t *testing.T) *receiver {
	rc := &receiver{}
	rc.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if rc.failing.Load() {
			rc.refused.Add(1)
			http.Error(w, "down", http.StatusServiceUnavailable)
			return
		}
		var env notify.Envelope
		mt, _, _ := mime.ParseMediaType(r.Header.Get("Content-Type"))
		err := json.NewDecoder(r.Body).Decode(&env)
		rc.mu.Lock()
		defer rc.mu.Unlock()
		switch {
		case r.Method != http.MethodPost:
			rc.bad = append(rc.bad, "method "+r.Method)
		case mt != notify.EnvelopeMediaType:
			rc.bad = append(rc.bad, "Content-Type "+r.Header.Get("Content-Type"))
		case r.Header.Get("X-Test") != "yes":
			rc.bad = append(rc.bad, "configured header X-Test missing")
		case err != nil || len(env.Events) == 0:
			rc.bad = append(rc.bad, fmt.Sprintf("envelope: %v, %d events", err, len(env.Events)))
		}
		rc.events = append(rc.events, env.Events...)
	}))
	t.Cleanup(rc.srv.Close)
	return rc
}

// got returns the events received so far, and fails the test on any
// malformed envelope.
func (rc *receiver) got(t *testing.T) []notify.Event {
	t.Helper()
	rc.mu.Lock()
	defer rc.mu.Unlock()
	if len(rc.bad) > 0 {
		t.Fatalf("malformed notification requests: %v", rc.bad)
	}
	return append([]notify.Event(nil), rc.events...)
}

// waitFor waits until an event matching match has arrived and returns the
// events received by then.
func (rc *receiver) waitFor(t *testing.T, srv *cairnproc.Server, what string, match func(notify.Event) bool) []notify.Event {
	t.Helper()
	deadline := time.Now().Add(hangGuard)
	for {
		evs := rc.got(t)
		for _, ev := range evs {
			if match(ev) {
				return evs
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("no %s event within %s; got %d events:\n%s\ncairn log:\n%s", what, hangGuard, len(evs), dump(evs), srv.Logs())
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func dump(evs []notify.Event) string {
	var b strings.Builder
	for _, ev := range evs {
		fmt.Fprintf(&b, "  %s %s repo=%s tag=%s digest=%s mt=%s from=%s\n", ev.Action, ev.Request.Method, ev.Target.Repository, ev.Target.Tag, ev.Target.Digest, ev.Target.MediaType, ev.Target.FromRepository)
	}
	return b.String()
}

// startCairn runs cairn serve on root with the given configuration and a
// debug listener for metrics.
func startCairn(t *testing.T, root, yml, debugAddr string) *cairnproc.Server {
	t.Helper()
	yml += "http:\n  debug:\n    addr: " + debugAddr + "\n"
	cfg := filepath.Join(t.TempDir(), "config.yml")
	if err := os.WriteFile(cfg, []byte(yml), 0o644); err != nil {
		t.Fatal(err)
	}
	return cairnproc.Start(t, root, "--config", cfg)
}

// image is a random image written as an OCI layout that crane can push.
type image struct {
	dir      string
	img      v1.Image
	digest   string
	manifest v1.Descriptor
	layers   []v1.Descriptor
	config   v1.Descriptor
}

func newImage(t *testing.T, layers int) image {
	t.Helper()
	img, err := random.Image(2048, int64(layers))
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	p, err := layout.Write(dir, empty.Index)
	if err != nil {
		t.Fatal(err)
	}
	if err := p.AppendImage(img); err != nil {
		t.Fatal(err)
	}
	m, err := img.Manifest()
	if err != nil {
		t.Fatal(err)
	}
	d, _ := img.Digest()
	size, _ := img.Size()
	mt, _ := img.MediaType()
	return image{
		dir: dir, img: img, digest: d.String(),
		manifest: v1.Descriptor{MediaType: mt, Digest: d, Size: size},
		layers:   m.Layers, config: m.Config,
	}
}

// blobs are the image's config and layers.
func (im image) blobs() []v1.Descriptor { return append([]v1.Descriptor{im.config}, im.layers...) }

// crane runs crane against the plain-HTTP registry.
type crane struct {
	s   *clitool.Session
	bin string
}

func newCrane(t *testing.T) crane {
	return crane{s: clitool.NewSession(t), bin: clitool.Path(t, "crane")}
}

func (c crane) run(t *testing.T, args ...string) []byte {
	t.Helper()
	return c.s.Run(t, c.bin, append(args, "--insecure")...)
}

// find returns the events with action in repo for digest d.
func find(evs []notify.Event, action, repo, d string) []notify.Event {
	var out []notify.Event
	for _, ev := range evs {
		if ev.Action == action && ev.Target.Repository == repo && string(ev.Target.Digest) == d {
			out = append(out, ev)
		}
	}
	return out
}

// metricUntil waits until the sample named series satisfies ok and
// returns it: a sender counts an event once its receiver answered, so the
// counts may trail what the receiver holds by a moment. The hang guard
// ends a wait that would never end (the caller's check then fails).
func metricUntil(t *testing.T, debugAddr, series string, ok func(float64) bool) float64 {
	t.Helper()
	deadline := time.Now().Add(hangGuard)
	for {
		n := regtest.Metric(t, debugAddr, series)
		if ok(n) || time.Now().After(deadline) {
			return n
		}
		time.Sleep(50 * time.Millisecond)
	}
}
