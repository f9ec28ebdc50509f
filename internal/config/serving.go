package config

import (
	"errors"
	"fmt"
	"strings"
)

// Auth configures authentication, with distribution's keys. At most one of
// Htpasswd and Token may be given; Anonymous needs one of them. With none,
// the registry serves everyone.
type Auth struct {
	Htpasswd *Htpasswd `yaml:"htpasswd"`
	Token    *Token    `yaml:"token"`
	// Anonymous (cairn) lets callers without credentials pull.
	Anonymous Anonymous `yaml:"anonymous"`
	// AccessControl (cairn) gives htpasswd users and groups actions per
	// repository pattern.
	AccessControl *AccessControl `yaml:"accesscontrol"`

	// silly accepts any credentials: serving it would be unauthenticated.
	_ refused `yaml:"silly" why:"the silly backend accepts anyone; use htpasswd or token"`
}

// unknownKey makes any other key under auth fatal: an authentication method
// cairn does not know, ignored with a warning, would leave the registry
// open to everyone.
func (*Auth) unknownKey() string {
	return "unknown authentication method (cairn supports htpasswd, token, anonymous); without it the registry would be unauthenticated"
}

// Htpasswd configures HTTP Basic authentication against an htpasswd file.
type Htpasswd struct {
	// Realm is named in the Basic challenge.
	Realm string `yaml:"realm"`
	// Path is the htpasswd file; it must exist and hold only bcrypt
	// entries (htpasswd -B). It is read once, at start-up.
	Path string `yaml:"path"`
}

// Token configures Bearer token authentication (the Docker token spec).
type Token struct {
	// Realm is the token server's URL.
	Realm string `yaml:"realm"`
	// Service is this registry's name, required in tokens' audience.
	Service string `yaml:"service"`
	// Issuer must equal tokens' iss claim.
	Issuer string `yaml:"issuer"`
	// RootCertBundle is a PEM file of the certificates that sign tokens
	// (directly, or as roots of the token's x5c chain).
	RootCertBundle string `yaml:"rootcertbundle"`
	// JWKS is a JSON Web Key Set file of token signing keys.
	JWKS string `yaml:"jwks"`
	// SigningAlgorithms restricts the accepted JWS algorithms; empty means
	// every asymmetric one.
	SigningAlgorithms []string `yaml:"signingalgorithms"`
	// AutoRedirect names this host's AutoRedirectPath (default
	// /auth/token) as the realm instead of Realm.
	AutoRedirect     bool   `yaml:"autoredirect"`
	AutoRedirectPath string `yaml:"autoredirectpath"`
}

// Anonymous configures what callers without credentials may do (cairn).
type Anonymous struct {
	// Pull lets anyone pull (GET and HEAD of manifests, blobs, tags and
	// referrers); pushes, deletes and the catalog still need credentials.
	Pull bool `yaml:"pull"`
}

// AccessControl is per-repository access control for htpasswd users, in
// the spirit of zot's accessControl (see auth.AccessControl for how rules
// combine).
type AccessControl struct {
	// Groups maps a group name to its users.
	Groups map[string]ACLGroup `yaml:"groups"`
	// Repositories maps a repository pattern ("*" within a path segment,
	// "**" across) to who may do what there; the longest matching pattern
	// decides.
	Repositories map[string]ACLRepository `yaml:"repositories"`
	// AdminPolicy applies to every repository and the catalog.
	AdminPolicy ACLPolicy `yaml:"adminpolicy"`
}

// ACLGroup lists a group's users.
type ACLGroup struct {
	Users []string `yaml:"users"`
}

// ACLRepository is what callers may do in the repositories of a pattern.
type ACLRepository struct {
	Policies []ACLPolicy `yaml:"policies"`
	// DefaultPolicy is the actions of any authenticated user.
	DefaultPolicy []string `yaml:"defaultpolicy"`
	// AnonymousPolicy is the actions of anyone, with or without
	// credentials.
	AnonymousPolicy []string `yaml:"anonymouspolicy"`
}

// ACLPolicy gives actions (pull, push, delete, *) to users and groups.
type ACLPolicy struct {
	Users   []string `yaml:"users"`
	Groups  []string `yaml:"groups"`
	Actions []string `yaml:"actions"`
}

// Enabled reports whether any authentication is configured.
func (a *Auth) Enabled() bool { return a.Htpasswd != nil || a.Token != nil }

// TLS configures HTTPS on http.addr, with distribution's keys.
type TLS struct {
	// Certificate and Key are PEM files; Certificate may hold the chain.
	Certificate string `yaml:"certificate"`
	Key         string `yaml:"key"`
	// ClientCAs are PEM files of CAs whose client certificates are
	// accepted (mutual TLS).
	ClientCAs []string `yaml:"clientcas"`
	// ClientAuth, with ClientCAs, is require-and-verify-client-cert
	// (default) or verify-client-cert-if-given.
	ClientAuth string `yaml:"clientauth"`
	// MinimumTLS is tls1.2 (default) or tls1.3.
	MinimumTLS string `yaml:"minimumtls"`
	// CipherSuites restricts TLS 1.2 cipher suites, by their standard
	// names (TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256, ...); empty means
	// Go's defaults.
	CipherSuites []string `yaml:"ciphersuites"`

	_ refused `yaml:"letsencrypt" why:"cairn does not obtain certificates; give certificate and key"`
}

