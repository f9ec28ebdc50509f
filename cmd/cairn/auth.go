package main

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"strings"

	"github.com/cairn-registry/cairn/internal/auth"
	"github.com/cairn-registry/cairn/internal/config"
	"github.com/cairn-registry/cairn/internal/notify"
)

// newAuthorizer builds the authorizer auth configures; nil when none is.
// With htpasswd or ldap, logins go through auth.Accounts (robot keys,
// htpasswd users, LDAP users; failed logins limited per address) under one
// access policy, served as Basic or, with tokenservice, through cairn's own
// token service.
func newAuthorizer(c config.Auth) (auth.Authorizer, error) {
	var a auth.Authorizer
	switch {
	case c.Accounts():
		return newAccountsAuthorizer(c)
	case c.Silly != nil:
		a = auth.NewSilly(c.Silly.Realm, c.Silly.Service)
	case c.Token != nil:
		t, err := auth.NewToken(auth.TokenOptions{
			Realm:             c.Token.Realm,
			Service:           c.Token.Service,
			Issuer:            c.Token.Issuer,
			RootCertBundle:    c.Token.RootCertBundle,
			JWKS:              c.Token.JWKS,
			SigningAlgorithms: c.Token.SigningAlgorithms,
			AutoRedirect:      c.Token.AutoRedirect,
			AutoRedirectPath:  c.Token.AutoRedirectPath,
		})
		if err != nil {
			return nil, fmt.Errorf("config: auth.token: %w", err)
		}
		a = t
	default:
		return nil, nil
	}
	if c.Anonymous.Pull {
		a = auth.AnonymousPull(a)
	}
	return a, nil
}

// defaultRealm is the Basic challenge's realm without auth.htpasswd (whose
// realm it is otherwise).
const defaultRealm = "cairn"

// newAccountsAuthorizer is newAuthorizer for cairn's accounts (htpasswd
// and/or ldap): Basic, or the token service. Anonymous pulls and access
// control are part of their policy.
func newAccountsAuthorizer(c config.Auth) (auth.Authorizer, error) {
	var h *auth.Htpasswd
	realm := defaultRealm
	if c.Htpasswd != nil {
		var err error
		if h, err = auth.LoadHtpasswd(c.Htpasswd.Realm, c.Htpasswd.Path); err != nil {
			return nil, fmt.Errorf("config: auth.htpasswd.path: %w", err)
		}
		realm = c.Htpasswd.Realm
	}
	var sources []auth.Source
	if err := appendOIDC(&sources, c.OIDC); err != nil { // first: LDAP would try its tokens as passwords (oidc.go)
		return nil, err
	}
	if c.LDAP != nil {
		l, err := newLDAP(*c.LDAP)
		if err != nil {
			return nil, err
		}
		sources = append(sources, l)
	}
	var robots *auth.Robots
	if c.Robots.Path != "" {
		robots = auth.NewRobots(c.Robots.Path)
		// A file that does not read would refuse every key: say so now.
		if _, err := auth.ReadRobots(c.Robots.Path); err != nil {
			return nil, fmt.Errorf("config: auth.robots.path: %w", err)
		}
	}
	accounts := auth.NewAccounts(h, robots, auth.NewLoginLimiter(c.FailedLogins.Limits()), sources...)
	var ac *auth.AccessControl
	if c.AccessControl != nil {
		x := accessControl(*c.AccessControl)
		// Groups of a directory need no definition here: the source
		// names their members.
		x.SourceGroups = accounts.HasSources()
		ac = &x
	}
	if c.TokenService == nil {
		b, err := auth.NewBasic(realm, accounts, ac, c.Anonymous.Pull)
		if err != nil {
			return nil, fmt.Errorf("config: auth.accesscontrol: %w", err)
		}
		return b, nil
	}
	t := c.TokenService.TokenDefaults()
	if t.Key == "" {
		return nil, errors.New("config: auth.tokenservice.key: required with an object-store driver (every node must sign with the same key)")
	}
	key, _, err := auth.LoadSigningKey(t.Key, true)
	if err != nil {
		return nil, fmt.Errorf("config: auth.tokenservice.key: %w", err)
	}
	s, err := auth.NewTokenService(auth.TokenServiceOptions{
		Realm: t.Realm, Service: t.Service, Issuer: t.Issuer,
		Expiration: t.Expiration, RefreshExpiration: t.RefreshExpiration,
		Key: key, Accounts: accounts, BasicRealm: realm, AccessControl: ac, AnonymousPull: c.Anonymous.Pull,
	})
	if err != nil {
		return nil, fmt.Errorf("config: auth.tokenservice: %w", err)
	}
	return s, nil
}

