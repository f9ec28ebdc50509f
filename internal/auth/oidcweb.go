package auth

import (
	"crypto/aes"
	"crypto/cipher"
	"crypto/rand"
	"crypto/subtle"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"html/template"
	"io/fs"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/coreos/go-oidc/v3/oidc"
	"golang.org/x/oauth2"
)

// OIDCPath is where the web page's OIDC login is served: OIDCPath+"/login"
// (?next= the page to return to), "/callback" (the redirect URI to
// register at the provider) and "/logout".
const OIDCPath = "/auth/oidc"

// ViaWeb is how a login through the web page's OIDC login came (audit
// events).
const ViaWeb = "web"

// Cookie names of the web page's login.
const (
	SessionCookie = "cairn_session"
	flowCookie    = "cairn_oidc_flow"
)

// OIDCWeb is the web page's login through the OIDC provider: the
// authorization code flow with PKCE (S256), state and nonce.
//
// Life of a login: /auth/oidc/login makes a state, a nonce and a PKCE
// verifier, keeps them in a short-lived encrypted cookie (flowCookie, for
// /auth/oidc/ only) and sends the browser to the provider. The provider
// sends it back to /auth/oidc/callback with a code and the state: the
// state must be the cookie's (else another site started this login, CSRF),
// the code is exchanged with the verifier (so a code seen by someone else
// is worth nothing to them), the ID token is verified as a CLI token is
// (issuer, signature, expiry; audience the client ID) and must carry the
// cookie's nonce (else it was replayed from another login). The session is
// then an encrypted cookie (SessionCookie: HttpOnly, SameSite=Lax, Secure
// under TLS) naming the user and groups, valid for the session lifetime;
// the page's requests carrying it are authorized as that identity under
// the same access policy as any login (Authorizer). Logout drops it. A
// session is not ended by the provider: a user removed there keeps the
// page until the session expires.
//
// Both cookies are AES-256-GCM sealed with the session key, each with its
// own purpose as additional data, so that neither can be read, altered,
// forged, or passed off as the other; every node of a registry must have
// the same key.
type OIDCWeb struct {
	src      *OIDC
	aead     cipher.AEAD
	opts     OIDCWebOptions
	redirect *url.URL // nil: from each request's host
}

// OIDCWebOptions configure the web page's login.
type OIDCWebOptions struct {
	// RedirectURL is the callback URL registered at the provider; ""
	// derives it from each request (its scheme and Host + OIDCPath/callback).
	RedirectURL string
	// Key is the session key (32 bytes; LoadSessionKey).
	Key []byte
	// Lifetime bounds a session (default 8h).
	Lifetime time.Duration
	// Landing is where a login without ?next= ends (default /).
	Landing string
	// Policy is the authorizer of cairn's accounts (a Basic or a
	// TokenService, maybe Swappable; asked per request, so that a
	// reloaded policy applies at once): sessions get its grants, and
	// a name its htpasswd file or robot keys own is not an OIDC user's.
	Policy Authorizer
}

// DefaultSessionLifetime is how long a web session lasts by default.
const DefaultSessionLifetime = 8 * time.Hour

// flowLifetime bounds the time from the login's start to its callback.
const flowLifetime = 10 * time.Minute

// NewOIDCWeb returns the web login of src.
func NewOIDCWeb(src *OIDC, opts OIDCWebOptions) (*OIDCWeb, error) {
	if src.opts.ClientID == "" {
		return nil, errors.New("oidc: the web login needs clientid")
	}
	if opts.Policy == nil {
		return nil, errors.New("oidc: the web login needs the accounts' authorizer")
	}
	if len(opts.Key) != 32 {
		return nil, errors.New("oidc: the session key must be 32 bytes")
	}
	block, err := aes.NewCipher(opts.Key)
	if err != nil {
		return nil, err
	}
	aead, err := cipher.NewGCM(block)
	if err != nil {
		return nil, err
	}
	if opts.Lifetime <= 0 {
		opts.Lifetime = DefaultSessionLifetime
	}
	if opts.Landing == "" {
		opts.Landing = "/"
	}
	w := &OIDCWeb{src: src, aead: aead, opts: opts}
	if opts.RedirectURL != "" {
		if w.redirect, err = url.Parse(opts.RedirectURL); err != nil {
			return nil, fmt.Errorf("oidc: redirect URL: %w", err)
		}
	}
	return w, nil
}

// LoginURL is the path that starts a login returning to next.
func LoginURL(next string) string {
	return OIDCPath + "/login?" + url.Values{"next": {next}}.Encode()
}

