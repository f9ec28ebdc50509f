package server

import (
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"

	"github.com/cairn-registry/cairn/internal/manifest"
	"github.com/cairn-registry/cairn/internal/registry"
)

func (s *Server) getManifest(w http.ResponseWriter, r *http.Request, rt route) {
	get := s.reg.GetManifest
	if r.Method == http.MethodHead {
		get = s.reg.StatManifest
	}
	var m *manifest.Manifest
	var err error
	if s.mirrored(rt.name) {
		m, err = s.opts.Mirror.Manifest(r.Context(), rt.name, rt.ref, r.Method == http.MethodHead)
	} else {
		m, err = get(r.Context(), rt.name, rt.ref)
	}
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	noteManifest(r, m)
	if s.opts.Pulls != nil && !strings.Contains(rt.ref, ":") {
		// By tag (containerd resolves a tag with a HEAD, then GETs by digest).
		s.opts.Pulls.Pulled(rt.name, rt.ref)
	}
	h := w.Header()
	etag := `"` + string(m.Digest) + `"`
	h.Set("Docker-Content-Digest", string(m.Digest))
	h.Set("ETag", etag)
	if inm := r.Header.Get("If-None-Match"); inm != "" && (inm == etag || inm == string(m.Digest)) {
		w.WriteHeader(http.StatusNotModified)
		return
	}
	h.Set("Content-Type", m.MediaType)
	h.Set("Content-Length", strconv.Itoa(len(m.Content)))
	w.WriteHeader(http.StatusOK)
	if r.Method == http.MethodGet {
		w.Write(m.Content)
	}
}

func (s *Server) putManifest(w http.ResponseWriter, r *http.Request, rt route) {
	limit := s.reg.MaxManifestSize()
	if r.ContentLength > limit {
		s.writeError(w, r, fmt.Errorf("%w: %d bytes, limit %d", registry.ErrManifestTooLarge, r.ContentLength, limit))
		return
	}
	content, err := io.ReadAll(io.LimitReader(r.Body, limit+1))
	if err != nil {
		s.writeError(w, r, fmt.Errorf("%w: reading manifest: %w", registry.ErrManifestInvalid, err))
		return
	}
	if int64(len(content)) > limit {
		s.writeError(w, r, fmt.Errorf("%w: more than %d bytes", registry.ErrManifestTooLarge, limit))
		return
	}
	res, err := s.reg.PutManifest(r.Context(), rt.name, rt.ref, r.Header.Get("Content-Type"), content, r.URL.Query()["tag"])
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	noteManifest(r, res.Manifest)
	h := w.Header()
	h.Set("Location", s.urls.location(r, "/v2/"+rt.name+"/manifests/"+string(res.Digest)))
	h.Set("Docker-Content-Digest", string(res.Digest))
	for _, t := range res.Tags {
		h.Add("OCI-Tag", t)
	}
	if res.Subject != "" {
		h.Set("OCI-Subject", string(res.Subject))
	}
	h.Set("Content-Length", "0")
	w.WriteHeader(http.StatusCreated)
}

func (s *Server) deleteManifest(w http.ResponseWriter, r *http.Request, rt route) {
	if err := s.reg.DeleteManifest(r.Context(), rt.name, rt.ref); err != nil {
		if errors.Is(err, registry.ErrTagInvalid) {
			// No manifest has a name that is not a tag or digest. The
			// cause is kept as text: wrapping it too would match
			// TAG_INVALID first.
			err = fmt.Errorf("%w: %v", registry.ErrManifestUnknown, err)
		}
		s.writeError(w, r, err)
		return
	}
	w.Header().Set("Content-Length", "0")
	w.WriteHeader(http.StatusAccepted)
}