// TLS client authentication modes (distribution's clientauth values).
const (
	ClientAuthRequire  = "require-and-verify-client-cert"
	ClientAuthIfGiven  = "verify-client-cert-if-given"
	defaultMinimumTLS  = "tls1.2"
	defaultMetricsPath = "/metrics"
)

func (t *TLS) setDefaults() {
	t.ClientAuth = ClientAuthRequire
	t.MinimumTLS = defaultMinimumTLS
}

// Debug configures the debug listener: Prometheus metrics, /healthz,
// /readyz and /debug/pprof. Without Addr there is none. Keep it on an
// address registry clients cannot reach.
type Debug struct {
	Addr       string     `yaml:"addr"`
	Prometheus Prometheus `yaml:"prometheus"`

	_ refused `yaml:"tls" why:"cairn serves the debug listener over plain HTTP only; bind it to a private address instead"`
}

// Prometheus configures the metrics endpoint of the debug listener.
type Prometheus struct {
	// Enabled defaults to true in cairn (distribution: false) once
	// http.debug.addr is set.
	Enabled bool `yaml:"enabled"`
	// Path defaults to /metrics.
	Path string `yaml:"path"`
}

// HTTP2 configures HTTP/2, which comes with TLS.
type HTTP2 struct {
	// Disabled serves HTTP/1.1 only over TLS.
	Disabled bool `yaml:"disabled"`
}

func (a *Auth) validate() error {
	if a.Htpasswd != nil && a.Token != nil {
		return errors.New("config: auth: give either htpasswd or token, not both")
	}
	if a.AccessControl != nil {
		switch {
		case a.Htpasswd == nil:
			return errors.New("config: auth.accesscontrol: needs auth.htpasswd (token auth carries its own scopes)")
		case a.Anonymous.Pull:
			return errors.New("config: auth.anonymous.pull: give anonymous pulls per repository in auth.accesscontrol's anonymouspolicy instead")
		}
	}
	if a.Anonymous.Pull && !a.Enabled() {
		return errors.New("config: auth.anonymous.pull: needs auth.htpasswd or auth.token, or nobody could push; for a registry nobody writes to, use storage.maintenance.readonly")
	}
	if h := a.Htpasswd; h != nil {
		if h.Realm == "" {
			return errors.New("config: auth.htpasswd.realm: required")
		}
		if h.Path == "" {
			return errors.New("config: auth.htpasswd.path: required")
		}
	}
	if t := a.Token; t != nil {
		for _, f := range []struct{ key, val string }{{"realm", t.Realm}, {"service", t.Service}, {"issuer", t.Issuer}} {
			if f.val == "" && (f.key != "realm" || !t.AutoRedirect) {
				return fmt.Errorf("config: auth.token.%s: required", f.key)
			}
		}
		if t.RootCertBundle == "" && t.JWKS == "" {
			return errors.New("config: auth.token: give rootcertbundle or jwks (or both): tokens cannot be verified without a key")
		}
		if t.AutoRedirectPath != "" && !strings.HasPrefix(t.AutoRedirectPath, "/") {
			return fmt.Errorf("config: auth.token.autoredirectpath: %q must start with /", t.AutoRedirectPath)
		}
	}
	return nil
}

func (h *HTTP) validateServing() error {
	if t := h.TLS; t != nil {
		if t.Certificate == "" {
			return errors.New("config: http.tls.certificate: required with http.tls")
		}
		if t.Key == "" {
			return errors.New("config: http.tls.key: required with http.tls")
		}
		switch t.ClientAuth {
		case ClientAuthRequire, ClientAuthIfGiven:
		default:
			return fmt.Errorf("config: http.tls.clientauth: %q is not one of %s, %s", t.ClientAuth, ClientAuthRequire, ClientAuthIfGiven)
		}
		switch t.MinimumTLS {
		case "tls1.2", "tls1.3":
		case "tls1.0", "tls1.1":
			return fmt.Errorf("config: http.tls.minimumtls: %s is insecure; cairn serves tls1.2 or tls1.3", t.MinimumTLS)
		default:
			return fmt.Errorf("config: http.tls.minimumtls: %q is not one of tls1.2, tls1.3", t.MinimumTLS)
		}
	}
	if d := h.Debug; d.Addr != "" {
		if err := validateAddr(d.Addr); err != nil {
			return fmt.Errorf("config: http.debug.addr: %w", err)
		}
		if d.Addr == h.Addr {
			return fmt.Errorf("config: http.debug.addr: %q is also http.addr; the debug listener needs its own address", d.Addr)
		}
		if p := d.Prometheus.Path; !strings.HasPrefix(p, "/") || p == "/healthz" || p == "/readyz" || strings.HasPrefix(p, "/debug/pprof") {
			return fmt.Errorf("config: http.debug.prometheus.path: %q must start with / and not be /healthz, /readyz or under /debug/pprof", p)
		}
	}
	return nil
}
