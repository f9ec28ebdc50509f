package notify

import (
	"net/http"
	"slices"
	"strings"
	"testing"

	"github.com/opencontainers/go-digest"

	"github.com/cairn-registry/cairn/internal/notify"
	"github.com/cairn-registry/cairn/internal/testutil/cairnproc"
)

// TestCraneEvents: crane push, pull, copy (a cross-repository mount) and
// delete, plus tag and blob deletes, produce distribution's events with
// the fields receivers read; an endpoint ignoring pulls and blobs (by media
// type, through distribution's older key) gets exactly the other events,
// in the same order.
func TestCraneEvents(t *testing.T) {
	all, filtered := newReceiver(t), newReceiver(t)
	debug := cairnproc.FreeAddr(t)
	srv := startCairn(t, "", `
notifications:
  events:
    includereferences: true
  endpoints:
    - name: all
      url: `+all.srv.URL+`/events
      headers:
        X-Test: ["yes"]
    - name: filtered
      url: `+filtered.srv.URL+`/events
      headers:
        X-Test: ["yes"]
      ignoredmediatypes: [application/octet-stream]
      ignore:
        actions: [pull]
    - name: off
      disabled: true
      url: http://127.0.0.1:1/never
`, debug)
	c := newCrane(t)
	im := newImage(t, 2)
	ref := srv.Addr + "/notify/a"

	c.run(t, "push", im.dir, ref+":v1")
	evs := all.waitFor(t, srv, "manifest push", func(ev notify.Event) bool {
		return ev.Action == notify.ActionPush && ev.Target.MediaType == string(im.manifest.MediaType)
	})
	for _, b := range im.blobs() {
		got := find(evs, notify.ActionPush, "notify/a", b.Digest.String())
		if len(got) != 1 {
			t.Fatalf("blob %s: %d push events, want 1:\n%s", b.Digest, len(got), dump(evs))
		}
		tg := got[0].Target
		if tg.MediaType != "application/octet-stream" || tg.Size != b.Size || tg.Length != b.Size ||
			tg.URL != srv.URL+"/v2/notify/a/blobs/"+b.Digest.String() {
			t.Errorf("blob push target = %+v, want size %d", tg, b.Size)
		}
		if m := got[0].Request.Method; m != http.MethodPut && m != http.MethodPost {
			t.Errorf("blob push request method %s", m)
		}
	}
	mp := find(evs, notify.ActionPush, "notify/a", im.digest)
	if len(mp) != 1 {
		t.Fatalf("%d manifest push events, want 1:\n%s", len(mp), dump(evs))
	}
	checkManifestTarget(t, mp[0], im, "v1", srv)
	if r := mp[0].Request; r.Method != http.MethodPut || r.Host != srv.Addr || r.Addr == "" || r.ID == "" ||
		!strings.Contains(r.UserAgent, "go-containerregistry") {
		t.Errorf("request record = %+v", r)
	}
	if s := mp[0].Source; s.InstanceID == "" || !strings.HasSuffix(s.Addr, ":"+strings.Split(srv.Addr, ":")[1]) {
		t.Errorf("source record = %+v", s)
	}
	if mp[0].ID == "" || mp[0].Timestamp.IsZero() {
		t.Errorf("event id %q, timestamp %v", mp[0].ID, mp[0].Timestamp)
	}

	// Pull: the manifest by tag and every blob, by GET.
	c.run(t, "pull", "--format=oci", ref+":v1", t.TempDir())
	evs = all.waitFor(t, srv, "manifest pull", func(ev notify.Event) bool {
		return ev.Action == notify.ActionPull && ev.Target.MediaType == string(im.manifest.MediaType)
	})
	pull := find(evs, notify.ActionPull, "notify/a", im.digest)
	if len(pull) != 1 || pull[0].Request.Method != http.MethodGet {
		t.Fatalf("manifest pull events:\n%s", dump(pull))
	}
	checkManifestTarget(t, pull[0], im, "v1", srv)
	for _, l := range im.layers {
		evs = all.waitFor(t, srv, "layer pull", func(ev notify.Event) bool {
			return ev.Action == notify.ActionPull && ev.Target.Digest.String() == l.Digest.String()
		})
		got := find(evs, notify.ActionPull, "notify/a", l.Digest.String())
		if len(got) != 1 || got[0].Target.Size != l.Size || got[0].Request.Method != http.MethodGet {
			t.Errorf("layer %s pull events:\n%s", l.Digest, dump(got))
		}
	}

	// crane copy within one registry mounts the layers from notify/a.
	c.run(t, "copy", ref+":v1", srv.Addr+"/notify/b:v1")
	evs = all.waitFor(t, srv, "manifest push to notify/b", func(ev notify.Event) bool {
		return ev.Action == notify.ActionPush && ev.Target.Repository == "notify/b" && ev.Target.MediaType == string(im.manifest.MediaType)
	})
	for _, l := range im.layers {
		got := find(evs, notify.ActionMount, "notify/b", l.Digest.String())
		if len(got) != 1 || got[0].Target.FromRepository != "notify/a" || got[0].Target.Size != l.Size ||
			got[0].Target.URL != srv.URL+"/v2/notify/b/blobs/"+l.Digest.String() {
			t.Errorf("layer %s mount events:\n%s", l.Digest, dump(got))
		}
	}

	// Deletes: a manifest by digest (crane), a tag and a blob (the API).
	c.run(t, "delete", srv.Addr+"/notify/b@"+im.digest)
	apiDelete(t, srv.URL+"/v2/notify/a/manifests/v1")
	apiDelete(t, srv.URL+"/v2/notify/a/blobs/"+im.layers[0].Digest.String())
	last := func(ev notify.Event) bool {
		return ev.Action == notify.ActionDelete && ev.Target.Digest.String() == im.layers[0].Digest.String()
	}
	evs = all.waitFor(t, srv, "blob delete", last)
	for _, want := range []notify.Target{
		{Repository: "notify/b", Digest: digest.Digest(im.digest)},
		{Repository: "notify/a", Tag: "v1"},
		{Repository: "notify/a", Digest: digest.Digest(im.layers[0].Digest.String())},
	} {
		n := 0
		for _, ev := range evs {
			if ev.Action == notify.ActionDelete && ev.Target.Repository == want.Repository &&
				ev.Target.Digest == want.Digest && ev.Target.Tag == want.Tag {
				if ev.Target.MediaType != "" || ev.Target.Size != 0 {
					t.Errorf("delete target carries more than distribution's: %+v", ev.Target)
				}
				n++
			}
		}
		if n != 1 {
			t.Errorf("%d delete events for %+v, want 1:\n%s", n, want, dump(evs))
		}
	}

	// The filtered endpoint: each event of "all" that is not a pull and
	// not a blob, in the same order. Its last one is the blob delete
	// (deletes carry no media type, so none is ignored by it).
	fevs := filtered.waitFor(t, srv, "blob delete (filtered)", last)
	var want []string
	for _, ev := range all.got(t) {
		if ev.Action != notify.ActionPull && ev.Target.MediaType != "application/octet-stream" {
			want = append(want, ev.ID)
		}
	}
	var got []string
	for _, ev := range fevs {
		got = append(got, ev.ID)
	}
	if !slices.Equal(got, want) {
		t.Errorf("filtered endpoint got:\n%s\nwant the unfiltered events of:\n%s", dump(fevs), dump(all.got(t)))
	}
	if ids := uniq(all.got(t)); ids != len(all.got(t)) {
		t.Errorf("event ids repeat: %d distinct of %d", ids, len(all.got(t)))
	}
	// A sender counts an event once its receiver answered: the count may
	// trail what the receiver holds by a moment.
	waitMetric(t, srv, debug, `cairn_notifications_sent_total{endpoint="all"}`, float64(len(all.got(t))))
	if n := metricUntil(t, debug, `cairn_notifications_pending{endpoint="filtered"}`, func(n float64) bool { return n == 0 }); n != 0 {
		t.Errorf("pending metric %v after delivery", n)
	}
}

