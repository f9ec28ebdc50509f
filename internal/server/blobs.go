package server

import (
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"

	"github.com/opencontainers/go-digest"

	"github.com/cairn-registry/cairn/internal/registry"
)

func (s *Server) getBlob(w http.ResponseWriter, r *http.Request, rt route) {
	ctx := r.Context()
	d, err := registry.ParseDigest(rt.ref)
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	mirrored := s.mirrored(rt.name)
	var info registry.BlobInfo
	if mirrored {
		info, err = s.opts.Mirror.StatBlob(ctx, rt.name, d, r.Method == http.MethodGet)
	} else {
		info, err = s.reg.StatBlob(ctx, rt.name, d)
	}
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	size := info.Size
	noteBlob(r, size)
	h := w.Header()
	etag := `"` + string(d) + `"`
	h.Set("Docker-Content-Digest", string(d))
	h.Set("ETag", etag)
	h.Set("Accept-Ranges", "bytes")
	h.Set("Cache-Control", "max-age=31536000")
	if inm := r.Header.Get("If-None-Match"); inm != "" && (inm == etag || inm == string(d)) {
		w.WriteHeader(http.StatusNotModified)
		return
	}
	start, length, partial, ok := parseRange(r.Header.Get("Range"), size)
	if !ok {
		h.Set("Content-Range", "bytes */"+strconv.FormatInt(size, 10))
		writeErrorBody(w, http.StatusRequestedRangeNotSatisfiable, apiError{
			Code: "RANGE_INVALID", Message: fmt.Sprintf("range %q not satisfiable for %d bytes", r.Header.Get("Range"), size),
		})
		return
	}
	// Only a GET is redirected: a HEAD costs cairn no bytes, and clients
	// read its Docker-Content-Digest and length from cairn. Conditional and
	// unsatisfiable requests were answered above, by cairn's ETag and size;
	// a Range goes with the client to the store, which honours it.
	if r.Method == http.MethodGet && s.redirect(w, r, d, info, start) {
		return
	}
	h.Set("Content-Type", "application/octet-stream")
	h.Set("Content-Length", strconv.FormatInt(length, 10))
	status := http.StatusOK
	if partial {
		status = http.StatusPartialContent
		h.Set("Content-Range", fmt.Sprintf("bytes %d-%d/%d", start, start+length-1, size))
	}
	if r.Method == http.MethodHead {
		w.WriteHeader(status)
		return
	}
	var rc io.ReadCloser
	if mirrored {
		rc, err = s.opts.Mirror.OpenBlob(ctx, rt.name, d, info, start)
	} else {
		rc, err = s.reg.OpenBlob(ctx, d, info, start)
		if errors.Is(err, registry.ErrBlobUnknown) {
			s.reg.ForgetBlob(ctx, rt.name, d)
		}
	}
	if err != nil {
		// The error body is not the blob: its length and range must not
		// be announced (a client would read the error as a cut blob), nor
		// its validators and year-long freshness (a shared cache would
		// keep the error, or confirm it on revalidation).
		for _, k := range []string{"Content-Length", "Content-Range", "Content-Type", "ETag", "Cache-Control", "Accept-Ranges", "Docker-Content-Digest"} {
			h.Del(k)
		}
		h.Set("Cache-Control", "no-store")
		s.writeError(w, r, err)
		return
	}
	defer rc.Close()
	w.WriteHeader(status)
	// A failure now can only cut the response short; the client sees a
	// length mismatch. io.CopyN keeps sendfile for file-backed readers.
	if _, err := io.CopyN(w, rc, length); err != nil {
		s.log.DebugContext(ctx, "blob response cut short", "digest", d, "err", err)
	}
}

// redirect answers 307 with the URL the blob may be fetched from without
// cairn, and reports whether it did. A URL that cannot be made is logged and
// the blob served by cairn: the client still gets its bytes.
func (s *Server) redirect(w http.ResponseWriter, r *http.Request, d digest.Digest, info registry.BlobInfo, start int64) bool {
	u, err := s.reg.BlobRedirectURL(r.Context(), d, info, start)
	if err != nil {
		s.log.WarnContext(r.Context(), "blob redirect: cannot sign a URL; serving the blob", "digest", d, "err", err)
		if s.opts.Metrics != nil {
			s.opts.Metrics.BlobRedirect(false)
		}
		return false
	}
	if u == "" {
		return false
	}
	if s.opts.Metrics != nil {
		s.opts.Metrics.BlobRedirect(true)
	}
	// http.Redirect would add an HTML body; a client needs only Location.
	w.Header().Set("Location", u)
	w.Header().Set("Content-Length", "0")
	// The URL expires: a cache must not keep the redirect for the year the
	// blob's own Cache-Control allows.
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(http.StatusTemporaryRedirect)
	return true
}

// parseRange interprets a Range header against a blob of size bytes. It
// returns the span to send, whether it is partial, and ok=false when the
// range cannot be satisfied. A header cairn does not serve as a range
// (several ranges, another unit, bad syntax) gets the whole blob, as RFC 9110
// allows.
func parseRange(header string, size int64) (start, length int64, partial, ok bool) {
	spec, found := strings.CutPrefix(header, "bytes=")
	if header == "" || !found || strings.Contains(spec, ",") {
		return 0, size, false, true
	}
	first, last, found := strings.Cut(strings.TrimSpace(spec), "-")
	if !found {
		return 0, size, false, true
	}
	if first == "" {
		// Suffix range: the last n bytes.
		n, err := strconv.ParseInt(last, 10, 64)
		if err != nil || n < 0 {
			return 0, size, false, true
		}
		if n == 0 {
			return 0, 0, false, false
		}
		if size == 0 {
			// Satisfiable (RFC 9110, 14.1.1) yet no bytes to name in a
			// Content-Range: answer with the whole, empty blob.
			return 0, 0, false, true
		}
		n = min(n, size)
		return size - n, n, true, true
	}
	a, err := strconv.ParseInt(first, 10, 64)
	if err != nil || a < 0 {
		return 0, size, false, true
	}
	if a >= size {
		return 0, 0, false, false
	}
	b := size - 1
	if last != "" {
		b, err = strconv.ParseInt(last, 10, 64)
		if err != nil {
			return 0, size, false, true
		}
		if b < a {
			// An inverted range names no bytes: 416, as net/http answers.
			return 0, 0, false, false
		}
		b = min(b, size-1)
	}
	return a, b - a + 1, true, true
}

func (s *Server) deleteBlob(w http.ResponseWriter, r *http.Request, rt route) {
	d, err := registry.ParseDigest(rt.ref)
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	if err := s.reg.DeleteBlob(r.Context(), rt.name, d); err != nil {
		s.writeError(w, r, err)
		return
	}
	w.Header().Set("Content-Length", "0")
	w.WriteHeader(http.StatusAccepted)
}
