package notify

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/cairn-registry/cairn/internal/notify"
	"github.com/cairn-registry/cairn/internal/testutil/cairnproc"
	"github.com/cairn-registry/cairn/internal/testutil/regtest"
)

// TestDeliveryAfterFailureAndRestart: while the receiver fails, events
// stay queued (failures are counted); they survive a restart of cairn;
// once the receiver recovers it gets every event, at least once, in the
// order they happened: the first image's blobs, then its manifest, then
// the second image's, pushed after the restart.
func TestDeliveryAfterFailureAndRestart(t *testing.T) {
	rc := newReceiver(t)
	rc.failing.Store(true)
	root := t.TempDir()
	cfg := `
notifications:
  endpoints:
    - name: e
      url: ` + rc.srv.URL + `/hook
      headers:
        X-Test: ["yes"]
      timeout: 2s
      threshold: 2
      backoff: 50ms
`
	debug := cairnproc.FreeAddr(t)
	srv := startCairn(t, root, cfg, debug)
	c := newCrane(t)
	first, second := newImage(t, 2), newImage(t, 1)
	c.run(t, "push", first.dir, srv.Addr+"/retry/one:v1")

	// Failures are counted and nothing is lost while they go on.
	waitMetric(t, srv, debug, `cairn_notifications_failures_total{endpoint="e"}`, 3)
	waitMetric(t, srv, debug, `cairn_notifications_pending{endpoint="e"}`, float64(len(first.blobs())+1))
	srv.Stop()
	if !strings.Contains(srv.Logs(), "msg=stopped") {
		t.Fatalf("cairn did not stop cleanly:\n%s", srv.Logs())
	}

	srv = startCairn(t, root, cfg, debug)
	if n := regtest.Metric(t, debug, `cairn_notifications_pending{endpoint="e"}`); n != float64(len(first.blobs())+1) {
		t.Errorf("after restart %v events pending, want %d", n, len(first.blobs())+1)
	}
	c.run(t, "push", second.dir, srv.Addr+"/retry/two:v1")
	refused, deadline := rc.refused.Load(), time.Now().Add(hangGuard)
	for rc.refused.Load() == refused { // a try after the restart is refused too
		if time.Now().After(deadline) {
			t.Fatalf("no delivery tried after the restart\n%s", srv.Logs())
		}
		time.Sleep(20 * time.Millisecond)
	}
	rc.failing.Store(false)
	evs := rc.waitFor(t, srv, "second manifest push", func(ev notify.Event) bool {
		return ev.Action == notify.ActionPush && ev.Target.Digest.String() == second.digest
	})

	// At least once: duplicates allowed, nothing missing, order kept.
	var order []string
	seen := make(map[string]bool)
	for _, ev := range evs {
		if !seen[ev.ID] {
			seen[ev.ID] = true
			order = append(order, ev.Target.Repository+"@"+ev.Target.Digest.String())
		}
	}
	pos := func(repo, d string) int {
		for i, o := range order {
			if o == repo+"@"+d {
				return i
			}
		}
		t.Fatalf("no push event for %s@%s:\n%s", repo, d, dump(evs))
		return -1
	}
	mOne, mTwo := pos("retry/one", first.digest), pos("retry/two", second.digest)
	for _, b := range first.blobs() {
		if p := pos("retry/one", b.Digest.String()); p > mOne {
			t.Errorf("blob %s event after its manifest's", b.Digest)
		}
	}
	for _, b := range second.blobs() {
		if p := pos("retry/two", b.Digest.String()); p > mTwo || p < mOne {
			t.Errorf("blob %s of the second push: event at %d, want between %d and %d", b.Digest, p, mOne, mTwo)
		}
	}
	if len(order) != len(first.blobs())+len(second.blobs())+2 {
		t.Errorf("%d distinct events, want %d:\n%s", len(order), len(first.blobs())+len(second.blobs())+2, dump(evs))
	}
	waitMetric(t, srv, debug, `cairn_notifications_sent_total{endpoint="e"}`, float64(len(second.blobs())+1))
	if n := regtest.Metric(t, debug, `cairn_notifications_pending{endpoint="e"}`); n != 0 {
		t.Errorf("%v events pending after recovery", n)
	}
}

// TestQueueBound: with notifications.queue.maxevents, a receiver that is
// down makes the oldest events drop, counted; the newest are delivered.
func TestQueueBound(t *testing.T) {
	rc := newReceiver(t)
	rc.failing.Store(true)
	debug := cairnproc.FreeAddr(t)
	queue := filepath.Join(t.TempDir(), "q", "events.db")
	srv := startCairn(t, "", fmt.Sprintf(`
notifications:
  endpoints:
    - name: e
      url: %s/hook
      headers:
        X-Test: ["yes"]
      threshold: 1
      backoff: 50ms
  queue:
    path: %s
    maxevents: 2
`, rc.srv.URL, queue), debug)
	im := newImage(t, 2) // 3 blobs and a manifest: 4 events
	newCrane(t).run(t, "push", im.dir, srv.Addr+"/bound/a:v1")
	waitMetric(t, srv, debug, `cairn_notifications_dropped_total{endpoint="e"}`, 2)
	if _, err := os.Stat(queue); err != nil {
		t.Fatalf("queue file: %v", err)
	}
	rc.failing.Store(false)
	evs := rc.waitFor(t, srv, "manifest push", func(ev notify.Event) bool {
		return ev.Target.Digest.String() == im.digest
	})
	if uniq(evs) != 2 {
		t.Errorf("%d distinct events delivered, want the newest 2:\n%s", uniq(evs), dump(evs))
	}
}

// waitMetric waits until series reaches at least min.
func waitMetric(t *testing.T, srv *cairnproc.Server, debug, series string, min float64) {
	t.Helper()
	if v := metricUntil(t, debug, series, func(v float64) bool { return v >= min }); v < min {
		t.Fatalf("%s = %v, want at least %v within %s\n%s", series, v, min, hangGuard, srv.Logs())
	}
}
