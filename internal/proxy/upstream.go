package proxy

import (
	"cmp"
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

	"github.com/cairn-registry/cairn/internal/registry"
	"github.com/opencontainers/go-digest"
	ocispec "github.com/opencontainers/image-spec/specs-go/v1"
)

// manifestAccept is every manifest type a pull-through cache asks for, as
// a client would: the upstream answers with the one it holds.
var manifestAccept = strings.Join([]string{
	ocispec.MediaTypeImageManifest,
	ocispec.MediaTypeImageIndex,
	"application/vnd.docker.distribution.manifest.v2+json",
	"application/vnd.docker.distribution.manifest.list.v2+json",
}, ", ")

// ErrUpstream wraps failures to reach the upstream or odd answers from it
// (not a plain "not found"): a cached copy may then still be served. It
// wraps registry.ErrUnavailable (503 UNAVAILABLE).
var ErrUpstream = fmt.Errorf("%w: proxy: upstream registry", registry.ErrUnavailable)

// errNotFound is the upstream's 404 for a manifest or blob.
var errNotFound = errors.New("proxy: not found upstream")

// upstream talks to one upstream registry as a client would: Basic
// credentials where it asks for them, else Bearer tokens from the token
// server its challenge names, cached per scope until they expire.
type upstream struct {
	base       *url.URL
	user, pass string
	helper     *credHelper // when set, the credentials come from it
	hc         *http.Client

	mu     sync.Mutex
	tokens map[string]bearer // by scope
	basic  bool              // the upstream challenged for Basic
}

type bearer struct {
	token   string
	expires time.Time
}

func newUpstream(base *url.URL, user, pass string, hc *http.Client) *upstream {
	return &upstream{base: base, user: user, pass: pass, hc: hc, tokens: make(map[string]bearer)}
}

// do sends a request for path with the credentials scope needs,
// authenticating once if the upstream challenges.
func (u *upstream) do(ctx context.Context, method, path, scope string, hdr http.Header) (*http.Response, error) {
	return u.send(ctx, method, u.base.JoinPath(path).String(), scope, hdr, nil, 0)
}

// authenticate answers a challenge: Basic from now on, or a token for
// scope from the realm.
func (u *upstream) authenticate(ctx context.Context, challenge, scope string) error {
	scheme, params := parseChallenge(challenge)
	switch strings.ToLower(scheme) {
	case "basic":
		if u.user == "" && u.helper == nil {
			return fmt.Errorf("%w: it asks for credentials and none are configured", ErrUpstream)
		}
		u.mu.Lock()
		u.basic = true
		u.mu.Unlock()
		return nil
	case "bearer":
	default:
		return fmt.Errorf("%w: unknown authentication challenge %q", ErrUpstream, challenge)
	}
	realm, err := url.Parse(params["realm"])
	if err != nil || realm.Host == "" {
		return fmt.Errorf("%w: bad token realm %q", ErrUpstream, params["realm"])
	}
	q := realm.Query()
	if s := params["service"]; s != "" {
		q.Set("service", s)
	}
	q.Set("scope", scope)
	realm.RawQuery = q.Encode()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, realm.String(), nil)
	if err != nil {
		return err
	}
	user, pass, err := u.credentials(ctx)
	if err != nil {
		return err
	}
	if user != "" {
		req.SetBasicAuth(user, pass)
	}
	resp, err := u.hc.Do(req)
	if err != nil {
		return fmt.Errorf("%w: token server: %w", ErrUpstream, err)
	}
	defer drain(resp)
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("%w: token server answered %s", ErrUpstream, resp.Status)
	}
	var t struct {
		Token       string `json:"token"`
		AccessToken string `json:"access_token"`
		ExpiresIn   int    `json:"expires_in"`
	}
	if err := json.NewDecoder(io.LimitReader(resp.Body, 1<<20)).Decode(&t); err != nil {
		return fmt.Errorf("%w: token server: %w", ErrUpstream, err)
	}
	tok := cmp.Or(t.Token, t.AccessToken)
	if tok == "" {
		return fmt.Errorf("%w: token server sent no token", ErrUpstream)
	}
	// The token spec's default lifetime is 60 s; leave a margin.
	life := time.Duration(max(t.ExpiresIn, 60))*time.Second - 10*time.Second
	u.mu.Lock()
	u.tokens[scope] = bearer{token: tok, expires: time.Now().Add(life)}
	u.mu.Unlock()
	return nil
}