// ServeHTTP serves OIDCPath's login, callback and logout.
func (w *OIDCWeb) ServeHTTP(rw http.ResponseWriter, r *http.Request) {
	rw.Header().Set("Cache-Control", "no-store")
	switch strings.TrimPrefix(r.URL.Path, OIDCPath) {
	case "/login":
		w.login(rw, r)
	case "/callback":
		w.callback(rw, r)
	case "/logout":
		w.logout(rw, r)
	default:
		http.NotFound(rw, r)
	}
}

// flow is what the login keeps between its start and its callback.
type flow struct {
	State    string `json:"s"`
	Nonce    string `json:"n"`
	Verifier string `json:"v"`
	Next     string `json:"r"`
	Expires  int64  `json:"e"`
}

// session is the web page's logged-in identity.
type session struct {
	Name    string   `json:"n"`
	Groups  []string `json:"g,omitempty"`
	Expires int64    `json:"e"`
}

// Additional data of the two cookies' seals: their purposes.
const (
	flowPurpose    = "cairn oidc flow v1"
	sessionPurpose = "cairn oidc session v1"
)

func (w *OIDCWeb) login(rw http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodGet {
		rw.Header().Set("Allow", "GET")
		http.Error(rw, "method not allowed", http.StatusMethodNotAllowed)
		return
	}
	cfg, err := w.config(r)
	if err != nil {
		w.fail(rw, r, http.StatusServiceUnavailable, "the identity provider is unavailable; retry later", err)
		return
	}
	f := flow{
		State: rand.Text(), Nonce: rand.Text(), Verifier: oauth2.GenerateVerifier(),
		Next: localPath(r.URL.Query().Get("next"), w.opts.Landing), Expires: w.src.opts.Now().Add(flowLifetime).Unix(),
	}
	value, err := w.seal(f, flowPurpose)
	if err != nil {
		w.fail(rw, r, http.StatusInternalServerError, "starting the login failed", err)
		return
	}
	http.SetCookie(rw, w.cookie(r, flowCookie, value, OIDCPath+"/", int(flowLifetime.Seconds())))
	http.Redirect(rw, r, cfg.AuthCodeURL(f.State, oidc.Nonce(f.Nonce), oauth2.S256ChallengeOption(f.Verifier)), http.StatusFound)
}

func (w *OIDCWeb) callback(rw http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	var f flow
	c, err := r.Cookie(flowCookie)
	if err == nil {
		err = w.open(c.Value, flowPurpose, &f)
	}
	// The flow is single-use, whatever comes of it.
	http.SetCookie(rw, w.cookie(r, flowCookie, "", OIDCPath+"/", -1))
	switch {
	case err != nil:
		w.fail(rw, r, http.StatusBadRequest, "this login was not started here, or took too long: log in again", fmt.Errorf("flow cookie: %w", err))
		return
	case subtle.ConstantTimeCompare([]byte(q.Get("state")), []byte(f.State)) != 1:
		w.fail(rw, r, http.StatusBadRequest, "the login's state does not match: log in again", errors.New("state mismatch"))
		return
	case q.Get("error") != "":
		w.fail(rw, r, http.StatusUnauthorized, "the identity provider refused the login: "+q.Get("error"), errors.New(q.Get("error")+": "+q.Get("error_description")))
		return
	}
	cfg, err := w.config(r)
	if err != nil {
		w.fail(rw, r, http.StatusServiceUnavailable, "the identity provider is unavailable; retry later", err)
		return
	}
	ctx := oidc.ClientContext(r.Context(), w.src.hc)
	tok, err := cfg.Exchange(ctx, q.Get("code"), oauth2.VerifierOption(f.Verifier))
	if err != nil {
		w.fail(rw, r, http.StatusUnauthorized, "the login failed: the code was refused", err)
		return
	}
	raw, _ := tok.Extra("id_token").(string)
	if raw == "" {
		w.fail(rw, r, http.StatusUnauthorized, "the login failed: the provider sent no ID token", errors.New("no id_token"))
		return
	}
	cl, err := w.src.verify(r.Context(), raw, []string{w.src.opts.ClientID})
	if err == nil && subtle.ConstantTimeCompare([]byte(cl.nonce), []byte(f.Nonce)) != 1 {
		err = errors.New("token: nonce mismatch")
	}
	if err != nil {
		w.fail(rw, r, http.StatusUnauthorized, "the login failed: the ID token was refused", err)
		return
	}
	if _, acc, ok := policyOf(w.opts.Policy); ok && acc.claimedBefore(cl.name) {
		w.fail(rw, r, http.StatusForbidden, "the login failed: "+cl.name+" is a local account's name; log in with its password", fmt.Errorf("user name %q belongs to the htpasswd file or a robot key", cl.name))
		return
	}
	s := session{Name: cl.name, Groups: cl.groups, Expires: w.src.opts.Now().Add(w.opts.Lifetime).Unix()}
	value, err := w.seal(s, sessionPurpose)
	if err == nil && len(value) > 3800 {
		// Browsers drop cookies over 4 KiB: a login that seems to work
		// and then does not would be worse than this refusal.
		err = fmt.Errorf("the session of %s (%d groups) is too large for a cookie", cl.name, len(cl.groups))
	}
	if err != nil {
		w.fail(rw, r, http.StatusInternalServerError, "the login failed", err)
		return
	}
	audit(r.Context(), AuditEvent{Action: AuditLogin, User: cl.name, Addr: source(r), UserAgent: r.UserAgent(), Via: ViaWeb, Source: SourceOIDC})
	http.SetCookie(rw, w.cookie(r, SessionCookie, value, "/", int(w.opts.Lifetime.Seconds())))
	http.Redirect(rw, r, f.Next, http.StatusSeeOther)
}

