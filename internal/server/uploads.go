package server

import (
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"

	"github.com/opencontainers/go-digest"

	"github.com/cairn-registry/cairn/internal/registry"
)

func uploadLocation(name, id string) string { return "/v2/" + name + "/blobs/uploads/" + id }

func blobLocation(name string, d digest.Digest) string { return "/v2/" + name + "/blobs/" + string(d) }

// rangeHeader is the Range an upload of size bytes reports: the inclusive
// span held, "0-0" when empty, as distribution and clients expect.
func rangeHeader(size int64) string {
	if size == 0 {
		return "0-0"
	}
	return "0-" + strconv.FormatInt(size-1, 10)
}

func (s *Server) startUpload(w http.ResponseWriter, r *http.Request, rt route) {
	ctx := r.Context()
	q := r.URL.Query()
	if mount := q.Get("mount"); mount != "" {
		d, err := registry.ParseDigest(mount)
		if err != nil {
			s.writeError(w, r, err)
			return
		}
		mounted, err := s.mount(r, rt, d)
		if err != nil {
			s.writeError(w, r, err)
			return
		}
		if mounted {
			s.blobCreated(w, rt.name, d)
			return
		}
		// Not mountable: the client uploads it in the session opened below.
	}
	id, err := s.reg.StartUpload(ctx, rt.name)
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	if dg := q.Get("digest"); dg != "" {
		// Monolithic upload: the whole blob is the POST body.
		d, err := registry.ParseDigest(dg)
		if err == nil {
			_, err = s.reg.FinishUpload(ctx, rt.name, id, d, r.Body, 0)
		}
		if err != nil {
			s.reg.CancelUpload(ctx, rt.name, id)
			s.writeError(w, r, err)
			return
		}
		s.blobCreated(w, rt.name, d)
		return
	}
	s.uploadAccepted(w, rt.name, id, 0, http.StatusAccepted)
}

// mount links blob d into rt's repository from a source the caller may
// pull (see mountSources) and reports whether it did.
func (s *Server) mount(r *http.Request, rt route, d digest.Digest) (bool, error) {
	from, anywhere := mountSources(r, rt.grant)
	if anywhere {
		return s.reg.MountBlob(r.Context(), rt.name, d, "")
	}
	for _, src := range from {
		ok, err := s.reg.MountBlob(r.Context(), rt.name, d, src)
		if ok || err != nil {
			return ok, err
		}
	}
	return false, nil
}

func (s *Server) blobCreated(w http.ResponseWriter, name string, d digest.Digest) {
	h := w.Header()
	h.Set("Location", blobLocation(name, d))
	h.Set("Docker-Content-Digest", string(d))
	h.Set("Content-Length", "0")
	w.WriteHeader(http.StatusCreated)
}

func (s *Server) uploadAccepted(w http.ResponseWriter, name, id string, size int64, status int) {
	h := w.Header()
	h.Set("Location", uploadLocation(name, id))
	h.Set("Range", rangeHeader(size))
	h.Set("Docker-Upload-UUID", id)
	h.Set("Content-Length", "0")
	w.WriteHeader(status)
}

func (s *Server) uploadStatus(w http.ResponseWriter, r *http.Request, rt route) {
	size, err := s.reg.UploadSize(r.Context(), rt.name, rt.ref)
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	s.uploadAccepted(w, rt.name, rt.ref, size, http.StatusNoContent)
}

// chunkStart reads the Content-Range of a chunk: the offset it starts at,
// -1 when absent (a streamed chunk).
func chunkStart(r *http.Request) (int64, error) {
	cr := r.Header.Get("Content-Range")
	if cr == "" {
		return -1, nil
	}
	cr = strings.TrimPrefix(strings.TrimPrefix(cr, "bytes="), "bytes ")
	if i := strings.IndexByte(cr, '/'); i >= 0 {
		cr = cr[:i]
	}
	first, last, ok := strings.Cut(cr, "-")
	a, err1 := strconv.ParseInt(first, 10, 64)
	b, err2 := strconv.ParseInt(last, 10, 64)
	if !ok || err1 != nil || err2 != nil || a < 0 || b < a {
		return 0, fmt.Errorf("%w: malformed Content-Range %q", errBadRange, r.Header.Get("Content-Range"))
	}
	if r.ContentLength >= 0 && r.ContentLength != b-a+1 {
		return 0, fmt.Errorf("%w: Content-Range %q does not match Content-Length %d", errBadRange, r.Header.Get("Content-Range"), r.ContentLength)
	}
	return a, nil
}

func (s *Server) patchUpload(w http.ResponseWriter, r *http.Request, rt route) {
	ctx := r.Context()
	start, err := chunkStart(r)
	if err != nil {
		s.writeRangeError(w, r, rt, err)
		return
	}
	size, err := s.reg.AppendUpload(ctx, rt.name, rt.ref, r.Body, start)
	if err != nil {
		s.writeRangeError(w, r, rt, err)
		return
	}
	s.uploadAccepted(w, rt.name, rt.ref, size, http.StatusAccepted)
}

// writeRangeError answers a failed chunk; a 416 carries the upload's
// Location and current Range so the client can resume.
func (s *Server) writeRangeError(w http.ResponseWriter, r *http.Request, rt route, err error) {
	if isRangeError(err) {
		if size, serr := s.reg.UploadSize(r.Context(), rt.name, rt.ref); serr == nil {
			w.Header().Set("Location", uploadLocation(rt.name, rt.ref))
			w.Header().Set("Range", rangeHeader(size))
		} else {
			err = serr
		}
	}
	s.writeError(w, r, err)
}

func (s *Server) finishUpload(w http.ResponseWriter, r *http.Request, rt route) {
	ctx := r.Context()
	d, err := registry.ParseDigest(r.URL.Query().Get("digest"))
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	var body io.Reader
	start := int64(-1)
	if r.ContentLength != 0 {
		if start, err = chunkStart(r); err != nil {
			s.writeRangeError(w, r, rt, err)
			return
		}
		body = r.Body
	}
	if _, err := s.reg.FinishUpload(ctx, rt.name, rt.ref, d, body, start); err != nil {
		s.writeRangeError(w, r, rt, err)
		return
	}
	s.blobCreated(w, rt.name, d)
}

func (s *Server) cancelUpload(w http.ResponseWriter, r *http.Request, rt route) {
	if err := s.reg.CancelUpload(r.Context(), rt.name, rt.ref); err != nil {
		s.writeError(w, r, err)
		return
	}
	w.Header().Set("Content-Length", "0")
	w.WriteHeader(http.StatusNoContent)
}
