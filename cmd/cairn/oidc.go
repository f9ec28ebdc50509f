package main

import (
	"errors"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"

	"github.com/cairn-registry/cairn/internal/auth"
	"github.com/cairn-registry/cairn/internal/config"
)

// newOIDC is the OIDC source of auth.oidc (nil when there is none), its
// client secret read now, so that a file that does not read stops
// start-up (and config check) rather than every login.
func newOIDC(c *config.OIDC) (*auth.OIDC, error) {
	if c == nil {
		return nil, nil
	}
	o := c.OIDCDefaults()
	secret := o.ClientSecret
	if o.ClientSecretFile != "" {
		b, err := os.ReadFile(o.ClientSecretFile)
		if err != nil {
			return nil, fmt.Errorf("config: auth.oidc.clientsecretfile: %w", err)
		}
		secret = strings.TrimRight(string(b), "\r\n")
	}
	src, err := auth.NewOIDC(auth.OIDCOptions{
		Issuer: o.Issuer, ClientID: o.ClientID, ClientSecret: secret, Audiences: o.Audiences,
		UsernameClaim: o.UsernameClaim, GroupsClaim: o.GroupsClaim, Scopes: o.Scopes,
	})
	if err != nil {
		return nil, fmt.Errorf("config: auth.oidc: %w", err)
	}
	return src, nil
}

// oidcDefaults fills auth.oidc's defaults, and the session key's path
// beside the registry's files with the filesystem driver.
func oidcDefaults(cfg *config.Config) {
	o := cfg.Auth.OIDC
	if o == nil {
		return
	}
	*o = o.OIDCDefaults()
	if fs := cfg.Storage.Filesystem; o.WebLogin && o.SessionKey == "" && fs != nil {
		o.SessionKey = filepath.Join(fs.RootDirectory, "cairn-session-key")
	}
}

// newOIDCWeb is the web page's OIDC login (nil without auth.oidc.weblogin).
// It is built once at start-up: a reload does not change it (the policy
// its sessions are judged by does change).
// Its sessions are judged by policy, the accounts' authorizer.
func newOIDCWeb(cfg *config.Config, policy auth.Authorizer) (*auth.OIDCWeb, error) {
	o := cfg.Auth.OIDC
	if o == nil || !o.WebLogin {
		return nil, nil
	}
	if !cfg.UI.Enabled || cfg.UI.Listener == "debug" {
		return nil, errors.New("config: auth.oidc.weblogin: needs the web page on the main listener (ui.enabled, ui.listener main)")
	}
	oidcDefaults(cfg)
	if o.SessionKey == "" {
		return nil, errors.New("config: auth.oidc.sessionkey: required with an object-store driver (every node must seal sessions with the same key)")
	}
	key, err := auth.LoadSessionKey(o.SessionKey, true)
	if err != nil {
		return nil, fmt.Errorf("config: auth.oidc.sessionkey: %w", err)
	}
	src, err := newOIDC(o)
	if err != nil {
		return nil, err
	}
	web, err := auth.NewOIDCWeb(src, auth.OIDCWebOptions{RedirectURL: o.RedirectURL, Key: key, Lifetime: o.SessionLifetime, Landing: uiPrefix + "/", Policy: policy})
	if err != nil {
		return nil, fmt.Errorf("config: auth.oidc: %w", err)
	}
	return web, nil
}

// withOIDCWeb serves the web login under auth.OIDCPath beside next.
func withOIDCWeb(next http.Handler, web *auth.OIDCWeb) http.Handler {
	if web == nil {
		return next
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if strings.HasPrefix(r.URL.Path, auth.OIDCPath+"/") {
			web.ServeHTTP(w, r)
			return
		}
		next.ServeHTTP(w, r)
	})
}

// appendOIDC adds the OIDC source of c (nil: none) to sources. It goes
// before LDAP's: it takes only its provider's tokens, which LDAP would try
// as passwords and refuse.
func appendOIDC(sources *[]auth.Source, c *config.OIDC) error {
	o, err := newOIDC(c)
	if err != nil || o == nil {
		return err
	}
	*sources = append(*sources, o)
	return nil
}
