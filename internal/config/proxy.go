package config

import (
	"errors"
	"fmt"
	"net/url"
	"strings"
	"time"
)

// Proxy makes cairn a pull-through cache (distribution's proxy section):
// with remoteurl, every repository mirrors that registry; with upstreams
// (cairn), the repositories under each prefix mirror its registry, and the
// others are ordinary ones.
type Proxy struct {
	RemoteURL string `yaml:"remoteurl"`
	Username  string `yaml:"username"`
	Password  string `yaml:"password"`
	// TTL is how long cached content not pulled is kept (distribution's
	// default 168h; 0 keeps it).
	TTL *time.Duration `yaml:"ttl"`
	// Revalidate (cairn) is how long a tag checked with the upstream is
	// served without asking again (default 1m).
	Revalidate time.Duration `yaml:"revalidate"`
	// Upstreams (cairn) mirror several registries, by repository prefix.
	Upstreams []ProxyUpstream `yaml:"upstreams"`
}

// ProxyUpstream is one mirrored registry under a repository prefix.
type ProxyUpstream struct {
	Prefix     string         `yaml:"prefix"`
	RemoteURL  string         `yaml:"remoteurl"`
	Username   string         `yaml:"username"`
	Password   string         `yaml:"password"`
	TTL        *time.Duration `yaml:"ttl"`
	Revalidate time.Duration  `yaml:"revalidate"`
}

// Enabled reports whether any upstream is configured.
func (p *Proxy) Enabled() bool { return p.RemoteURL != "" || len(p.Upstreams) > 0 }

// defaultProxyTTL is distribution's proxy.ttl default.
const defaultProxyTTL = 168 * time.Hour

// defaultRevalidate is how often a tag is checked with its upstream.
const defaultRevalidate = time.Minute

// All returns every upstream with defaults applied: remoteurl as the one
// with the empty prefix.
func (p *Proxy) All() []ProxyUpstream {
	var out []ProxyUpstream
	if p.RemoteURL != "" {
		out = append(out, ProxyUpstream{RemoteURL: p.RemoteURL, Username: p.Username, Password: p.Password, TTL: p.TTL, Revalidate: p.Revalidate})
	}
	out = append(out, p.Upstreams...)
	for i := range out {
		u := &out[i]
		if u.TTL == nil {
			ttl := defaultProxyTTL
			if p.TTL != nil {
				ttl = *p.TTL
			}
			u.TTL = &ttl
		}
		if u.Revalidate == 0 {
			u.Revalidate = p.Revalidate
		}
		if u.Revalidate == 0 {
			u.Revalidate = defaultRevalidate
		}
	}
	return out
}

func (p *Proxy) validate() error {
	if p.RemoteURL != "" && len(p.Upstreams) > 0 {
		return errors.New("config: proxy: give remoteurl (every repository mirrors it) or upstreams (by prefix), not both")
	}
	if p.Revalidate < 0 || p.TTL != nil && *p.TTL < 0 {
		return errors.New("config: proxy: ttl and revalidate must not be negative")
	}
	seen := map[string]bool{}
	for i, u := range p.All() {
		key := "proxy.remoteurl"
		if p.RemoteURL == "" {
			key = fmt.Sprintf("proxy.upstreams[%d]", i)
			prefix := strings.Trim(u.Prefix, "/")
			if prefix == "" {
				return fmt.Errorf("config: %s.prefix: required (the repositories it mirrors, e.g. docker.io)", key)
			}
			if seen[prefix] {
				return fmt.Errorf("config: %s.prefix: %q is given twice", key, prefix)
			}
			seen[prefix] = true
			key += ".remoteurl"
		}
		if v, err := url.Parse(u.RemoteURL); err != nil || v.Host == "" || (v.Scheme != "http" && v.Scheme != "https") {
			return fmt.Errorf("config: %s: %q is not an http(s) URL", key, u.RemoteURL)
		}
		if *u.TTL < 0 || u.Revalidate < 0 {
			return fmt.Errorf("config: %s: ttl and revalidate must not be negative", key)
		}
	}
	return nil
}