// credentials are the configured username and password, or the
// credential helper's.
func (u *upstream) credentials(ctx context.Context) (user, pass string, err error) {
	if u.helper != nil {
		return u.helper.get(ctx, u.base.Host)
	}
	return u.user, u.pass, nil
}

// credHelper runs a Docker credential helper (distribution's proxy.exec):
// `<command> get` with the registry's host on stdin answers
// {"Username": ..., "Secret": ...}; the answer is kept for lifetime (0:
// for ever, negative: asked for every authentication).
type credHelper struct {
	command  string
	lifetime time.Duration

	mu         sync.Mutex
	user, pass string
	fetched    time.Time
}

func (h *credHelper) get(ctx context.Context, host string) (string, string, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if !h.fetched.IsZero() && h.lifetime >= 0 && (h.lifetime == 0 || time.Since(h.fetched) < h.lifetime) {
		return h.user, h.pass, nil
	}
	cmd := exec.CommandContext(ctx, h.command, "get")
	cmd.Stdin = strings.NewReader(host)
	out, err := cmd.Output()
	if err != nil {
		return "", "", fmt.Errorf("%w: credential helper %s: %w", ErrUpstream, h.command, err)
	}
	var c struct{ Username, Secret string }
	if err := json.Unmarshal(out, &c); err != nil {
		return "", "", fmt.Errorf("%w: credential helper %s: %w", ErrUpstream, h.command, err)
	}
	h.user, h.pass, h.fetched = c.Username, c.Secret, time.Now()
	return h.user, h.pass, nil
}

// parseChallenge splits a WWW-Authenticate value into its scheme and
// parameters (RFC 7235: token68-free auth-params, quoted or not).
func parseChallenge(h string) (scheme string, params map[string]string) {
	params = make(map[string]string)
	h = strings.TrimSpace(h)
	scheme, rest, _ := strings.Cut(h, " ")
	for rest = strings.TrimSpace(rest); rest != ""; {
		k, v, ok := strings.Cut(rest, "=")
		if !ok {
			break
		}
		k = strings.ToLower(strings.TrimSpace(k))
		v = strings.TrimLeft(v, " ")
		var val string
		if strings.HasPrefix(v, `"`) {
			var b strings.Builder
			i := 1
			for ; i < len(v) && v[i] != '"'; i++ {
				if v[i] == '\\' && i+1 < len(v) {
					i++
				}
				b.WriteByte(v[i])
			}
			val, rest = b.String(), v[min(i+1, len(v)):]
		} else {
			end := strings.IndexByte(v, ',')
			if end < 0 {
				end = len(v)
			}
			val, rest = strings.TrimSpace(v[:end]), v[end:]
		}
		params[k] = val
		rest = strings.TrimLeft(rest, ", ")
	}
	return scheme, params
}

func pullScope(repo string) string { return "repository:" + repo + ":pull" }

// manifestDigest asks the upstream which digest ref names now, with a
// HEAD (registries such as Docker Hub do not count those against pull
// limits).
func (u *upstream) manifestDigest(ctx context.Context, repo, ref string) (digest.Digest, error) {
	resp, err := u.do(ctx, http.MethodHead, "/v2/"+repo+"/manifests/"+ref, pullScope(repo), http.Header{"Accept": {manifestAccept}})
	if err != nil {
		return "", err
	}
	drain(resp)
	if err := statusErr(resp, "manifest "+repo+":"+ref); err != nil {
		return "", err
	}
	d, err := digest.Parse(resp.Header.Get("Docker-Content-Digest"))
	if err != nil {
		return "", fmt.Errorf("%w: HEAD of manifest %s:%s gave no digest", ErrUpstream, repo, ref)
	}
	return d, nil
}

