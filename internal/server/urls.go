package server

import (
	"net/http"
	"net/url"
	"strings"
)

// urlBuilder writes the URLs the API hands out (Location headers), with
// distribution's http.prefix, http.host and http.relativeurls meanings.
type urlBuilder struct {
	// prefix is "" or a path that starts and ends with "/": the API is
	// served under prefix + "v2/".
	prefix string
	// host, when set, is the scheme and host every absolute URL names,
	// whatever the request said; its path, when it has one, replaces
	// prefix in the URLs.
	host *url.URL
	// relative makes URLs paths only (without host), unless host is set.
	relative bool
}

// path returns apiPath ("/v2/...") under the prefix.
func (b urlBuilder) path(apiPath string) string {
	if b.prefix == "" {
		return apiPath
	}
	return b.prefix + apiPath[1:]
}

// location returns the URL of apiPath for a response to r.
func (b urlBuilder) location(r *http.Request, apiPath string) string {
	if h := b.host; h != nil {
		base := strings.TrimSuffix(h.Path, "/") + "/"
		if base == "/" && b.prefix != "" {
			base = b.prefix
		}
		return h.Scheme + "://" + h.Host + base + apiPath[1:]
	}
	if b.relative {
		return b.path(apiPath)
	}
	scheme, host := requestOrigin(r)
	return scheme + "://" + host + b.path(apiPath)
}

// requestOrigin is the scheme and host the client reached, as distribution
// reads them: RFC 7239 Forwarded first, else X-Forwarded-Proto and the
// first X-Forwarded-Host, else the connection and the Host header.
func requestOrigin(r *http.Request) (scheme, host string) {
	scheme, host = "http", r.Host
	if r.TLS != nil {
		scheme = "https"
	}
	if fwd := r.Header.Get("Forwarded"); fwd != "" {
		first, _, _ := strings.Cut(fwd, ",")
		for _, pair := range strings.Split(first, ";") {
			k, v, ok := strings.Cut(strings.TrimSpace(pair), "=")
			if !ok {
				continue
			}
			v = strings.Trim(v, `"`)
			switch strings.ToLower(k) {
			case "proto":
				if v == "http" || v == "https" {
					scheme = v
				}
			case "host":
				if v != "" {
					host = v
				}
			}
		}
		return scheme, host
	}
	if p := r.Header.Get("X-Forwarded-Proto"); p == "http" || p == "https" {
		scheme = p
	}
	if h := r.Header.Get("X-Forwarded-Host"); h != "" {
		first, _, _ := strings.Cut(h, ",")
		if first = strings.TrimSpace(first); first != "" {
			host = first
		}
	}
	return scheme, host
}

// stripPrefix removes the configured prefix from r's path: false when the
// path is not under it (the request names no endpoint).
func (b urlBuilder) stripPrefix(r *http.Request) bool {
	if b.prefix == "" {
		return true
	}
	rest, ok := strings.CutPrefix(r.URL.Path, b.prefix)
	if !ok {
		// "/prefix/v2" without its final slash still names the base.
		return false
	}
	r.URL.Path = "/" + rest
	r.URL.RawPath = ""
	return true
}
