package server

import (
	"net/http"
	"strings"

	"github.com/opencontainers/go-digest"
	ocispec "github.com/opencontainers/image-spec/specs-go/v1"

	"github.com/cairn-registry/cairn/internal/notify"
	"github.com/cairn-registry/cairn/internal/registry"
)

// Notifier receives distribution's events (notify.Notifier implements it).
type Notifier interface {
	Notify(ev notify.Event)
}

// blobMediaType is what distribution names a blob's media type in events:
// storage does not know it.
const blobMediaType = "application/octet-stream"

// event sends one event about rt's repository, when notifications are on.
func (s *Server) event(r *http.Request, rt route, action string, target notify.Target) {
	n := s.opts.Notifier
	if n == nil {
		return
	}
	target.Repository = rt.name
	n.Notify(notify.Event{
		Action: action,
		Target: target,
		Request: notify.Request{
			ID: notify.NewID(), Addr: r.RemoteAddr, Host: r.Host, Method: r.Method, UserAgent: r.UserAgent(),
		},
		Actor:  notify.Actor{Name: rt.user},
		Source: s.opts.EventSource,
	})
}

// manifestTarget describes manifest m of rt's repository; ref is the tag
// the request named, if it named one.
func (s *Server) manifestTarget(r *http.Request, rt route, m *registry.Manifest, ref string) notify.Target {
	t := notify.Target{
		Descriptor: ocispec.Descriptor{MediaType: m.MediaType, Digest: m.Digest, Size: int64(len(m.Content))},
		Length:     int64(len(m.Content)),
		URL:        s.urls.location(r, "/v2/"+rt.name+"/manifests/"+string(m.Digest)),
	}
	if ref != "" && !strings.Contains(ref, ":") {
		t.Tag = ref
	}
	if s.opts.EventReferences {
		if m.Config != nil {
			t.References = append(t.References, *m.Config)
		}
		t.References = append(t.References, m.Layers...)
		t.References = append(t.References, m.Blobs...)
		t.References = append(t.References, m.Manifests...)
	}
	return t
}

// blobTarget describes blob d of size bytes in rt's repository.
func (s *Server) blobTarget(r *http.Request, rt route, d digest.Digest, size int64) notify.Target {
	return notify.Target{
		Descriptor: ocispec.Descriptor{MediaType: blobMediaType, Digest: d, Size: size},
		Length:     size,
		URL:        s.urls.location(r, blobLocation(rt.name, d)),
	}
}