// authDefaults fills the default paths of the identity files, beside the
// registry's files with the filesystem driver: the robot file, and the
// token service's signing key.
// The token service's other defaults are filled too, so that config check
// shows the values in force.
func authDefaults(cfg *config.Config) {
	a := &cfg.Auth
	if t := a.TokenService; t != nil {
		*t = t.TokenDefaults()
	}
	if l := a.LDAP; l != nil {
		*l = l.LDAPDefaults()
	}
	fs := cfg.Storage.Filesystem
	if !a.Accounts() || fs == nil {
		return
	}
	if a.Robots.Path == "" {
		a.Robots.Path = filepath.Join(fs.RootDirectory, "cairn-robots.json")
	}
	if t := a.TokenService; t != nil && t.Key == "" {
		t.Key = filepath.Join(fs.RootDirectory, "cairn-token-key.pem")
	}
}

// newLDAP is the LDAP source of auth.ldap: its TLS settings and the
// service account's password read now, so that a file that does not read
// stops start-up (and config check) rather than every login.
func newLDAP(c config.LDAP) (*auth.LDAP, error) {
	c = c.LDAPDefaults()
	pass := c.BindPassword
	switch {
	case c.BindPasswordFile != "":
		b, err := os.ReadFile(c.BindPasswordFile)
		if err != nil {
			return nil, fmt.Errorf("config: auth.ldap.bindpasswordfile: %w", err)
		}
		pass = strings.TrimRight(string(b), "\r\n")
	case c.BindPasswordEnv != "":
		v, ok := os.LookupEnv(c.BindPasswordEnv)
		if !ok {
			return nil, fmt.Errorf("config: auth.ldap.bindpasswordenv: %s is not set", c.BindPasswordEnv)
		}
		pass = v
	}
	if c.BindDN != "" && pass == "" {
		return nil, errors.New("config: auth.ldap: the bind password is empty (an empty password is an unauthenticated bind)")
	}
	tc := &tls.Config{InsecureSkipVerify: c.InsecureSkipVerify}
	if c.CA != "" {
		pem, err := os.ReadFile(c.CA)
		if err != nil {
			return nil, fmt.Errorf("config: auth.ldap.ca: %w", err)
		}
		tc.RootCAs = x509.NewCertPool()
		if !tc.RootCAs.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("config: auth.ldap.ca: %s holds no PEM certificate", c.CA)
		}
	}
	l, err := auth.NewLDAP(auth.LDAPOptions{
		URL: c.URL, StartTLS: c.StartTLS, TLS: tc,
		BindDN: c.BindDN, BindPassword: pass,
		UserBase: c.UserBase, UserAttribute: c.UserAttribute, UserFilter: c.UserFilter,
		GroupBase: c.GroupBase, GroupFilter: c.GroupFilter, GroupAttribute: c.GroupAttribute,
		Timeout: c.Timeout,
	})
	if err != nil {
		return nil, fmt.Errorf("config: auth.ldap: %w", err)
	}
	return l, nil
}

// withIdentity serves the token endpoint beside next when the current
// authorizer is cairn's token service, gives every request the audit
// trail its logins are reported to, and has the web page's refusals
// challenge Basic.
func withIdentity(next http.Handler, authz auth.Authorizer, log *slog.Logger, events interface{ Notify(notify.Event) }) http.Handler {
	if authz == nil {
		return next
	}
	trail := auditTrail{log: log, events: events}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		ctx := auth.WithAuditor(r.Context(), trail)
		if r.URL.Path == uiPrefix || strings.HasPrefix(r.URL.Path, uiPrefix+"/") {
			// Browsers prompt for a password only on a Basic challenge.
			ctx = auth.PreferBasic(ctx)
		}
		r = r.WithContext(ctx)
		if r.URL.Path == auth.TokenPath {
			// Asked per request: a reload may turn the service on or off.
			if ts := tokenService(authz); ts != nil {
				ts.ServeHTTP(w, r)
				return
			}
		}
		next.ServeHTTP(w, r)
	})
}

