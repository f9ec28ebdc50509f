package notify

import (
	"testing"

	"github.com/cairn-registry/cairn/internal/notify"
	"github.com/cairn-registry/cairn/internal/testutil/cairnproc"
)

// TestGCEvent: a scheduled GC run that frees an untagged image sends a gc
// event saying what it freed; an endpoint ignoring the gc action gets the
// same registry events but never a gc one.
func TestGCEvent(t *testing.T) {
	rc, nogc := newReceiver(t), newReceiver(t)
	debug := cairnproc.FreeAddr(t)
	// The delay keeps the runs every second from taking the blobs of a
	// push still under way (see test/gc's TestScheduledGC).
	srv := startCairn(t, "", `
storage:
  gc:
    enabled: true
    interval: 1s
    delay: 5s
    deleteuntagged: true
notifications:
  endpoints:
    - name: all
      url: `+rc.srv.URL+`/hook
      headers:
        X-Test: ["yes"]
    - name: nogc
      url: `+nogc.srv.URL+`/hook
      headers:
        X-Test: ["yes"]
      ignore:
        actions: [gc, pull]
`, debug)
	c := newCrane(t)
	old, cur := newImage(t, 2), newImage(t, 1)
	c.run(t, "push", old.dir, srv.Addr+"/gc/app:latest")
	c.run(t, "push", cur.dir, srv.Addr+"/gc/app:latest") // old is now untagged

	var oldBytes int64
	for _, b := range old.blobs() {
		oldBytes += b.Size
	}
	evs := rc.waitFor(t, srv, "gc run that freed the untagged image", func(ev notify.Event) bool {
		return ev.Action == notify.ActionGC && ev.Cairn != nil && ev.Cairn.GC != nil && ev.Cairn.GC.Blobs >= int64(len(old.blobs()))
	})
	for _, ev := range evs {
		if ev.Action != notify.ActionGC {
			continue
		}
		g := ev.Cairn.GC
		if g.RunID == "" || g.Error != "" || ev.ID == "" || ev.Source.InstanceID == "" {
			t.Errorf("gc event %+v, details %+v", ev, g)
		}
		if g.Blobs >= int64(len(old.blobs())) && (g.Manifests < 1 || g.BytesFreed < oldBytes) {
			t.Errorf("gc freed %d blobs but reports %d manifests, %d bytes (the old image alone is %d)", g.Blobs, g.Manifests, g.BytesFreed, oldBytes)
		}
	}

	// A last registry event marks the end of what nogc will get.
	apiDelete(t, srv.URL+"/v2/gc/app/manifests/latest")
	last := func(ev notify.Event) bool { return ev.Action == notify.ActionDelete && ev.Target.Tag == "latest" }
	rc.waitFor(t, srv, "tag delete", last)
	for _, ev := range nogc.waitFor(t, srv, "tag delete (nogc)", last) {
		if ev.Action == notify.ActionGC {
			t.Fatalf("the endpoint ignoring gc got a gc event: %+v", ev)
		}
	}
}

// TestRetentionEvents: tags and manifests retention deletes before a
// scheduled GC are announced as distribution's delete events, by the actor
// "retention".
func TestRetentionEvents(t *testing.T) {
	rc := newReceiver(t)
	srv := startCairn(t, "", `
storage:
  gc:
    enabled: true
    interval: 1s
    delay: 5s
`+retentionPolicy+`notifications:
  endpoints:
    - name: all
      url: `+rc.srv.URL+`/hook
      headers:
        X-Test: ["yes"]
`, "")
	c := newCrane(t)
	kept, gone := newImage(t, 1), newImage(t, 1)
	c.run(t, "push", kept.dir, srv.Addr+"/ret/app:keep")
	c.run(t, "push", gone.dir, srv.Addr+"/ret/app:old")
	evs := rc.waitFor(t, srv, "retention's tag delete", func(ev notify.Event) bool {
		return ev.Action == notify.ActionDelete && ev.Target.Tag == "old" && ev.Actor.Name == "retention"
	})
	rc.waitFor(t, srv, "retention's manifest delete", func(ev notify.Event) bool {
		return ev.Action == notify.ActionDelete && ev.Target.Digest.String() == gone.digest && ev.Actor.Name == "retention"
	})
	for _, ev := range evs {
		if ev.Action == notify.ActionDelete && ev.Target.Tag == "keep" {
			t.Fatalf("the kept tag was deleted: %+v", ev)
		}
	}
}
