package replicate

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"

	"github.com/opencontainers/go-digest"
	ocispec "github.com/opencontainers/image-spec/specs-go/v1"

	"github.com/cairn-registry/cairn/internal/manifest"
	"github.com/cairn-registry/cairn/internal/proxy"
)

// peer speaks the distribution API to the other registry, through the
// pull-through cache's client (its authentication, its checked manifest
// and blob reads).
type peer struct{ c *proxy.Client }

// manifestAccept is every manifest type, as a client asks.
var manifestAccept = strings.Join([]string{
	ocispec.MediaTypeImageManifest,
	ocispec.MediaTypeImageIndex,
	manifest.MediaTypeDockerManifest,
	manifest.MediaTypeDockerManifestList,
}, ", ")

// errRefused is the peer's 4xx to one request: that image fails, the pass
// goes on.
var errRefused = errors.New("refused by the peer")

// listLimit bounds a listing page's body.
const listLimit = 16 << 20

// status turns an unexpected answer into an error: ErrUpstream (the peer
// is failing: retried with backoff) for 5xx and 429, errRefused else.
func status(resp *http.Response, what string) error {
	b, _ := io.ReadAll(io.LimitReader(resp.Body, 512))
	proxy.Drain(resp)
	detail := strings.TrimSpace(string(b))
	if resp.StatusCode >= 500 || resp.StatusCode == http.StatusTooManyRequests {
		return fmt.Errorf("%w: %s: %s %s", proxy.ErrUpstream, what, resp.Status, detail)
	}
	return fmt.Errorf("%w: %s: %s %s", errRefused, what, resp.Status, detail)
}

// hasManifest asks, with a HEAD, whether repo holds manifest d.
func (p peer) hasManifest(ctx context.Context, repo string, d digest.Digest) (bool, error) {
	return p.has(ctx, "/v2/"+repo+"/manifests/"+d.String(), proxy.PullScope(repo), http.Header{"Accept": {manifestAccept}})
}

// hasBlob asks, with a HEAD, whether repo holds blob d.
func (p peer) hasBlob(ctx context.Context, repo string, d digest.Digest) (bool, error) {
	return p.has(ctx, "/v2/"+repo+"/blobs/"+d.String(), proxy.PullScope(repo), nil)
}

func (p peer) has(ctx context.Context, path, scope string, hdr http.Header) (bool, error) {
	resp, err := p.c.Do(ctx, http.MethodHead, p.c.URL(path, nil), scope, hdr, nil, 0)
	if err != nil {
		return false, err
	}
	switch resp.StatusCode {
	case http.StatusOK:
		proxy.Drain(resp)
		return true, nil
	case http.StatusNotFound:
		proxy.Drain(resp)
		return false, nil
	}
	return false, status(resp, "HEAD "+path)
}

// putManifest pushes content as ref (a tag or its digest) of repo; it
// reports whether the peer indexed the manifest's subject (the OCI-Subject
// header of a registry with the referrers API).
func (p peer) putManifest(ctx context.Context, repo, ref, mediaType string, content []byte) (subjectIndexed bool, err error) {
	path := "/v2/" + repo + "/manifests/" + ref
	body := func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(content)), nil }
	resp, err := p.c.Do(ctx, http.MethodPut, p.c.URL(path, nil), proxy.PushScope(repo), http.Header{"Content-Type": {mediaType}}, body, int64(len(content)))
	if err != nil {
		return false, err
	}
	if resp.StatusCode != http.StatusCreated {
		return false, status(resp, "PUT "+path)
	}
	proxy.Drain(resp)
	return resp.Header.Get("OCI-Subject") != "", nil
}

