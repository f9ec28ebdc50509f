package proxy

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"time"

	"github.com/opencontainers/go-digest"
)

// Remote locates another registry and says how to authenticate to it, as
// an Upstream does.
type Remote struct {
	URL                string
	Username, Password string
	// CredentialHelper and HelperLifetime are as in Upstream.
	CredentialHelper string
	HelperLifetime   time.Duration
}

// Client is the pull-through cache's upstream client offered to other
// packages (replication): the same authentication (Basic, Bearer tokens
// per scope from the challenge's realm, credential helpers), for reads
// and for writes.
type Client struct{ up *upstream }

// NewClient returns a Client for r; hc nil means a client with generous
// timeouts, as the cache's.
func NewClient(r Remote, hc *http.Client) (*Client, error) {
	base, err := url.Parse(r.URL)
	if err != nil || base.Host == "" || (base.Scheme != "http" && base.Scheme != "https") {
		return nil, fmt.Errorf("proxy: remote %q: not an http(s) URL", r.URL)
	}
	if hc == nil {
		tr := http.DefaultTransport.(*http.Transport).Clone()
		tr.ResponseHeaderTimeout = 2 * time.Minute
		hc = &http.Client{Transport: tr}
	}
	up := newUpstream(base, r.Username, r.Password, hc)
	if r.CredentialHelper != "" {
		up.helper = &credHelper{command: r.CredentialHelper, lifetime: r.HelperLifetime}
	}
	return &Client{up: up}, nil
}

// PullScope and PushScope are the token scopes of reading, and of writing,
// repository repo; CatalogScope is the catalog's.
func PullScope(repo string) string { return pullScope(repo) }

// PushScope is the scope of pushing to repo (which reads too).
func PushScope(repo string) string { return "repository:" + repo + ":pull,push" }

// CatalogScope is the scope of GET /v2/_catalog.
const CatalogScope = "registry:catalog:*"

// IsNotFound reports whether err is the remote's 404 for a manifest or blob.
func IsNotFound(err error) bool { return errors.Is(err, errNotFound) }

// URL is the absolute URL of path (such as "/v2/a/b/tags/list") on the
// remote, with query.
func (c *Client) URL(path string, query url.Values) string {
	u := c.up.base.JoinPath(path)
	u.RawQuery = query.Encode()
	return u.String()
}

// Do sends method to rawURL (absolute: URL's, or a Location the remote
// gave) with the credentials scope needs, authenticating once if the
// remote challenges. body, when not nil, opens the request body of size
// bytes; it is called again for the resend after a challenge. Transport
// failures wrap ErrUpstream; the caller reads the status.
func (c *Client) Do(ctx context.Context, method, rawURL, scope string, hdr http.Header, body func() (io.ReadCloser, error), size int64) (*http.Response, error) {
	return c.up.send(ctx, method, rawURL, scope, hdr, body, size)
}

// send is Client.Do, and upstream.do's request to its own base URL.
func (u *upstream) send(ctx context.Context, method, rawURL, scope string, hdr http.Header, body func() (io.ReadCloser, error), size int64) (*http.Response, error) {
	send := func() (*http.Response, error) {
		req, err := http.NewRequestWithContext(ctx, method, rawURL, nil)
		if err != nil {
			return nil, err
		}
		for k, v := range hdr {
			req.Header[k] = v
		}
		if err := u.authorize(ctx, req, scope); err != nil {
			return nil, err
		}
		if body != nil {
			rc, err := body()
			if err != nil {
				return nil, err
			}
			req.Body, req.ContentLength = rc, size
			if size == 0 {
				req.Body = http.NoBody
				rc.Close()
			}
		}
		resp, err := u.hc.Do(req)
		if err != nil {
			return nil, fmt.Errorf("%w: %s %s: %w", ErrUpstream, method, req.URL.Redacted(), err)
		}
		return resp, nil
	}
	resp, err := send()
	if err != nil || resp.StatusCode != http.StatusUnauthorized {
		return resp, err
	}
	challenge := resp.Header.Get("WWW-Authenticate")
	drain(resp)
	if err := u.authenticate(ctx, challenge, scope); err != nil {
		return nil, err
	}
	return send()
}

// authorize sets what the remote asked for before: a token for scope
// while it lasts, or Basic credentials.
func (u *upstream) authorize(ctx context.Context, req *http.Request, scope string) error {
	u.mu.Lock()
	tok, basic := u.tokens[scope], u.basic
	u.mu.Unlock()
	switch {
	case tok.token != "" && time.Now().Before(tok.expires):
		req.Header.Set("Authorization", "Bearer "+tok.token)
	case basic:
		user, pass, err := u.credentials(ctx)
		if err != nil {
			return err
		}
		req.SetBasicAuth(user, pass)
	}
	return nil
}

// Manifest fetches manifest ref (a tag or a digest) of repo, at most limit
// bytes, checked against its digest (ref's, else the one the remote
// declares); a 404 is IsNotFound.
func (c *Client) Manifest(ctx context.Context, repo, ref string, limit int64) (content []byte, mediaType string, d digest.Digest, err error) {
	return c.up.manifest(ctx, repo, ref, limit)
}

// ManifestDigest asks the remote, with a HEAD, which digest ref names.
func (c *Client) ManifestDigest(ctx context.Context, repo, ref string) (digest.Digest, error) {
	return c.up.manifestDigest(ctx, repo, ref)
}

// Blob opens blob d of repo, and tells its size (-1 when the remote sent
// none); the caller checks the bytes against d.
func (c *Client) Blob(ctx context.Context, repo string, d digest.Digest) (io.ReadCloser, int64, error) {
	return c.up.blob(ctx, repo, d)
}

// Drain reads a little of what is left of resp's body, so that the
// connection can be reused, and closes it.
func Drain(resp *http.Response) { drain(resp) }
