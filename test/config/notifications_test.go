package config

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"

	"github.com/google/go-containerregistry/pkg/v1/remote"

	"github.com/cairn-registry/cairn/internal/notify"
	"github.com/cairn-registry/cairn/internal/testutil/regtest"
)

// listener records the events POSTed to it; it refuses the first failFirst
// requests with 500.
type listener struct {
	mu        sync.Mutex
	events    []notify.Event
	failFirst int
	posts     int
	bad       []string
}

func (l *listener) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.posts++
	if l.posts <= l.failFirst {
		w.WriteHeader(http.StatusInternalServerError)
		return
	}
	if ct := r.Header.Get("Content-Type"); ct != notify.EnvelopeMediaType || r.Header.Get("Authorization") != "Bearer token" {
		l.bad = append(l.bad, fmt.Sprintf("Content-Type %q, Authorization %q", ct, r.Header.Get("Authorization")))
	}
	b, _ := io.ReadAll(r.Body)
	var env struct{ Events []notify.Event }
	if err := json.Unmarshal(b, &env); err != nil || len(env.Events) != 1 {
		l.bad = append(l.bad, fmt.Sprintf("envelope %q: %v", b, err))
	}
	l.events = append(l.events, env.Events...)
}

func (l *listener) find(action, mediaTypePrefix, tag string) (notify.Event, bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, e := range l.events {
		if e.Action == action && strings.HasPrefix(e.Target.MediaType, mediaTypePrefix) && e.Target.Tag == tag {
			return e, true
		}
	}
	return notify.Event{}, false
}

func (l *listener) actions() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	var s []string
	for _, e := range l.events {
		s = append(s, e.Action+" "+e.Target.MediaType+" "+e.Target.Tag)
	}
	return strings.Join(s, "; ")
}

// notifications.endpoints receive distribution's events for pushes, pulls,
// mounts and deletes, with their headers; a failed delivery is retried;
// ignore.actions drops what an endpoint does not want.
func TestNotifications(t *testing.T) {
	all := &listener{failFirst: 2}
	noPulls := &listener{}
	a, b := httptest.NewServer(all), httptest.NewServer(noPulls)
	defer a.Close()
	defer b.Close()
	s := serve(t, fmt.Sprintf(`notifications:
  events:
    includereferences: true
  endpoints:
    - name: all
      url: %s/events
      headers:
        Authorization: [Bearer token]
      timeout: 5s
      threshold: 1
      backoff: 10ms
    - name: nopulls
      url: %s/events
      headers:
        Authorization: [Bearer token]
      ignore:
        actions: [pull]
    - name: off
      url: http://127.0.0.1:1/never
      disabled: true
`, a.URL, b.URL))

	img := regtest.RandomImage(t, 2, 1024)
	if err := remote.Write(regtest.Ref(t, s.Addr, "ev/app:v1"), img); err != nil {
		t.Fatal(err)
	}
	md, _ := img.Digest()
	api := s.URL + "/v2/"
	if r := regtest.Do(t, hc, http.MethodGet, api+"ev/app/manifests/v1", nil, "Accept", regtest.ManifestAccept); r.Status != http.StatusOK {
		t.Fatal(r)
	}
	layers, _ := img.Layers()
	ld, _ := layers[0].Digest()
	if r := regtest.Do(t, hc, http.MethodGet, api+"ev/app/blobs/"+ld.String(), nil); r.Status != http.StatusOK {
		t.Fatal(r)
	}
	if r := regtest.Do(t, hc, http.MethodPost, api+"ev/other/blobs/uploads/?mount="+ld.String()+"&from=ev/app", nil); r.Status != http.StatusCreated {
		t.Fatal(r)
	}
	if r := regtest.Do(t, hc, http.MethodDelete, api+"ev/app/manifests/v1", nil); r.Status != http.StatusAccepted {
		t.Fatal(r)
	}

	eventually(t, "every event at the first endpoint", func() (bool, string) {
		_, push := all.find("push", "application/vnd.oci.image.manifest", "v1")
		_, pull := all.find("pull", "application/vnd.oci.image.manifest", "v1")
		_, blob := all.find("pull", "application/octet-stream", "")
		_, mount := all.find("mount", "application/octet-stream", "")
		_, del := all.find("delete", "", "v1")
		return push && pull && blob && mount && del, all.actions()
	})
	push, _ := all.find("push", "application/vnd.oci.image.manifest", "v1")
	if push.Target.Digest.String() != md.String() || push.Target.Repository != "ev/app" || push.Target.Size == 0 ||
		len(push.Target.References) != 3 || push.Request.Method != http.MethodPut || push.Source.InstanceID == "" ||
		!strings.HasSuffix(push.Target.URL, "/v2/ev/app/manifests/"+md.String()) {
		t.Errorf("manifest push event %+v", push)
	}
	mount, _ := all.find("mount", "application/octet-stream", "")
	if mount.Target.FromRepository != "ev/app" || mount.Target.Repository != "ev/other" || mount.Target.Digest.String() != ld.String() {
		t.Errorf("mount event %+v", mount)
	}
	if n := countLayerPushes(all, ld.String()); n != 1 {
		t.Errorf("layer %s pushed %d times in events, want 1: %s", ld, n, all.actions())
	}
	if all.posts < len(all.events)+2 {
		t.Errorf("%d posts for %d events: the two refused deliveries were not retried", all.posts, len(all.events))
	}

	eventually(t, "the second endpoint's events", func() (bool, string) {
		_, del := noPulls.find("delete", "", "v1")
		return del, noPulls.actions()
	})
	if e, ok := noPulls.find("pull", "application/vnd.oci.image.manifest", "v1"); ok {
		t.Errorf("an endpoint ignoring pulls got %+v", e)
	}
	for _, l := range []*listener{all, noPulls} {
		if len(l.bad) > 0 {
			t.Errorf("bad deliveries: %q", l.bad)
		}
	}
}

func countLayerPushes(l *listener, d string) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	n := 0
	for _, e := range l.events {
		if e.Action == "push" && e.Target.Digest.String() == d {
			n++
		}
	}
	return n
}