// startUpload opens an upload session in repo, mounting blob d from
// repository from when from is not "": mounted reports a mount that
// needs no upload, else location is the session's URL.
func (p peer) startUpload(ctx context.Context, repo string, d digest.Digest, from string) (mounted bool, location string, err error) {
	path := "/v2/" + repo + "/blobs/uploads/"
	var q url.Values
	scope := proxy.PushScope(repo)
	if from != "" {
		q = url.Values{"mount": {d.String()}, "from": {from}}
	}
	resp, err := p.c.Do(ctx, http.MethodPost, p.c.URL(path, q), scope, nil, func() (io.ReadCloser, error) { return http.NoBody, nil }, 0)
	if err != nil {
		return false, "", err
	}
	switch resp.StatusCode {
	case http.StatusCreated:
		proxy.Drain(resp)
		return true, "", nil
	case http.StatusAccepted:
		proxy.Drain(resp)
		loc, err := resp.Request.URL.Parse(resp.Header.Get("Location"))
		if err != nil || resp.Header.Get("Location") == "" {
			return false, "", fmt.Errorf("%w: POST %s: no usable Location", errRefused, path)
		}
		return false, loc.String(), nil
	}
	return false, "", status(resp, "POST "+path)
}

// finishUpload sends blob d (size bytes, opened by open) to the session at
// location in one PUT.
func (p peer) finishUpload(ctx context.Context, repo, location string, d digest.Digest, size int64, open func() (io.ReadCloser, error)) error {
	u, err := url.Parse(location)
	if err != nil {
		return fmt.Errorf("%w: upload location %q: %w", errRefused, location, err)
	}
	q := u.Query()
	q.Set("digest", d.String())
	u.RawQuery = q.Encode()
	resp, err := p.c.Do(ctx, http.MethodPut, u.String(), proxy.PushScope(repo), http.Header{"Content-Type": {"application/octet-stream"}}, open, size)
	if err != nil {
		return err
	}
	if resp.StatusCode != http.StatusCreated {
		return status(resp, "PUT blob "+d.String()+" to "+repo)
	}
	proxy.Drain(resp)
	return nil
}

// tags lists repo's tags on the peer, following its pages; a repository
// the peer does not know has none.
func (p peer) tags(ctx context.Context, repo string) ([]string, error) {
	var out []string
	err := p.pages(ctx, p.c.URL("/v2/"+repo+"/tags/list", url.Values{"n": {"1000"}}), proxy.PullScope(repo), func(body []byte) error {
		var page struct {
			Tags []string `json:"tags"`
		}
		if err := json.Unmarshal(body, &page); err != nil {
			return fmt.Errorf("%w: tags of %s: %w", errRefused, repo, err)
		}
		out = append(out, page.Tags...)
		return nil
	})
	return out, err
}

// catalog lists the peer's repositories, following its pages.
func (p peer) catalog(ctx context.Context) ([]string, error) {
	var out []string
	err := p.pages(ctx, p.c.URL("/v2/_catalog", url.Values{"n": {"1000"}}), proxy.CatalogScope, func(body []byte) error {
		var page struct {
			Repositories []string `json:"repositories"`
		}
		if err := json.Unmarshal(body, &page); err != nil {
			return fmt.Errorf("%w: catalog: %w", errRefused, err)
		}
		out = append(out, page.Repositories...)
		return nil
	})
	if errors.Is(err, errNotFoundPage) {
		return nil, fmt.Errorf("%w: the peer has no catalog (GET /v2/_catalog): list the repositories by name", errRefused)
	}
	return out, err
}

var errNotFoundPage = errors.New("not found")

// pages GETs rawURL and each next page its Link header names, handing
// each body to f; a first page that is 404 ends with no pages when scope
// is a repository's (the repository is unknown), else errNotFoundPage.
func (p peer) pages(ctx context.Context, rawURL, scope string, f func([]byte) error) error {
	for first := true; rawURL != ""; first = false {
		resp, err := p.c.Do(ctx, http.MethodGet, rawURL, scope, nil, nil, 0)
		if err != nil {
			return err
		}
		if resp.StatusCode == http.StatusNotFound && first {
			proxy.Drain(resp)
			if strings.HasPrefix(scope, "repository:") {
				return nil
			}
			return errNotFoundPage
		}
		if resp.StatusCode != http.StatusOK {
			return status(resp, "GET "+resp.Request.URL.Path)
		}
		body, err := io.ReadAll(io.LimitReader(resp.Body, listLimit))
		proxy.Drain(resp)
		if err != nil {
			return fmt.Errorf("%w: %s: %w", proxy.ErrUpstream, resp.Request.URL.Path, err)
		}
		if err := f(body); err != nil {
			return err
		}
		rawURL = nextLink(resp)
	}
	return nil
}

