package config

import (
	"errors"
	"fmt"
	"net/url"
	"strings"
	"time"
)

// OIDC configures an OpenID Connect provider as an identity source
// (auth.oidc): for the CLI, a token the provider issued (an ID token, or a
// JWT access token) is the password of `docker login`, its user-name claim
// the user name; for the web page (WebLogin), a login through the provider
// (authorization code flow with PKCE). The token's groups claim meets
// auth.accesscontrol's policies by name, as LDAP's groups do.
type OIDC struct {
	// Issuer is the provider's issuer URL, exactly as its tokens' iss
	// (discovery at <issuer>/.well-known/openid-configuration).
	Issuer string `yaml:"issuer"`
	// ClientID is cairn's client at the provider (the web login's, and
	// the audience of the ID tokens it issues to cairn). ClientSecret, or
	// ClientSecretFile (a file holding it), for a confidential client;
	// neither for a public one (PKCE).
	ClientID         string `yaml:"clientid"`
	ClientSecret     string `yaml:"clientsecret"`
	ClientSecretFile string `yaml:"clientsecretfile"`
	// Audiences are the audiences accepted in tokens given as passwords
	// (default: clientid): the client IDs of the tools users get their
	// tokens with.
	Audiences []string `yaml:"audiences"`
	// UsernameClaim is the claim that holds the user name (default
	// preferred_username; sub, email). It must be unique per user and not
	// editable by users at the provider.
	UsernameClaim string `yaml:"usernameclaim"`
	// GroupsClaim is the claim that holds the user's groups (default
	// groups).
	GroupsClaim string `yaml:"groupsclaim"`
	// Scopes are asked for at the web login (default openid, profile,
	// email); add the one your provider needs for the groups claim.
	Scopes []string `yaml:"scopes"`
	// WebLogin turns on the web page's login through the provider
	// (/auth/oidc/login); visitors without a session are sent there.
	WebLogin bool `yaml:"weblogin"`
	// RedirectURL is the callback registered at the provider (default:
	// /auth/oidc/callback on the host the browser addressed).
	RedirectURL string `yaml:"redirecturl"`
	// SessionKey is a file of 32 random bytes in base64 that seals the
	// web session cookies (default <root>/cairn-session-key, made at first
	// start; required with an object-store driver: every node must have
	// the same key).
	SessionKey string `yaml:"sessionkey"`
	// SessionLifetime bounds a web session (default 8h).
	SessionLifetime time.Duration `yaml:"sessionlifetime"`
}

// Defaults of auth.oidc.
const (
	DefaultOIDCUsernameClaim   = "preferred_username"
	DefaultOIDCGroupsClaim     = "groups"
	DefaultOIDCSessionLifetime = 8 * time.Hour
)

// OIDCDefaults returns o with the defaults of unset keys (those config
// check shows; the session key's path is filled by the caller, who knows
// the storage root).
func (o OIDC) OIDCDefaults() OIDC {
	if o.UsernameClaim == "" {
		o.UsernameClaim = DefaultOIDCUsernameClaim
	}
	if o.GroupsClaim == "" {
		o.GroupsClaim = DefaultOIDCGroupsClaim
	}
	if o.SessionLifetime == 0 && o.WebLogin {
		o.SessionLifetime = DefaultOIDCSessionLifetime
	}
	return o
}

func (o *OIDC) validate() error {
	const key = "config: auth.oidc"
	u, err := url.Parse(o.Issuer)
	switch {
	case o.Issuer == "":
		return errors.New(key + ".issuer: required (the provider's issuer URL)")
	case err != nil || (u.Scheme != "https" && u.Scheme != "http") || u.Host == "" || u.RawQuery != "" || u.Fragment != "":
		return fmt.Errorf("%s.issuer: %q is not an https URL", key, o.Issuer)
	case u.Scheme == "http" && !loopbackHost(u.Hostname()):
		return fmt.Errorf("%s.issuer: %q: an issuer's keys must come over https (http only on the loopback)", key, o.Issuer)
	case o.ClientID == "" && len(o.Audiences) == 0:
		return errors.New(key + ".clientid: required (or audiences, without the web login)")
	case o.ClientSecret != "" && o.ClientSecretFile != "":
		return errors.New(key + ": give clientsecret or clientsecretfile, not both")
	case o.WebLogin && o.ClientID == "":
		return errors.New(key + ".clientid: required with weblogin")
	case o.SessionLifetime < 0:
		return fmt.Errorf("%s.sessionlifetime: must not be negative, not %s", key, o.SessionLifetime)
	case o.SessionLifetime > 0 && o.SessionLifetime < time.Minute:
		return fmt.Errorf("%s.sessionlifetime: %s is under a minute", key, o.SessionLifetime)
	}
	for _, a := range o.Audiences {
		if a == "" {
			return errors.New(key + ".audiences: an empty audience")
		}
	}
	if o.RedirectURL != "" {
		r, err := url.Parse(o.RedirectURL)
		if err != nil || (r.Scheme != "https" && r.Scheme != "http") || r.Host == "" {
			return fmt.Errorf("%s.redirecturl: %q is not an http or https URL", key, o.RedirectURL)
		}
		if !strings.HasSuffix(r.Path, "/auth/oidc/callback") {
			return fmt.Errorf("%s.redirecturl: %q: cairn's callback is at /auth/oidc/callback", key, o.RedirectURL)
		}
	}
	return nil
}