func tokenService(a auth.Authorizer) *auth.TokenService {
	if s, ok := a.(*auth.Swappable); ok {
		a = s.Current()
	}
	ts, _ := a.(*auth.TokenService)
	return ts
}

// auditEvents is where audit events go besides the log: the notifier,
// when auth.audit.events asks for it (nil otherwise, and never a nil
// *Notifier in the interface).
func auditEvents(cfg *config.Config, n *notify.Notifier) interface{ Notify(notify.Event) } {
	if !cfg.Auth.Audit.Events || n == nil {
		return nil
	}
	return n
}

// Audit actions of robot keys, besides auth's login actions.
const (
	auditRobotCreate = notify.ActionRobotCreate
	auditRobotRevoke = notify.ActionRobotRevoke
)

// auditTrail writes audit events as log lines and, with auth.audit.events,
// as events on the notification queue (action login, login.failed,
// login.held; actor the user name; request addr and user agent;
// cairn.login the identity source, how the login came and whether it is
// a robot's).
type auditTrail struct {
	log    *slog.Logger
	events interface{ Notify(notify.Event) }
}

func (a auditTrail) Audit(ctx context.Context, e auth.AuditEvent) {
	level := slog.LevelInfo
	attrs := []any{"action", e.Action, "user", e.User, "robot", e.Robot, "source", e.Source, "addr", e.Addr, "via", e.Via, "useragent", e.UserAgent}
	if e.Err != nil {
		level = slog.LevelWarn
		attrs = append(attrs, "err", e.Err)
	}
	a.log.Log(ctx, level, "audit", attrs...)
	if a.events != nil {
		a.events.Notify(notify.Event{
			Action:  e.Action,
			Actor:   notify.Actor{Name: e.User},
			Request: notify.Request{Addr: e.Addr, UserAgent: e.UserAgent},
			Cairn:   &notify.Details{Login: &notify.Login{Source: e.Source, Via: e.Via, Robot: e.Robot}},
		})
	}
}

// accessControl is the auth package's form of the accesscontrol section.
func accessControl(c config.AccessControl) auth.AccessControl {
	policy := func(p config.ACLPolicy) auth.Policy {
		return auth.Policy{Users: p.Users, Groups: p.Groups, Actions: p.Actions}
	}
	ac := auth.AccessControl{Groups: map[string][]string{}, Repositories: map[string]auth.RepositoryPolicy{}, Admin: policy(c.AdminPolicy)}
	for name, g := range c.Groups {
		ac.Groups[name] = g.Users
	}
	for pattern, r := range c.Repositories {
		rp := auth.RepositoryPolicy{Default: r.DefaultPolicy, Anonymous: r.AnonymousPolicy}
		for _, p := range r.Policies {
			rp.Policies = append(rp.Policies, policy(p))
		}
		ac.Repositories[pattern] = rp
	}
	return ac
}

func authName(c config.Auth) string {
	name := "none"
	switch {
	case c.Accounts():
		var parts []string
		if c.Htpasswd != nil {
			parts = append(parts, "htpasswd")
		}
		if c.OIDC != nil {
			parts = append(parts, "oidc")
		}
		if c.LDAP != nil {
			parts = append(parts, "ldap")
		}
		if c.TokenService != nil {
			parts = append(parts, "tokenservice")
		}
		name = strings.Join(parts, "+")
	case c.Token != nil:
		name = "token"
	case c.Silly != nil:
		name = "silly"
	}
	if c.Accounts() && c.Robots.Path != "" {
		name += "+robots"
	}
	if c.Anonymous.Pull {
		name += "+anonymous-pull"
	}
	if c.AccessControl != nil {
		name += "+accesscontrol"
	}
	return name
}
