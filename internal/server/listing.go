package server

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"strconv"

	"github.com/opencontainers/image-spec/specs-go"
	ocispec "github.com/opencontainers/image-spec/specs-go/v1"

	"github.com/cairn-registry/cairn/internal/registry"
)

// maxPageSize caps n for tags and catalog pages.
const maxPageSize = 10000

// defaultCatalogEntries is distribution's catalog page without n, applied
// with catalog.maxentries.
const defaultCatalogEntries = 100

// pagination reads n (-1 when absent) and last.
func pagination(r *http.Request) (int, string, error) {
	q := r.URL.Query()
	n := -1
	if v := q.Get("n"); v != "" {
		var err error
		n, err = strconv.Atoi(v)
		if err != nil || n < 0 {
			return 0, "", fmt.Errorf("%w: n=%q", registry.ErrPaginationInvalid, v)
		}
		n = min(n, maxPageSize)
	}
	return n, q.Get("last"), nil
}

// setNextLink adds the RFC 5988 Link header for the page after last: a
// path under the configured prefix, as distribution writes it.
func (s *Server) setNextLink(w http.ResponseWriter, path string, n int, last string) {
	q := url.Values{"n": {strconv.Itoa(n)}, "last": {last}}
	w.Header().Set("Link", fmt.Sprintf(`<%s?%s>; rel="next"`, s.urls.path(path), q.Encode()))
}

func writeJSON(w http.ResponseWriter, contentType string, v any) {
	b, err := json.Marshal(v)
	if err != nil {
		http.Error(w, err.Error(), http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", contentType)
	w.Header().Set("Content-Length", strconv.Itoa(len(b)))
	w.WriteHeader(http.StatusOK)
	w.Write(b)
}

func (s *Server) tags(w http.ResponseWriter, r *http.Request, rt route) {
	n, last, err := pagination(r)
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	// distribution's tags.maxtags: a larger n is clamped, and the Link
	// header leads to the rest.
	if m := s.opts.MaxTags; m > 0 && n > m {
		n = m
	}
	all, err := s.reg.Tags(r.Context(), rt.name)
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	page, more := registry.Page(all, n, last)
	if more {
		s.setNextLink(w, "/v2/"+rt.name+"/tags/list", n, page[len(page)-1])
	}
	writeJSON(w, "application/json", struct {
		Name string   `json:"name"`
		Tags []string `json:"tags"`
	}{rt.name, page})
}

func (s *Server) catalog(w http.ResponseWriter, r *http.Request) {
	n, last, err := pagination(r)
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	// distribution's catalog.maxentries: without n a page of at most 100,
	// and more than the maximum is refused.
	if m := s.opts.MaxCatalogEntries; m > 0 {
		switch {
		case n > m:
			s.writeError(w, r, fmt.Errorf("%w: n=%d is more than the %d entries a page may hold", registry.ErrPaginationInvalid, n, m))
			return
		case n < 0:
			n = min(defaultCatalogEntries, m)
		}
	}
	repos, more, err := s.reg.Repositories(r.Context(), n, last)
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	if more {
		s.setNextLink(w, "/v2/_catalog", n, repos[len(repos)-1])
	}
	writeJSON(w, "application/json", struct {
		Repositories []string `json:"repositories"`
	}{repos})
}

func (s *Server) referrers(w http.ResponseWriter, r *http.Request, rt route) {
	d, err := registry.ParseDigest(rt.ref)
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	artifactType := r.URL.Query().Get("artifactType")
	descs, err := s.reg.Referrers(r.Context(), rt.name, d, artifactType)
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	if artifactType != "" {
		w.Header().Set("OCI-Filters-Applied", "artifactType")
	}
	writeJSON(w, ocispec.MediaTypeImageIndex, ocispec.Index{
		Versioned: specs.Versioned{SchemaVersion: 2},
		MediaType: ocispec.MediaTypeImageIndex,
		Manifests: descs,
	})
}
