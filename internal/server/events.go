package server

import (
	"context"
	"net/http"
	"strconv"
	"strings"

	"github.com/opencontainers/go-digest"

	"github.com/cairn-registry/cairn/internal/manifest"
	"github.com/cairn-registry/cairn/internal/notify"
)

// Events receives the API's events (notify.Notifier implements it).
type Events interface {
	Notify(ev notify.Event)
}

// blobMediaType is the media type distribution gives blobs in events:
// storage does not know a blob's type.
const blobMediaType = "application/octet-stream"

// eventNote carries what the request's completion cannot tell from the
// route, status and response headers: handlers fill it (noteBlob,
// noteMount). The events themselves are derived in one place, emitEvents,
// after the request completed.
type eventNote struct {
	size    int64 // a pushed or pulled blob's size; -1 unknown
	mounted bool  // a POST mounted a blob rather than uploading it
	// manifest is the manifest a PUT stored or a GET served, as the
	// registry parsed it: events read it rather than parse the body again.
	manifest *manifest.Manifest
}

type eventNoteKey struct{}

func noteOf(r *http.Request) *eventNote {
	n, _ := r.Context().Value(eventNoteKey{}).(*eventNote)
	return n
}

// noteBlob records the size of the blob a request pushed or pulled.
func noteBlob(r *http.Request, size int64) {
	if n := noteOf(r); n != nil {
		n.size = size
	}
}

// noteManifest records the manifest a request pushed or pulled.
func noteManifest(r *http.Request, m *manifest.Manifest) {
	if n := noteOf(r); n != nil {
		n.manifest = m
	}
}

// noteMount records that a POST mounted its blob.
func noteMount(r *http.Request) {
	if n := noteOf(r); n != nil {
		n.mounted = true
	}
}

// withEventNote prepares r for emitEvents: a note in its context for the
// handlers to fill.
func withEventNote(r *http.Request) (*http.Request, *eventNote) {
	note := &eventNote{size: -1}
	return r.WithContext(context.WithValue(r.Context(), eventNoteKey{}, note)), note
}

// emitEvents sends the events of a completed request: push (manifest PUT,
// finished blob upload), pull (manifest and blob GET, not HEAD), delete
// (manifest, tag, blob) and mount, as distribution does.
func (s *Server) emitEvents(r *http.Request, rt route, user string, status int, h http.Header, note *eventNote) {
	ev := func(action string, t notify.Target) {
		t.Repository = rt.name
		s.opts.Events.Notify(notify.Event{
			Action: action,
			Target: t,
			Request: notify.Request{
				ID: notify.NewID(), Addr: r.RemoteAddr, Host: r.Host, Method: r.Method, UserAgent: r.UserAgent(),
			},
			Actor: notify.Actor{Name: user},
		})
	}
	dg := digest.Digest(h.Get("Docker-Content-Digest"))
	switch {
	case rt.kind == routeManifest && r.Method == http.MethodGet && status == http.StatusOK:
		size, _ := strconv.ParseInt(h.Get("Content-Length"), 10, 64)
		t := s.manifestTarget(r, rt, dg, h.Get("Content-Type"), size, note)
		if !isDigest(rt.ref) {
			t.Tag = rt.ref
		}
		ev(notify.ActionPull, t)
	case rt.kind == routeManifest && r.Method == http.MethodPut && status == http.StatusCreated:
		mt, size := r.Header.Get("Content-Type"), int64(0)
		if m := note.manifest; m != nil {
			if mt == "" {
				mt = m.MediaType
			}
			size = int64(len(m.Content))
		}
		t := s.manifestTarget(r, rt, dg, mt, size, note)
		tags := h.Values("OCI-Tag")
		if !isDigest(rt.ref) {
			tags = []string{rt.ref}
		}
		if len(tags) == 0 {
			ev(notify.ActionPush, t)
		}
		for _, tag := range tags {
			t.Tag = tag
			ev(notify.ActionPush, t)
		}
	case rt.kind == routeManifest && r.Method == http.MethodDelete && status == http.StatusAccepted:
		if isDigest(rt.ref) {
			ev(notify.ActionDelete, notify.Target{Digest: digest.Digest(rt.ref)})
		} else {
			ev(notify.ActionDelete, notify.Target{Tag: rt.ref})
		}
	case rt.kind == routeBlob && r.Method == http.MethodGet &&
		(status == http.StatusOK || status == http.StatusPartialContent || status == http.StatusTemporaryRedirect):
		ev(notify.ActionPull, s.blobTarget(r, rt, digest.Digest(rt.ref), note.size))
	case rt.kind == routeBlob && r.Method == http.MethodDelete && status == http.StatusAccepted:
		ev(notify.ActionDelete, notify.Target{Digest: digest.Digest(rt.ref)})
	case rt.kind == routeUploadStart && status == http.StatusCreated && note.mounted:
		size := int64(-1)
		if info, err := s.reg.StatBlob(r.Context(), rt.name, dg); err == nil {
			size = info.Size
		}
		t := s.blobTarget(r, rt, dg, size)
		t.FromRepository = r.URL.Query().Get("from")
		ev(notify.ActionMount, t)
	case (rt.kind == routeUploadStart || rt.kind == routeUpload) && status == http.StatusCreated:
		ev(notify.ActionPush, s.blobTarget(r, rt, dg, note.size))
	}
}

func isDigest(ref string) bool { return strings.Contains(ref, ":") }

// manifestTarget describes a manifest of rt's repository; its references
// come from the noted manifest, with EventReferences.
func (s *Server) manifestTarget(r *http.Request, rt route, d digest.Digest, mediaType string, size int64, note *eventNote) notify.Target {
	t := notify.Target{
		MediaType: mediaType, Digest: d, Size: size, Length: size,
		URL: s.eventURL(r, "/v2/"+rt.name+"/manifests/"+string(d)),
	}
	if m := note.manifest; s.opts.EventReferences && m != nil {
		if m.Config != nil {
			t.References = append(t.References, *m.Config)
		}
		t.References = append(t.References, m.Layers...)
		t.References = append(t.References, m.Blobs...)
		t.References = append(t.References, m.Manifests...)
	}
	return t
}

// blobTarget describes blob d of rt's repository; size -1 is unknown.
func (s *Server) blobTarget(r *http.Request, rt route, d digest.Digest, size int64) notify.Target {
	t := notify.Target{MediaType: blobMediaType, Digest: d, URL: s.eventURL(r, blobLocation(rt.name, d))}
	if size >= 0 {
		t.Size, t.Length = size, size
	}
	return t
}

// eventURL is the absolute URL of apiPath, as distribution writes it in
// events: http.host, else the origin the client reached. Receivers fetch
// from it, so cairn's default of relative Locations does not apply.
func (s *Server) eventURL(r *http.Request, apiPath string) string {
	b := s.urls
	b.relative = false
	return b.location(r, apiPath)
}