// nextLink is the absolute URL of the rel="next" Link of resp, or "".
func nextLink(resp *http.Response) string {
	for _, l := range resp.Header.Values("Link") {
		target, params, ok := strings.Cut(l, ";")
		if !ok || !strings.Contains(params, `rel="next"`) {
			continue
		}
		target = strings.Trim(strings.TrimSpace(target), "<>")
		u, err := resp.Request.URL.Parse(target)
		if err != nil {
			return ""
		}
		return u.String()
	}
	return ""
}

// referrers lists the manifests of repo on the peer whose subject is d:
// from the referrers API, else (a 404: a registry without it) from the
// tag schema's index.
func (p peer) referrers(ctx context.Context, repo string, d digest.Digest) ([]ocispec.Descriptor, error) {
	path := "/v2/" + repo + "/referrers/" + d.String()
	resp, err := p.c.Do(ctx, http.MethodGet, p.c.URL(path, nil), proxy.PullScope(repo), http.Header{"Accept": {ocispec.MediaTypeImageIndex}}, nil, 0)
	if err != nil {
		return nil, err
	}
	var body []byte
	switch resp.StatusCode {
	case http.StatusOK:
		body, err = io.ReadAll(io.LimitReader(resp.Body, listLimit))
		proxy.Drain(resp)
		if err != nil {
			return nil, fmt.Errorf("%w: GET %s: %w", proxy.ErrUpstream, path, err)
		}
	case http.StatusNotFound:
		proxy.Drain(resp)
		// A HEAD first: most subjects have no referrers, and registries
		// that limit pulls count manifest GETs, not HEADs.
		fd, err := p.c.ManifestDigest(ctx, repo, referrerTag(d))
		if proxy.IsNotFound(err) {
			return nil, nil
		}
		ref := referrerTag(d)
		if err == nil {
			ref = fd.String()
		}
		body, _, _, err = p.c.Manifest(ctx, repo, ref, listLimit)
		if proxy.IsNotFound(err) {
			return nil, nil
		}
		if err != nil {
			return nil, err
		}
	default:
		return nil, status(resp, "GET "+path)
	}
	var idx ocispec.Index
	if err := json.Unmarshal(body, &idx); err != nil {
		return nil, fmt.Errorf("%w: referrers of %s in %s: %w", errRefused, d, repo, err)
	}
	return idx.Manifests, nil
}

// addFallbackReferrer adds desc to subject's tag-schema index on a peer
// without the referrers API (OCI distribution 1.1's fallback), as a client
// pushing a referrer there does.
func (p peer) addFallbackReferrer(ctx context.Context, repo string, subject digest.Digest, desc ocispec.Descriptor, limit int64) error {
	tag := referrerTag(subject)
	idx := ocispec.Index{MediaType: ocispec.MediaTypeImageIndex, Manifests: []ocispec.Descriptor{}}
	idx.SchemaVersion = 2
	content, _, _, err := p.c.Manifest(ctx, repo, tag, limit)
	switch {
	case proxy.IsNotFound(err):
	case err != nil:
		return err
	default:
		if err := json.Unmarshal(content, &idx); err != nil {
			return fmt.Errorf("%w: the referrers tag %s of %s: %w", errRefused, tag, repo, err)
		}
	}
	for _, m := range idx.Manifests {
		if m.Digest == desc.Digest {
			return nil
		}
	}
	idx.Manifests = append(idx.Manifests, desc)
	b, err := json.Marshal(idx)
	if err != nil {
		return err
	}
	_, err = p.putManifest(ctx, repo, tag, ocispec.MediaTypeImageIndex, b)
	return err
}
