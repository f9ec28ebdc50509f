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
			noteMount(r)
			s.blobCreated(w, r, rt.name, d)
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
		var size int64
		if err == nil {
			size, err = s.reg.FinishUpload(ctx, rt.name, id, d, r.Body, 0)
		}
		if err != nil {
			s.reg.CancelUpload(ctx, rt.name, id)
			s.writeError(w, r, err)
			return
		}
		noteBlob(r, size)
		s.blobCreated(w, r, rt.name, d)
		return
	}
	s.uploadAccepted(w, r, rt.name, id, 0, http.StatusAccepted)
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

func (s *Server) blobCreated(w http.ResponseWriter, r *http.Request, name string, d digest.Digest) {
	h := w.Header()
	h.Set("Location", s.urls.location(r, blobLocation(name, d)))
	h.Set("Docker-Content-Digest", string(d))
	h.Set("Content-Length", "0")
	w.WriteHeader(http.StatusCreated)
}

func (s *Server) uploadAccepted(w http.ResponseWriter, r *http.Request, name, id string, size int64, status int) {
	h := w.Header()
	h.Set("Location", s.urls.location(r, uploadLocation(name, id)))
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
	s.uploadAccepted(w, r, rt.name, rt.ref, size, http.StatusNoContent)
}

// chunkStart reads the Content-Range of a chunk: the offset it starts at,
// -1 when absent (a streamed chunk). A chunk without Content-Length gets
// its body held to the length the range names.
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
	if !ok || err1 != nil || err2 != nil || a < 0 || b < a || b-a+1 <= 0 {
		return 0, fmt.Errorf("%w: malformed Content-Range %q", errBadRange, r.Header.Get("Content-Range"))
	}
	if r.ContentLength < 0 {
		r.Body = &rangedBody{ReadCloser: r.Body, left: b - a + 1}
	} else if r.ContentLength != b-a+1 {
		return 0, fmt.Errorf("%w: Content-Range %q does not match Content-Length %d", errBadRange, r.Header.Get("Content-Range"), r.ContentLength)
	}
	return a, nil
}

// rangedBody fails a chunk sent without Content-Length whose body is
// shorter or longer than its Content-Range, so that the upload never takes
// it as if it were the range: the client learns from the 416's Range how
// much was kept, as after a body cut short.
type rangedBody struct {
	io.ReadCloser
	left int64 // bytes the range still expects
}

func (b *rangedBody) Read(p []byte) (int, error) {
	if b.left == 0 {
		// The range is complete: only the end of the body may follow.
		var one [1]byte
		if n, err := io.ReadFull(b.ReadCloser, one[:]); n == 0 {
			return 0, err
		}
		return 0, fmt.Errorf("%w: body longer than its Content-Range", errBadRange)
	}
	if int64(len(p)) > b.left {
		p = p[:b.left]
	}
	n, err := b.ReadCloser.Read(p)
	b.left -= int64(n)
	if err == io.EOF && b.left > 0 {
		return n, fmt.Errorf("%w: body %d bytes shorter than its Content-Range", errBadRange, b.left)
	}
	return n, err
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
	s.uploadAccepted(w, r, rt.name, rt.ref, size, http.StatusAccepted)
}

// writeRangeError answers a failed chunk; a 416 carries the upload's
// Location and current Range so the client can resume.
func (s *Server) writeRangeError(w http.ResponseWriter, r *http.Request, rt route, err error) {
	if isRangeError(err) {
		if size, serr := s.reg.UploadSize(r.Context(), rt.name, rt.ref); serr == nil {
			w.Header().Set("Location", s.urls.location(r, uploadLocation(rt.name, rt.ref)))
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
	size, err := s.reg.FinishUpload(ctx, rt.name, rt.ref, d, body, start)
	if err != nil {
		s.writeRangeError(w, r, rt, err)
		return
	}
	noteBlob(r, size)
	s.blobCreated(w, r, rt.name, d)
}

func (s *Server) cancelUpload(w http.ResponseWriter, r *http.Request, rt route) {
	if err := s.reg.CancelUpload(r.Context(), rt.name, rt.ref); err != nil {
		s.writeError(w, r, err)
		return
	}
	w.Header().Set("Content-Length", "0")
	w.WriteHeader(http.StatusNoContent)
}
