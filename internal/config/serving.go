package config

import (
	"errors"
	"fmt"
	"net/url"
	"strings"
	"time"
)

// Auth configures authentication, with distribution's keys. At most one of
// cairn's accounts (Htpasswd and LDAP, together or alone), Token and Silly
// may be given; Anonymous needs one of them. With none, the registry serves
// everyone.
type Auth struct {
	Htpasswd *Htpasswd `yaml:"htpasswd"`
	// LDAP (cairn) is an LDAP directory whose users log in beside (or
	// instead of) htpasswd's, their directory groups meeting
	// AccessControl's policies.
	LDAP  *LDAP  `yaml:"ldap"`
	Token *Token `yaml:"token"`
	// Silly is distribution's development backend: any request carrying
	// an Authorization header is let in, others are challenged.
	Silly *Silly `yaml:"silly"`
	// OIDC (cairn) is an OpenID Connect provider whose tokens are
	// passwords of CLI logins and through which the web page logs in,
	// its groups claim meeting AccessControl's policies.
	OIDC *OIDC `yaml:"oidc"`
	// Anonymous (cairn) lets callers without credentials pull.
	Anonymous Anonymous `yaml:"anonymous"`
	// AccessControl (cairn) gives users and groups (of accesscontrol's own,
	// or of LDAP) actions per repository pattern.
	AccessControl *AccessControl `yaml:"accesscontrol"`
	// TokenService (cairn) serves distribution's token protocol from cairn
	// itself at /auth/token, for the identities of htpasswd, LDAP and
	// robot keys; the registry then challenges with Bearer and verifies its own
	// tokens.
	TokenService *TokenService `yaml:"tokenservice"`
	// Robots (cairn) are API keys (cairn robot create), usable as
	// passwords of robot$<name>; on with htpasswd or LDAP.
	Robots Robots `yaml:"robots"`
	// FailedLogins (cairn) limits failed logins per source address.
	FailedLogins FailedLogins `yaml:"failedlogins"`
	// Audit (cairn) configures where audit events go besides the log.
	Audit Audit `yaml:"audit"`
}

// Audit configures audit events (logins, failed logins, robot keys created
// and revoked), which are always logged.
type Audit struct {
	// Events sends them to the notification endpoints too, as events of
	// actions login, login.failed, login.held, robot.create and
	// robot.revoke. Off by default: receivers written for distribution's
	// events see none they do not know.
	Events bool `yaml:"events"`
}

// TokenService configures cairn's own token service.
type TokenService struct {
	// Realm is the token endpoint's URL in challenges; empty means
	// /auth/token on the host the client addressed.
	Realm string `yaml:"realm"`
	// Service names this registry (tokens' audience); required.
	Service string `yaml:"service"`
	// Issuer is tokens' iss (default "cairn").
	Issuer string `yaml:"issuer"`
	// Expiration is a token's lifetime (default 5m).
	Expiration time.Duration `yaml:"expiration"`
	// RefreshExpiration is a refresh token's lifetime (default 720h).
	RefreshExpiration time.Duration `yaml:"refreshexpiration"`
	// Key is the PEM private key that signs tokens (ECDSA, RSA or
	// Ed25519). Default: cairn-token-key.pem under the filesystem root,
	// made at first start; with an object-store driver, required (every
	// node must sign with the same key).
	Key string `yaml:"key"`
}

// Robots configures robot accounts.
type Robots struct {
	// Path is the robot file (default cairn-robots.json under the
	// filesystem root; with an object-store driver robots are off unless
	// it is given).
	Path string `yaml:"path"`
}

// FailedLogins limits password guessing per source address.
type FailedLogins struct {
	// Burst is how many failed logins an address may make in a row
	// (default 100); -1 turns the limit off.
	Burst int `yaml:"burst"`
	// PerMinute is how many more it may make each minute once the burst
	// is spent (default 10).
	PerMinute float64 `yaml:"perminute"`
}

// Defaults of the token service and the login limit.
const (
	DefaultTokenIssuer       = "cairn"
	DefaultTokenExpiration   = 5 * time.Minute
	DefaultRefreshExpiration = 720 * time.Hour
	DefaultFailedBurst       = 100
	DefaultFailedPerMinute   = 10
)