// manifest fetches manifest ref (a tag or a digest) of repo, at most limit
// bytes, and checks it against its digest: ref's when ref is one, else
// the one the upstream declares, if any.
func (u *upstream) manifest(ctx context.Context, repo, ref string, limit int64) (content []byte, mediaType string, d digest.Digest, err error) {
	resp, err := u.do(ctx, http.MethodGet, "/v2/"+repo+"/manifests/"+ref, pullScope(repo), http.Header{"Accept": {manifestAccept}})
	if err != nil {
		return nil, "", "", err
	}
	defer drain(resp)
	if err := statusErr(resp, "manifest "+repo+":"+ref); err != nil {
		return nil, "", "", err
	}
	content, err = io.ReadAll(io.LimitReader(resp.Body, limit+1))
	if err != nil {
		return nil, "", "", fmt.Errorf("%w: reading manifest %s:%s: %w", ErrUpstream, repo, ref, err)
	}
	if int64(len(content)) > limit {
		return nil, "", "", fmt.Errorf("%w: manifest %s:%s is larger than %d bytes", ErrUpstream, repo, ref, limit)
	}
	want, err := digest.Parse(ref)
	if err != nil {
		want, _ = digest.Parse(resp.Header.Get("Docker-Content-Digest"))
	}
	d = digest.Canonical.FromBytes(content)
	if want != "" {
		if err := want.Validate(); err != nil || want.Algorithm().FromBytes(content) != want {
			return nil, "", "", fmt.Errorf("%w: manifest %s:%s does not match its digest %s", ErrUpstream, repo, ref, want)
		}
		d = want
	}
	return content, resp.Header.Get("Content-Type"), d, nil
}

// blobSize asks the upstream for blob d's size.
func (u *upstream) blobSize(ctx context.Context, repo string, d digest.Digest) (int64, error) {
	resp, err := u.do(ctx, http.MethodHead, "/v2/"+repo+"/blobs/"+d.String(), pullScope(repo), nil)
	if err != nil {
		return 0, err
	}
	drain(resp)
	if err := statusErr(resp, "blob "+d.String()); err != nil {
		return 0, err
	}
	if resp.ContentLength < 0 {
		return 0, fmt.Errorf("%w: HEAD of blob %s gave no size", ErrUpstream, d)
	}
	return resp.ContentLength, nil
}

// blob opens blob d of repo; the caller checks the bytes against d. A
// redirect to storage is followed (without our credentials, which Go's
// client drops on a change of host).
func (u *upstream) blob(ctx context.Context, repo string, d digest.Digest) (io.ReadCloser, int64, error) {
	resp, err := u.do(ctx, http.MethodGet, "/v2/"+repo+"/blobs/"+d.String(), pullScope(repo), nil)
	if err != nil {
		return nil, 0, err
	}
	if err := statusErr(resp, "blob "+d.String()); err != nil {
		drain(resp)
		return nil, 0, err
	}
	return resp.Body, resp.ContentLength, nil
}

// statusErr turns a non-200 answer into errNotFound or ErrUpstream.
func statusErr(resp *http.Response, what string) error {
	switch {
	case resp.StatusCode == http.StatusOK:
		return nil
	case resp.StatusCode == http.StatusNotFound:
		return fmt.Errorf("%w: %s", errNotFound, what)
	case resp.StatusCode == http.StatusTooManyRequests:
		return fmt.Errorf("%w: %s: rate limited (retry after %s)", ErrUpstream, what, cmp.Or(resp.Header.Get("Retry-After"), "?"))
	}
	return fmt.Errorf("%w: %s: %s", ErrUpstream, what, resp.Status)
}

// drain reads a little of what is left so the connection can be reused,
// and closes the body.
func drain(resp *http.Response) {
	io.CopyN(io.Discard, resp.Body, 64<<10)
	resp.Body.Close()
}