func checkManifestTarget(t *testing.T, ev notify.Event, im image, tag string, srv *cairnproc.Server) {
	t.Helper()
	tg := ev.Target
	if tg.MediaType != string(im.manifest.MediaType) || tg.Digest.String() != im.digest || tg.Size != im.manifest.Size ||
		tg.Length != tg.Size || tg.Tag != tag || tg.URL != srv.URL+"/v2/"+tg.Repository+"/manifests/"+im.digest {
		t.Errorf("manifest target = %+v, want digest %s size %d tag %s", tg, im.digest, im.manifest.Size, tag)
	}
	// includereferences: the config and the layers, in order.
	var refs []string
	for _, d := range tg.References {
		refs = append(refs, d.Digest.String())
	}
	var want []string
	for _, b := range im.blobs() {
		want = append(want, b.Digest.String())
	}
	if !slices.Equal(refs, want) {
		t.Errorf("references %v, want %v", refs, want)
	}
}

func apiDelete(t *testing.T, url string) {
	t.Helper()
	req, _ := http.NewRequest(http.MethodDelete, url, nil)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusAccepted {
		t.Fatalf("DELETE %s: %s", url, resp.Status)
	}
}

func uniq(evs []notify.Event) int {
	ids := make(map[string]bool)
	for _, ev := range evs {
		ids[ev.ID] = true
	}
	return len(ids)
}
