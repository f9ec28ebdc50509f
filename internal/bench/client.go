package bench

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"time"
)

// client speaks the distribution API to one repository of one registry.
type client struct {
	base *url.URL
	repo string
	http *http.Client
}

func newClient(rawURL, repo string, concurrency int) (*client, error) {
	u, err := url.Parse(strings.TrimRight(rawURL, "/"))
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return nil, fmt.Errorf("bench: invalid registry URL %q: want http(s)://host[:port]", rawURL)
	}
	tr := &http.Transport{
		Proxy:       http.ProxyFromEnvironment,
		DialContext: (&net.Dialer{Timeout: 10 * time.Second, KeepAlive: 30 * time.Second}).DialContext,
		// Every manifest client keeps its connection: the benchmark
		// measures the registry, not TCP handshakes.
		MaxIdleConns:        2 * concurrency,
		MaxIdleConnsPerHost: 2 * concurrency,
		IdleConnTimeout:     90 * time.Second,
		// Blobs are incompressible and pulls must count their real bytes.
		DisableCompression: true,
		WriteBufferSize:    256 << 10,
		ReadBufferSize:     256 << 10,
	}
	return &client{base: u, repo: repo, http: &http.Client{Transport: tr}}, nil
}

func (c *client) close() { c.http.CloseIdleConnections() }

func (c *client) url(path string) string { return c.base.String() + path }

func (c *client) do(ctx context.Context, method, target string, body io.Reader, hdr http.Header) (*http.Response, error) {
	req, err := http.NewRequestWithContext(ctx, method, target, body)
	if err != nil {
		return nil, err
	}
	for k, vs := range hdr {
		req.Header[k] = vs
	}
	resp, err := c.http.Do(req)
	if err != nil {
		return nil, fmt.Errorf("%s %s: %w", method, req.URL.Path, err)
	}
	return resp, nil
}

// expect checks resp's status against want (the first is the one the spec
// names; others are tolerated variants), and on a mismatch closes resp and
// returns an error carrying the registry's (OCI) error body on one line.
func expect(resp *http.Response, want ...int) error {
	if slices.Contains(want, resp.StatusCode) {
		return nil
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(io.LimitReader(resp.Body, 512))
	msg := strings.Join(strings.Fields(string(b)), " ")
	return fmt.Errorf("%s %s: status %d, want %d: %s", resp.Request.Method, resp.Request.URL.Path, resp.StatusCode, want[0], msg)
}

// drain reads what is left of a small body so the connection is reused.
func drain(resp *http.Response) {
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 1<<20))
	resp.Body.Close()
}

func (c *client) ping(ctx context.Context) error {
	resp, err := c.do(ctx, http.MethodGet, c.url("/v2/"), nil, nil)
	if err != nil {
		return fmt.Errorf("registry not reachable: %w", err)
	}
	if resp.StatusCode == http.StatusUnauthorized {
		drain(resp)
		return fmt.Errorf("registry %s requires authentication, which the bench does not support", c.base)
	}
	if err := expect(resp, http.StatusOK); err != nil {
		return err
	}
	drain(resp)
	return nil
}

// location resolves an upload Location header against the request it
// answered (registries send both absolute and relative ones).
func location(resp *http.Response) (*url.URL, error) {
	loc := resp.Header.Get("Location")
	if loc == "" {
		return nil, fmt.Errorf("%s %s: no Location header", resp.Request.Method, resp.Request.URL.Path)
	}
	u, err := resp.Request.URL.Parse(loc)
	if err != nil {
		return nil, fmt.Errorf("%s %s: bad Location %q: %w", resp.Request.Method, resp.Request.URL.Path, loc, err)
	}
	return u, nil
}

// withDigest adds ?digest= to an upload URL, keeping its own query (some
// registries carry upload state there).
func withDigest(u *url.URL, dg string) string {
	v := *u
	q := v.Query()
	q.Set("digest", dg)
	v.RawQuery = q.Encode()
	return v.String()
}

func digestOf(b []byte) string {
	sum := sha256.Sum256(b)
	return "sha256:" + hex.EncodeToString(sum[:])
}

type pushMode string

const (
	pushChunked    pushMode = "chunked-stream"
	pushPatches    pushMode = "chunked PATCHes"
	pushMonolithic pushMode = "monolithic PUT"
	pushImage      pushMode = "monolithic + manifest"
)

// streamReader hides bytes.Reader's length and WriterTo, so net/http sends
// the body with chunked transfer-encoding, as a streaming client does.
type streamReader struct{ r io.Reader }

func (s streamReader) Read(p []byte) (int, error) { return s.r.Read(p) }

func octetStream() http.Header {
	return http.Header{"Content-Type": {"application/octet-stream"}}
}

