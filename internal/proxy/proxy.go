// Package proxy is the remote side of a pull-through cache (distribution's
// proxy section): it reads manifests and blobs from the remote registry,
// authenticating as the remote asks (Basic, or Bearer tokens from its token
// server) with the configured username and password or a Docker credential
// helper. The server stores what it reads, so later pulls are local.
package proxy

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os/exec"
	"strings"
	"sync"
	"time"

	"github.com/google/go-containerregistry/pkg/authn"
	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/remote/transport"
	"github.com/opencontainers/go-digest"
)

// Options configure the remote.
type Options struct {
	// RemoteURL is the remote registry (https://registry-1.docker.io).
	RemoteURL string
	// Username and Password authenticate to it.
	Username, Password string
	// ExecCommand, when set, is a Docker credential helper run as
	// `ExecCommand get` with the remote's host on stdin; its answer is
	// reused for ExecLifetime (nil: for ever; 0: run for every request).
	ExecCommand  string
	ExecLifetime *time.Duration
	// Transport carries the requests (default http.DefaultTransport).
	Transport http.RoundTripper
}

// Remote reads from the remote registry.
type Remote struct {
	host     string
	insecure bool
	auth     authn.Authenticator
	tr       http.RoundTripper
}

// ErrNotFound: the remote has no such manifest or blob.
var ErrNotFound = errors.New("proxy: not found at the remote")

// New returns the remote of o.
func New(o Options) (*Remote, error) {
	u, err := url.Parse(o.RemoteURL)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return nil, fmt.Errorf("proxy: remoteurl %q is not an http or https URL", o.RemoteURL)
	}
	r := &Remote{host: u.Host, insecure: u.Scheme == "http", auth: authn.Anonymous, tr: o.Transport}
	if r.tr == nil {
		r.tr = http.DefaultTransport
	}
	switch {
	case o.ExecCommand != "":
		r.auth = &helper{command: o.ExecCommand, server: u.Host, lifetime: o.ExecLifetime}
	case o.Username != "" || o.Password != "":
		r.auth = &authn.Basic{Username: o.Username, Password: o.Password}
	}
	return r, nil
}

func (r *Remote) options(ctx context.Context) []remote.Option {
	return []remote.Option{remote.WithContext(ctx), remote.WithAuth(r.auth), remote.WithTransport(r.tr)}
}

func (r *Remote) repository(repo string) (name.Repository, error) {
	var opts []name.Option
	if r.insecure {
		opts = append(opts, name.Insecure)
	}
	return name.NewRepository(r.host+"/"+repo, opts...)
}

func (r *Remote) reference(repo, ref string) (name.Reference, error) {
	rp, err := r.repository(repo)
	if err != nil {
		return nil, err
	}
	if strings.Contains(ref, ":") {
		return rp.Digest(ref), nil
	}
	return rp.Tag(ref), nil
}

// Manifest returns the manifest repo:ref names at the remote, its media
// type and digest.
func (r *Remote) Manifest(ctx context.Context, repo, ref string) ([]byte, string, digest.Digest, error) {
	nr, err := r.reference(repo, ref)
	if err != nil {
		return nil, "", "", err
	}
	desc, err := remote.Get(nr, r.options(ctx)...)
	if err != nil {
		return nil, "", "", wrap(err)
	}
	return desc.Manifest, string(desc.MediaType), digest.Digest(desc.Digest.String()), nil
}

// ManifestDigest returns the digest repo:ref names at the remote (a HEAD).
func (r *Remote) ManifestDigest(ctx context.Context, repo, ref string) (digest.Digest, error) {
	nr, err := r.reference(repo, ref)
	if err != nil {
		return "", err
	}
	desc, err := remote.Head(nr, r.options(ctx)...)
	if err != nil {
		return "", wrap(err)
	}
	return digest.Digest(desc.Digest.String()), nil
}

// Blob opens blob d of repo at the remote and returns its size.
func (r *Remote) Blob(ctx context.Context, repo string, d digest.Digest) (io.ReadCloser, int64, error) {
	rp, err := r.repository(repo)
	if err != nil {
		return nil, 0, err
	}
	l, err := remote.Layer(rp.Digest(d.String()), r.options(ctx)...)
	if err != nil {
		return nil, 0, wrap(err)
	}
	size, err := l.Size()
	if err != nil {
		return nil, 0, wrap(err)
	}
	rc, err := l.Compressed()
	if err != nil {
		return nil, 0, wrap(err)
	}
	return rc, size, nil
}

// wrap marks the remote's 404s as ErrNotFound.
func wrap(err error) error {
	var te *transport.Error
	if errors.As(err, &te) && te.StatusCode == http.StatusNotFound {
		return fmt.Errorf("%w: %v", ErrNotFound, err)
	}
	return fmt.Errorf("proxy: %w", err)
}

// helper runs a Docker credential helper (`<command> get`, the server on
// stdin, {"Username": ..., "Secret": ...} on stdout).
type helper struct {
	command, server string
	lifetime        *time.Duration

	mu      sync.Mutex
	cached  *authn.AuthConfig
	fetched time.Time
}

func (h *helper) Authorization() (*authn.AuthConfig, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.cached != nil && (h.lifetime == nil || time.Since(h.fetched) < *h.lifetime) {
		return h.cached, nil
	}
	cmd := exec.Command(h.command, "get")
	cmd.Stdin = strings.NewReader(h.server)
	out, err := cmd.Output()
	if err != nil {
		return nil, fmt.Errorf("proxy: credential helper %s: %w", h.command, err)
	}
	var c struct{ Username, Secret string }
	if err := json.Unmarshal(out, &c); err != nil {
		return nil, fmt.Errorf("proxy: credential helper %s: %w", h.command, err)
	}
	h.cached, h.fetched = &authn.AuthConfig{Username: c.Username, Password: c.Secret}, time.Now()
	return h.cached, nil
}
