package config

import (
	"errors"
	"fmt"
	"net/url"
	"time"
)

// Proxy is distribution's proxy section: the registry becomes a
// pull-through cache of RemoteURL. Manifests and blobs a client asks for
// are read from the remote when missing here and stored; a tag is checked
// against the remote on every manifest GET (the cached manifest is served
// when the remote cannot be reached); pushes and deletes are refused.
type Proxy struct {
	RemoteURL string `yaml:"remoteurl"`
	// Username and Password authenticate to the remote.
	Username string `yaml:"username"`
	Password string `yaml:"password"`
	// Exec is a Docker credential helper to ask instead.
	Exec *ProxyExec `yaml:"exec"`
	// TTL: cached content is deleted this long after it was fetched
	// (default 168h; 0 keeps it for ever).
	TTL *time.Duration `yaml:"ttl"`
}

// ProxyExec runs a credential helper for the remote's credentials.
type ProxyExec struct {
	Command string `yaml:"command"`
	// Lifetime: the answer is reused this long (unset: for ever; 0: the
	// helper runs for every request).
	Lifetime *time.Duration `yaml:"lifetime"`
}

// DefaultProxyTTL is distribution's expiry of cached content.
const DefaultProxyTTL = 168 * time.Hour

// CacheTTL returns TTL, or its default.
func (p *Proxy) CacheTTL() time.Duration {
	if p.TTL == nil {
		return DefaultProxyTTL
	}
	return *p.TTL
}

func (p *Proxy) validate() error {
	u, err := url.Parse(p.RemoteURL)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return fmt.Errorf("config: proxy.remoteurl: %q is not an http or https URL", p.RemoteURL)
	}
	if p.Exec != nil && p.Exec.Command == "" {
		return errors.New("config: proxy.exec.command: required with proxy.exec")
	}
	if p.TTL != nil && *p.TTL < 0 {
		return fmt.Errorf("config: proxy.ttl: must not be negative, not %s", *p.TTL)
	}
	return nil
}