// pushBlob uploads data (whose digest is dg) and returns the time from the
// first request to the 201 that commits it. chunk is the PATCH size of
// pushPatches.
func (c *client) pushBlob(ctx context.Context, mode pushMode, data []byte, dg string, chunk int64) (time.Duration, error) {
	t0 := time.Now()
	resp, err := c.do(ctx, http.MethodPost, c.url("/v2/"+c.repo+"/blobs/uploads/"), nil, nil)
	if err != nil {
		return 0, err
	}
	if err := expect(resp, http.StatusAccepted); err != nil {
		return 0, err
	}
	drain(resp)
	loc, err := location(resp)
	if err != nil {
		return 0, err
	}
	var final *http.Response
	switch mode {
	case pushChunked:
		resp, err = c.do(ctx, http.MethodPatch, loc.String(), streamReader{bytes.NewReader(data)}, octetStream())
		if err != nil {
			return 0, err
		}
		// 204 is what some registries (go-containerregistry's) answer.
		if err := expect(resp, http.StatusAccepted, http.StatusNoContent); err != nil {
			return 0, err
		}
		drain(resp)
		if loc, err = location(resp); err != nil {
			return 0, err
		}
		final, err = c.do(ctx, http.MethodPut, withDigest(loc, dg), nil, nil)
	case pushPatches:
		if loc, err = c.patchChunks(ctx, loc, data, chunk); err != nil {
			return 0, err
		}
		final, err = c.do(ctx, http.MethodPut, withDigest(loc, dg), nil, nil)
	case pushMonolithic:
		final, err = c.do(ctx, http.MethodPut, withDigest(loc, dg), bytes.NewReader(data), octetStream())
	default:
		return 0, fmt.Errorf("unknown push mode %q", mode)
	}
	if err != nil {
		return 0, err
	}
	if err := expect(final, http.StatusCreated); err != nil {
		return 0, err
	}
	drain(final)
	d := time.Since(t0)
	if got := final.Header.Get("Docker-Content-Digest"); got != "" && got != dg {
		return 0, fmt.Errorf("PUT upload: Docker-Content-Digest %s, want %s", got, dg)
	}
	return d, nil
}

// patchChunks sends data as PATCHes of chunk bytes with Content-Range and
// Content-Length, as containerd, crane and regctl do when told a chunk
// size, and returns the Location for the next request.
func (c *client) patchChunks(ctx context.Context, loc *url.URL, data []byte, chunk int64) (*url.URL, error) {
	for off := int64(0); off < int64(len(data)); off += chunk {
		end := min(off+chunk, int64(len(data)))
		hdr := octetStream()
		hdr.Set("Content-Range", fmt.Sprintf("%d-%d", off, end-1))
		resp, err := c.do(ctx, http.MethodPatch, loc.String(), bytes.NewReader(data[off:end]), hdr)
		if err != nil {
			return nil, err
		}
		if err := expect(resp, http.StatusAccepted, http.StatusNoContent); err != nil {
			return nil, err
		}
		drain(resp)
		if loc, err = location(resp); err != nil {
			return nil, err
		}
	}
	return loc, nil
}

// copyBuf reads r to the end with a large buffer, so that the client's
// syscalls do not cap a fast registry. io.Discard's own ReadFrom would use
// 8KiB reads.
func copyBuf(w io.Writer, r io.Reader) (int64, error) {
	buf := make([]byte, 1<<20)
	var n int64
	for {
		m, err := r.Read(buf)
		if m > 0 {
			if _, werr := w.Write(buf[:m]); werr != nil {
				return n, werr
			}
			n += int64(m)
		}
		if err == io.EOF {
			return n, nil
		}
		if err != nil {
			return n, err
		}
	}
}

func (c *client) getBlob(ctx context.Context, dg string, size int64, w io.Writer) error {
	resp, err := c.do(ctx, http.MethodGet, c.url("/v2/"+c.repo+"/blobs/"+dg), nil, nil)
	if err != nil {
		return err
	}
	if err := expect(resp, http.StatusOK); err != nil {
		return err
	}
	defer resp.Body.Close()
	n, err := copyBuf(w, resp.Body)
	if err != nil {
		return fmt.Errorf("GET blob %s: after %d bytes: %w", dg, n, err)
	}
	if n != size {
		return fmt.Errorf("GET blob %s: got %d bytes, want %d", dg, n, size)
	}
	return nil
}

// pullBlob times one GET of the blob, its bytes read and discarded.
func (c *client) pullBlob(ctx context.Context, dg string, size int64) (time.Duration, error) {
	t0 := time.Now()
	if err := c.getBlob(ctx, dg, size, io.Discard); err != nil {
		return 0, err
	}
	return time.Since(t0), nil
}

// verifyBlob pulls the blob and checks that its bytes hash to dg.
func (c *client) verifyBlob(ctx context.Context, dg string, size int64) error {
	h := sha256.New()
	if err := c.getBlob(ctx, dg, size, h); err != nil {
		return err
	}
	if got := "sha256:" + hex.EncodeToString(h.Sum(nil)); got != dg {
		return fmt.Errorf("GET blob %s: content hashes to %s", dg, got)
	}
	return nil
}
