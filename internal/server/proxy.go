package server

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"

	"github.com/opencontainers/go-digest"

	"github.com/cairn-registry/cairn/internal/notify"
	"github.com/cairn-registry/cairn/internal/registry"
)

// Upstream is the remote registry of a pull-through cache (proxy.Remote
// implements it).
type Upstream interface {
	Manifest(ctx context.Context, repo, ref string) (content []byte, mediaType string, d digest.Digest, err error)
	ManifestDigest(ctx context.Context, repo, ref string) (digest.Digest, error)
	Blob(ctx context.Context, repo string, d digest.Digest) (io.ReadCloser, int64, error)
}

// errProxyPush answers writes to a pull-through cache, as distribution does.
var errProxyPush = fmt.Errorf("%w: this registry is a pull-through cache: push, delete and upload are not supported", registry.ErrUnsupported)

// proxyManifest brings the manifest rt names from the upstream into
// storage when it is missing or, for a tag, when the upstream's tag names
// another manifest, so that the local read that follows serves it. A
// digest is immutable: present locally, it is not asked for. When the
// upstream cannot be reached a local copy is served; a manifest neither has
// is MANIFEST_UNKNOWN from the local read.
func (s *Server) proxyManifest(r *http.Request, rt route) {
	ctx := r.Context()
	tag, _, perr := registry.ParseReference(rt.ref)
	if perr != nil {
		return // the local read reports it
	}
	isTag := tag != ""
	local, err := s.reg.StatManifest(ctx, rt.name, rt.ref)
	if err == nil && !isTag {
		return
	}
	if err != nil && !errors.Is(err, registry.ErrManifestUnknown) && !errors.Is(err, registry.ErrNameUnknown) {
		return // the local read reports it
	}
	if err == nil {
		remote, rerr := s.opts.Proxy.ManifestDigest(ctx, rt.name, rt.ref)
		if rerr != nil || remote == local.Digest {
			if rerr != nil {
				s.log.WarnContext(ctx, "proxy: upstream tag not checked; serving the cached manifest", "repo", rt.name, "tag", rt.ref, "err", rerr)
			}
			return
		}
	}
	content, mt, d, err := s.opts.Proxy.Manifest(ctx, rt.name, rt.ref)
	if err != nil {
		s.log.DebugContext(ctx, "proxy: manifest not fetched", "repo", rt.name, "ref", rt.ref, "err", err)
		return
	}
	if _, err := s.reg.PutManifest(ctx, rt.name, rt.ref, mt, content, nil); err != nil {
		s.log.WarnContext(ctx, "proxy: manifest not stored", "repo", rt.name, "ref", rt.ref, "digest", d, "err", err)
	}
}

// proxyBlob answers a blob storage does not have from the upstream, storing
// it while it streams to the client (a HEAD only asks its size). It reports
// false when the upstream does not have it either.
func (s *Server) proxyBlob(w http.ResponseWriter, r *http.Request, rt route, d digest.Digest) bool {
	ctx := r.Context()
	rc, size, err := s.opts.Proxy.Blob(ctx, rt.name, d)
	if err != nil {
		s.log.DebugContext(ctx, "proxy: blob not fetched", "repo", rt.name, "digest", d, "err", err)
		return false
	}
	defer rc.Close()
	h := w.Header()
	h.Set("Docker-Content-Digest", string(d))
	h.Set("Content-Type", "application/octet-stream")
	h.Set("Content-Length", strconv.FormatInt(size, 10))
	if r.Method == http.MethodHead {
		w.WriteHeader(http.StatusOK)
		return true
	}
	id, err := s.reg.StartUpload(ctx, rt.name)
	if err != nil {
		s.writeError(w, r, err)
		return true
	}
	// The client gets the bytes as the upload reads them; the blob is
	// committed only if they hash to d (a client checks that too).
	w.WriteHeader(http.StatusOK)
	s.event(r, rt, notify.ActionPull, s.blobTarget(r, rt, d, size))
	if _, err := s.reg.FinishUpload(ctx, rt.name, id, d, io.TeeReader(rc, w), 0); err != nil {
		s.reg.CancelUpload(context.WithoutCancel(ctx), rt.name, id)
		s.log.WarnContext(ctx, "proxy: blob not stored", "repo", rt.name, "digest", d, "err", err)
	}
	return true
}