func (w *OIDCWeb) logout(rw http.ResponseWriter, r *http.Request) {
	http.SetCookie(rw, w.cookie(r, SessionCookie, "", "/", -1))
	rw.Header().Set("Content-Type", "text/html; charset=utf-8")
	loggedOut.Execute(rw, LoginURL(w.opts.Landing))
}

var loggedOut = template.Must(template.New("").Parse(`<!doctype html><html lang="en"><head><meta charset="utf-8"><title>cairn</title></head>
<body><p id="logged-out">Logged out of cairn.</p><p><a id="login" href="{{.}}">Log in again</a></p></body></html>`))

// fail answers a failed login: a short reason and a way to try again to
// the browser, the detail (err) to the audit trail.
func (w *OIDCWeb) fail(rw http.ResponseWriter, r *http.Request, status int, msg string, err error) {
	audit(r.Context(), AuditEvent{Action: AuditLoginFailed, Addr: source(r), UserAgent: r.UserAgent(), Via: ViaWeb, Source: SourceOIDC, Err: err})
	rw.Header().Set("Content-Type", "text/plain; charset=utf-8")
	rw.Header().Set("X-Content-Type-Options", "nosniff")
	rw.WriteHeader(status)
	fmt.Fprintf(rw, "%s\n(log in at %s)\n", msg, LoginURL(w.opts.Landing))
}

// Session returns the identity of r's session cookie, if r carries a valid
// one.
func (w *OIDCWeb) Session(r *http.Request) (Identity, bool) {
	c, err := r.Cookie(SessionCookie)
	if err != nil {
		return Identity{}, false
	}
	var s session
	if err := w.open(c.Value, sessionPurpose, &s); err != nil || s.Name == "" {
		return Identity{}, false
	}
	return Identity{Name: s.Name, Groups: s.Groups, Source: SourceOIDC}, true
}

// config is the OAuth2 client of the provider for r's login.
func (w *OIDCWeb) config(r *http.Request) (*oauth2.Config, error) {
	p, err := w.src.providerOf(r.Context())
	if err != nil {
		return nil, err
	}
	redirect := w.redirect
	if redirect == nil {
		scheme := "http"
		if r.TLS != nil {
			scheme = "https"
		}
		redirect = &url.URL{Scheme: scheme, Host: r.Host}
		redirect = redirect.JoinPath(OIDCPath, "callback")
	}
	return &oauth2.Config{
		ClientID: w.src.opts.ClientID, ClientSecret: w.src.opts.ClientSecret,
		Endpoint: p.Endpoint(), RedirectURL: redirect.String(), Scopes: w.src.opts.Scopes,
	}, nil
}

// cookie is a cookie of the login: never for scripts, sent on top-level
// navigations from other sites (the provider's redirect back) but not on
// their other requests, and only over TLS when the page is served over it
// (here, or at a proxy in front: an https redirect URL says so).
func (w *OIDCWeb) cookie(r *http.Request, name, value, path string, maxAge int) *http.Cookie {
	return &http.Cookie{
		Name: name, Value: value, Path: path, MaxAge: maxAge,
		HttpOnly: true, SameSite: http.SameSiteLaxMode, Secure: r.TLS != nil || w.redirect != nil && w.redirect.Scheme == "https",
	}
}

// seal encrypts v as a cookie value for purpose.
func (w *OIDCWeb) seal(v any, purpose string) (string, error) {
	plain, err := json.Marshal(v)
	if err != nil {
		return "", err
	}
	nonce := make([]byte, w.aead.NonceSize())
	rand.Read(nonce)
	return base64.RawURLEncoding.EncodeToString(w.aead.Seal(nonce, nonce, plain, []byte(purpose))), nil
}