// Limits returns the failed-login burst and rate, defaults applied; a
// burst of 0 means no limit.
func (f FailedLogins) Limits() (burst int, perMinute float64) {
	burst, perMinute = f.Burst, f.PerMinute
	if burst == 0 {
		burst = DefaultFailedBurst
	}
	if burst < 0 {
		burst = 0
	}
	if perMinute == 0 {
		perMinute = DefaultFailedPerMinute
	}
	return burst, perMinute
}

// TokenDefaults returns t with the defaults of unset keys.
func (t TokenService) TokenDefaults() TokenService {
	if t.Issuer == "" {
		t.Issuer = DefaultTokenIssuer
	}
	if t.Expiration == 0 {
		t.Expiration = DefaultTokenExpiration
	}
	if t.RefreshExpiration == 0 {
		t.RefreshExpiration = DefaultRefreshExpiration
	}
	return t
}

// Silly configures the silly backend's challenge.
type Silly struct {
	Realm   string `yaml:"realm"`
	Service string `yaml:"service"`
}

// unknownKey makes any other key under auth fatal: an authentication method
// cairn does not know, ignored with a warning, would leave the registry
// open to everyone.
func (*Auth) unknownKey() string {
	return "unknown authentication method (cairn supports htpasswd, ldap, oidc, token, silly, anonymous); without it the registry would be unauthenticated"
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
func (a *Auth) Enabled() bool { return a.Accounts() || a.Token != nil || a.Silly != nil }

// Accounts reports whether logins go through cairn's own accounts: an
// htpasswd file or an identity source (LDAP), with robot keys, access
// control and the token service.
func (a *Auth) Accounts() bool { return a.Htpasswd != nil || a.LDAP != nil || a.OIDC != nil }

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
	// LetsEncrypt obtains and renews the certificate from an ACME server
	// (TLS-ALPN-01 on this listener) instead of Certificate and Key.
	LetsEncrypt *LetsEncrypt `yaml:"letsencrypt"`
}

// LetsEncrypt configures certificates from Let's Encrypt (or another ACME
// server).
type LetsEncrypt struct {
	// CacheFile is where certificates and the account key are kept (a
	// directory, despite distribution's name for it).
	CacheFile string `yaml:"cachefile"`
	// Email is given to the ACME server for the account.
	Email string `yaml:"email"`
	// Hosts are the only names a certificate is requested for; empty
	// allows any name a client asks for.
	Hosts []string `yaml:"hosts"`
	// DirectoryURL is the ACME server (default Let's Encrypt's).
	DirectoryURL string `yaml:"directoryurl"`
}

