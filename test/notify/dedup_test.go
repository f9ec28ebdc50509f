package notify

import (
	"testing"

	"github.com/cairn-registry/cairn/internal/notify"
	"github.com/cairn-registry/cairn/internal/testutil/cairnproc"
)

// TestDedupEvent: in full mode, each pushed layer whose intact copy dedup
// replaces by its recipe gives a dedup event naming the layer; the config
// blob, not a layer, gives none.
func TestDedupEvent(t *testing.T) {
	rc := newReceiver(t)
	srv := startCairn(t, "", `
storage:
  dedup:
    mode: full
notifications:
  endpoints:
    - name: e
      url: `+rc.srv.URL+`/hook
      headers:
        X-Test: ["yes"]
      ignore:
        actions: [pull, push]
`, cairnproc.FreeAddr(t))
	im := newImage(t, 2)
	newCrane(t).run(t, "push", im.dir, srv.Addr+"/dedup/a:v1")
	for _, l := range im.layers {
		rc.waitFor(t, srv, "dedup of "+l.Digest.String(), func(ev notify.Event) bool {
			return ev.Action == notify.ActionDedup && ev.Target.Digest.String() == l.Digest.String() &&
				ev.Cairn != nil && ev.Cairn.Dedup != nil && ev.Cairn.Dedup.Outcome == "deduplicated"
		})
	}
	for _, ev := range rc.got(t) {
		if ev.Action != notify.ActionDedup {
			t.Errorf("an ignored action was sent: %+v", ev)
		}
		if ev.Target.Digest.String() == im.config.Digest.String() {
			t.Errorf("dedup event for the config blob")
		}
	}
}