// open decrypts a sealed cookie value of purpose into v (a *flow or a
// *session) and checks that it has not expired.
func (w *OIDCWeb) open(value string, purpose string, v any) error {
	b, err := base64.RawURLEncoding.DecodeString(value)
	if err != nil || len(b) < w.aead.NonceSize() {
		return errors.New("malformed cookie")
	}
	n := w.aead.NonceSize()
	plain, err := w.aead.Open(nil, b[:n], b[n:], []byte(purpose))
	if err != nil {
		return errors.New("cookie not sealed with this registry's session key")
	}
	if err := json.Unmarshal(plain, v); err != nil {
		return fmt.Errorf("cookie: %w", err)
	}
	var exp int64
	switch x := v.(type) {
	case *flow:
		exp = x.Expires
	case *session:
		exp = x.Expires
	}
	if !w.src.opts.Now().Before(time.Unix(exp, 0)) {
		return errors.New("cookie expired")
	}
	return nil
}

// localPath is next when it is a path on this host, else def: a login must
// not end on another site (an open redirect).
func localPath(next, def string) string {
	// Browsers read a backslash as a slash and drop tabs and newlines:
	// "/\evil" and "/\t/evil" would lead to another host.
	if !strings.HasPrefix(next, "/") || strings.HasPrefix(next, "//") || strings.ContainsFunc(next, func(r rune) bool { return r == '\\' || r < ' ' || r == 0x7f }) {
		return def
	}
	if u, err := url.Parse(next); err != nil || u.Host != "" || u.Scheme != "" {
		return def
	}
	return next
}

// Authorizer authorizes requests carrying a valid session cookie as the
// session's identity, with the grants of opts.Policy; other requests go to
// next. It is for the web page: the registry API takes no cookies.
func (w *OIDCWeb) Authorizer(next Authorizer) Authorizer { return sessions{web: w, next: next} }

type sessions struct {
	web  *OIDCWeb
	next Authorizer
}

func (s sessions) Authorize(r *http.Request, need []Access) (Grant, error) {
	id, ok := s.web.Session(r)
	if !ok || r.Header.Get("Authorization") != "" {
		// Credentials sent with the request are the caller's word on
		// who they are now.
		return s.next.Authorize(r, need)
	}
	gr, acc, ok := policyOf(s.web.opts.Policy)
	if !ok || acc.claimedBefore(id.Name) {
		// A local account named so since the login (a reload).
		return s.next.Authorize(r, need)
	}
	g := gr.of(&id)
	if missing := g.missing(need); len(missing) > 0 {
		return g, &Challenge{err: fmt.Errorf("%w: user %q", ErrInsufficientScope, id.Name), need: missing}
	}
	return g, nil
}

// policyOf is the policy and accounts of a, when a is cairn's own
// accounts' authorizer.
func policyOf(a Authorizer) (grants, *Accounts, bool) {
	if s, ok := a.(*Swappable); ok {
		a = s.Current()
	}
	switch x := a.(type) {
	case *Basic:
		return x.grants, x.accounts, true
	case *TokenService:
		return x.grants, x.opts.Accounts, true
	}
	return grants{}, nil, false
}

// claimedBefore reports whether a source Accounts checks before OIDC owns
// name: robot keys (robot$ names) and the users the htpasswd file lists. A
// web session must not become them, as a CLI login with a token cannot
// (Accounts.check asks those first): the provider's users could otherwise
// name themselves after a local admin.
func (a *Accounts) claimedBefore(name string) bool {
	return strings.HasPrefix(name, RobotPrefix) || a.users != nil && a.users.knows(name)
}

// LoadSessionKey reads the 32-byte session key at path. When create is set
// and no file is there, it makes one (mode 0600) without ever replacing a
// file: of two processes creating it at once, the second reads the
// first's key.
func LoadSessionKey(path string, create bool) ([]byte, error) {
	b, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) && create {
		return createSessionKey(path)
	}
	if err != nil {
		return nil, err
	}
	key, err := base64.StdEncoding.DecodeString(strings.TrimSpace(string(b)))
	if err != nil || len(key) != 32 {
		return nil, fmt.Errorf("%s: want 32 bytes in base64 (head -c 32 /dev/urandom | base64)", path)
	}
	return key, nil
}

func createSessionKey(path string) ([]byte, error) {
	key := make([]byte, 32)
	rand.Read(key)
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return nil, err
	}
	f, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".*")
	if err != nil {
		return nil, err
	}
	defer os.Remove(f.Name())
	_, err = f.WriteString(base64.StdEncoding.EncodeToString(key) + "\n")
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return nil, err
	}
	// A link, not a rename: it fails when the file exists, so a key
	// another process made first is never replaced (its sessions would
	// end).
	if err := os.Link(f.Name(), path); errors.Is(err, fs.ErrExist) {
		return LoadSessionKey(path, false)
	} else if err != nil {
		return nil, err
	}
	return key, nil
}