// TLS client authentication modes (distribution's clientauth values).
const (
	ClientAuthRequire  = "require-and-verify-client-cert"
	ClientAuthIfGiven  = "verify-client-cert-if-given"
	ClientAuthRequest  = "request-client-cert"
	ClientAuthAny      = "require-any-client-cert"
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

// H2C configures HTTP/2 over plain TCP.
type H2C struct {
	Enabled bool `yaml:"enabled"`
}

// HTTP2 configures HTTP/2, which comes with TLS.
type HTTP2 struct {
	// Disabled serves HTTP/1.1 only over TLS.
	Disabled bool `yaml:"disabled"`
}

func (a *Auth) validate() error {
	n := 0
	for _, set := range []bool{a.Accounts(), a.Token != nil, a.Silly != nil} {
		if set {
			n++
		}
	}
	if n > 1 {
		return errors.New("config: auth: give one of htpasswd (and/or ldap), token or silly, not several")
	}
	if l := a.LDAP; l != nil {
		if err := l.validate(); err != nil {
			return err
		}
	}
	if o := a.OIDC; o != nil {
		if err := o.validate(); err != nil {
			return err
		}
	}
	if a.AccessControl != nil {
		switch {
		case !a.Accounts():
			return errors.New("config: auth.accesscontrol: needs auth.htpasswd or auth.ldap (token auth carries its own scopes)")
		case a.Anonymous.Pull:
			return errors.New("config: auth.anonymous.pull: give anonymous pulls per repository in auth.accesscontrol's anonymouspolicy instead")
		}
	}
	if t := a.TokenService; t != nil {
		switch {
		case !a.Accounts():
			return errors.New("config: auth.tokenservice: needs auth.htpasswd or auth.ldap, which prove who logs in")
		case t.Service == "":
			return errors.New("config: auth.tokenservice.service: required (the name clients ask tokens for, e.g. the registry's host name)")
		case t.Expiration < 0 || t.RefreshExpiration < 0:
			return errors.New("config: auth.tokenservice: expiration and refreshexpiration must be positive")
		case t.Expiration > 0 && t.Expiration < time.Minute:
			return fmt.Errorf("config: auth.tokenservice.expiration: %s is under a minute: clients take tokens for at least 60s", t.Expiration)
		}
		if t.Realm != "" {
			if u, err := url.Parse(t.Realm); err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
				return fmt.Errorf("config: auth.tokenservice.realm: %q is not an http or https URL", t.Realm)
			}
		}
	}
	if a.Robots.Path != "" && !a.Accounts() {
		return errors.New("config: auth.robots: needs auth.htpasswd or auth.ldap (robot keys log in as Basic users)")
	}
	if f := a.FailedLogins; f.Burst < -1 || f.PerMinute < 0 {
		return errors.New("config: auth.failedlogins: burst must be -1 (off) or more, perminute 0 or more")
	}
	if a.Anonymous.Pull && !a.Enabled() {
		return errors.New("config: auth.anonymous.pull: needs auth.htpasswd, auth.ldap, auth.token or auth.silly, or nobody could push; for a registry nobody writes to, use storage.maintenance.readonly")
	}
	if s := a.Silly; s != nil && (s.Realm == "" || s.Service == "") {
		return errors.New("config: auth.silly: realm and service are required")
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

// validHeaderName reports an RFC 9110 token.
func validHeaderName(name string) bool {
	if name == "" {
		return false
	}
	for _, c := range name {
		if c > 0x7e || c <= ' ' || strings.ContainsRune("\"(),/:;<=>?@[\\]{}", c) {
			return false
		}
	}
	return true
}

func (h *HTTP) validateServing() error {
	if t := h.TLS; t != nil {
		switch le := t.LetsEncrypt; {
		case le != nil && t.Certificate != "":
			return errors.New("config: http.tls: give certificate and key, or letsencrypt, not both")
		case le != nil && le.CacheFile == "":
			return errors.New("config: http.tls.letsencrypt.cachefile: required")
		case le == nil && t.Certificate == "":
			return errors.New("config: http.tls.certificate: required with http.tls")
		case le == nil && t.Key == "":
			return errors.New("config: http.tls.key: required with http.tls")
		}
		switch t.ClientAuth {
		case ClientAuthRequire, ClientAuthIfGiven, ClientAuthRequest, ClientAuthAny:
		default:
			return fmt.Errorf("config: http.tls.clientauth: %q is not one of %s, %s, %s, %s", t.ClientAuth, ClientAuthRequire, ClientAuthIfGiven, ClientAuthRequest, ClientAuthAny)
		}
		switch t.MinimumTLS {
		case "tls1.2", "tls1.3":
		case "tls1.0", "tls1.1":
			return fmt.Errorf("config: http.tls.minimumtls: %s is insecure; cairn serves tls1.2 or tls1.3", t.MinimumTLS)
		default:
			return fmt.Errorf("config: http.tls.minimumtls: %q is not one of tls1.2, tls1.3", t.MinimumTLS)
		}
	}
	switch h.Net {
	case "tcp", "unix":
	default:
		return fmt.Errorf("config: http.net: %q is not one of tcp, unix", h.Net)
	}
	if p := h.Prefix; p != "" && (!strings.HasPrefix(p, "/") || strings.Contains(p, "//") || strings.ContainsAny(p, "?#")) {
		return fmt.Errorf("config: http.prefix: %q must be a path starting with /, such as /registry/", p)
	}
	if h.Host != "" {
		u, err := url.Parse(h.Host)
		if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			return fmt.Errorf("config: http.host: %q is not a URL such as https://registry.example:5000", h.Host)
		}
	}
	if h.DrainTimeout < 0 {
		return fmt.Errorf("config: http.draintimeout: must not be negative, not %s", h.DrainTimeout)
	}
	for name := range h.Headers {
		if !validHeaderName(name) {
			return fmt.Errorf("config: http.headers: %q is not a header name", name)
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
