// Package hydratest drives the test OIDC provider, Ory Hydra v2, which
// scripts/services/hydra.sh starts: it registers OAuth2 clients through
// Hydra's admin API, serves the login and consent app Hydra sends browsers
// to (accepting one configured user with configured groups, through the
// admin API's accept endpoints: no forms), obtains ID tokens through the
// authorization code flow with PKCE as a browser would, and adds signing
// keys to Hydra's ID-token key set (whose private halves let a test sign
// tokens Hydra's JWKS vouches for: expired ones, of another audience).
//
// Hydra names the login app at LoginBase, a host that resolves nowhere:
// every test serves its own app on a port of its own and has its clients
// reach that host there (Transport for Go, ResolverRule for Chromium), so
// tests running at once each log in their own user.
package hydratest

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/cookiejar"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/go-jose/go-jose/v4"
	"golang.org/x/oauth2"

	"github.com/cairn-registry/cairn/internal/testutil/testenv"
)

// LoginHost is the host of the login and consent app in Hydra's
// configuration (scripts/services/hydra.sh: HYDRA_LOGIN_BASE).
const (
	LoginHost = "login.hydratest"
	LoginBase = "http://" + LoginHost
)

// IDTokenKeySet is the key set whose newest key signs Hydra's ID tokens.
const IDTokenKeySet = "hydra.openid.id-token"

// Hydra is the running test Hydra.
type Hydra struct {
	// Issuer is its public URL, its tokens' iss.
	Issuer string
	// Admin is its admin API's URL.
	Admin string
	hc    *http.Client
}

// New returns the test Hydra, skipping the test without one (failing it
// under CI).
func New(t testing.TB) *Hydra {
	t.Helper()
	s := testenv.HydraServer(t)
	hc := &http.Client{Timeout: 30 * time.Second}
	t.Cleanup(hc.CloseIdleConnections)
	return &Hydra{Issuer: s.Public, Admin: s.Admin, hc: hc}
}

// admin calls Hydra's admin API: method path with in as JSON (nil: no
// body), the JSON answer into out (nil: dropped). A status other than
// want fails the test.
func (h *Hydra) admin(t testing.TB, method, path string, in, out any, want int) {
	t.Helper()
	var body io.Reader
	if in != nil {
		b, err := json.Marshal(in)
		if err != nil {
			t.Fatal(err)
		}
		body = bytes.NewReader(b)
	}
	req, err := http.NewRequestWithContext(t.Context(), method, h.Admin+path, body)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := h.hc.Do(req)
	if err != nil {
		t.Fatalf("hydra %s %s: %v", method, path, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != want {
		t.Fatalf("hydra %s %s: %s: %s", method, path, resp.Status, b)
	}
	if out != nil {
		if err := json.Unmarshal(b, out); err != nil {
			t.Fatalf("hydra %s %s: %v: %s", method, path, err, b)
		}
	}
}

// Client is an OAuth2 client registered at Hydra.
type Client struct {
	ID, Secret  string
	RedirectURL string
}

// CreateClient registers a confidential client (client_secret_basic) whose
// redirect URI is redirect, for the authorization code flow; it is deleted
// when the test ends.
func (h *Hydra) CreateClient(t testing.TB, redirect string, audience ...string) Client {
	t.Helper()
	return h.CreateClientWith(t, NewClientID(), rand.Text(), redirect, audience...)
}

// NewClientID is a client ID of its own, for CreateClientWith.
func NewClientID() string { return "cairn-test-" + strings.ToLower(rand.Text()[:12]) }

// CreateClientWith is CreateClient with a client ID and secret chosen
// beforehand (a relying party configured before its redirect URI is
// known).
// Tokens may be asked for audience: the access tokens' audiences (Hydra's
// are JWTs, a password cairn takes).
func (h *Hydra) CreateClientWith(t testing.TB, id, secret, redirect string, audience ...string) Client {
	t.Helper()
	c := Client{ID: id, Secret: secret, RedirectURL: redirect}
	if audience == nil {
		audience = []string{}
	}
	h.admin(t, http.MethodPost, "/admin/clients", map[string]any{
		"audience":                   audience,
		"client_id":                  c.ID,
		"client_secret":              c.Secret,
		"redirect_uris":              []string{redirect},
		"grant_types":                []string{"authorization_code", "refresh_token"},
		"response_types":             []string{"code"},
		"scope":                      "openid profile email groups offline_access",
		"token_endpoint_auth_method": "client_secret_basic",
	}, nil, http.StatusCreated)
	t.Cleanup(func() {
		// A client left behind harms nobody: its ID is the test's own.
		if err := h.call(context.Background(), http.MethodDelete, "/admin/clients/"+c.ID, nil, nil); err != nil {
			t.Logf("deleting the client: %v", err)
		}
	})
	return c
}

// Config is c's OAuth2 configuration at h.
func (h *Hydra) Config(c Client, scopes ...string) *oauth2.Config {
	if len(scopes) == 0 {
		scopes = []string{"openid", "profile", "groups"}
	}
	return &oauth2.Config{
		ClientID: c.ID, ClientSecret: c.Secret, RedirectURL: c.RedirectURL, Scopes: scopes,
		Endpoint: oauth2.Endpoint{AuthURL: h.Issuer + "/oauth2/auth", TokenURL: h.Issuer + "/oauth2/token", AuthStyle: oauth2.AuthStyleInHeader},
	}
}

// User is who the login app logs in: the subject and preferred_username
// Name, with Groups in the groups claim.
type User struct {
	Name   string
	Groups []string
}

// Login is a login and consent app that accepts every login as its user.
type Login struct {
	h    *Hydra
	user User
	srv  *httptest.Server
}

// ServeLogin starts the login and consent app of user, stopped when the
// test ends.
func (h *Hydra) ServeLogin(t testing.TB, user User) *Login {
	t.Helper()
	l := &Login{h: h, user: user}
	mux := http.NewServeMux()
	mux.HandleFunc("GET /login", l.login)
	mux.HandleFunc("GET /consent", l.consent)
	mux.HandleFunc("GET /error", func(w http.ResponseWriter, r *http.Request) {
		http.Error(w, "hydra error: "+r.URL.Query().Get("error")+": "+r.URL.Query().Get("error_description"), http.StatusBadRequest)
	})
	l.srv = httptest.NewServer(mux)
	t.Cleanup(l.srv.Close)
	return l
}

// Addr is the app's host:port, where LoginHost must lead.
func (l *Login) Addr() string { return l.srv.Listener.Addr().String() }

// ResolverRule is Chromium's --host-resolver-rules value that leads
// LoginHost to the app.
func (l *Login) ResolverRule() string { return "MAP " + LoginHost + " " + l.Addr() }

// Transport is an http.Transport that leads LoginHost to the app.
func (l *Login) Transport() *http.Transport {
	d := &net.Dialer{Timeout: 10 * time.Second}
	return &http.Transport{DialContext: func(ctx context.Context, network, addr string) (net.Conn, error) {
		if host, _, _ := net.SplitHostPort(addr); host == LoginHost {
			addr = l.Addr()
		}
		return d.DialContext(ctx, network, addr)
	}}
}

// redirect is the admin API's answer to an accept.
type redirect struct {
	To string `json:"redirect_to"`
}

func (l *Login) login(w http.ResponseWriter, r *http.Request) {
	ch := r.URL.Query().Get("login_challenge")
	var out redirect
	if err := l.h.put(r.Context(), "/admin/oauth2/auth/requests/login/accept?login_challenge="+url.QueryEscape(ch),
		map[string]any{"subject": l.user.Name}, &out); err != nil {
		http.Error(w, err.Error(), http.StatusBadGateway)
		return
	}
	http.Redirect(w, r, out.To, http.StatusFound)
}

func (l *Login) consent(w http.ResponseWriter, r *http.Request) {
	ch := r.URL.Query().Get("consent_challenge")
	var req struct {
		Scopes   []string `json:"requested_scope"`
		Audience []string `json:"requested_access_token_audience"`
	}
	if err := l.h.get(r.Context(), "/admin/oauth2/auth/requests/consent?consent_challenge="+url.QueryEscape(ch), &req); err != nil {
		http.Error(w, err.Error(), http.StatusBadGateway)
		return
	}
	claims := map[string]any{"preferred_username": l.user.Name, "groups": l.user.Groups}
	var out redirect
	if err := l.h.put(r.Context(), "/admin/oauth2/auth/requests/consent/accept?consent_challenge="+url.QueryEscape(ch), map[string]any{
		"grant_scope":                 req.Scopes,
		"grant_access_token_audience": req.Audience,
		"session":                     map[string]any{"id_token": claims, "access_token": claims},
	}, &out); err != nil {
		http.Error(w, err.Error(), http.StatusBadGateway)
		return
	}
	http.Redirect(w, r, out.To, http.StatusFound)
}

// put and get call the admin API from the app's handlers (no testing.TB
// there: the browser is told of failures).
func (h *Hydra) put(ctx context.Context, path string, in, out any) error {
	b, err := json.Marshal(in)
	if err != nil {
		return err
	}
	return h.call(ctx, http.MethodPut, path, bytes.NewReader(b), out)
}

func (h *Hydra) get(ctx context.Context, path string, out any) error {
	return h.call(ctx, http.MethodGet, path, nil, out)
}

func (h *Hydra) call(ctx context.Context, method, path string, body io.Reader, out any) error {
	req, err := http.NewRequestWithContext(ctx, method, h.Admin+path, body)
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := h.hc.Do(req)
	if err != nil {
		return fmt.Errorf("hydra admin %s: %w", path, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode/100 != 2 {
		return fmt.Errorf("hydra admin %s: %s: %s", path, resp.Status, b)
	}
	if out == nil {
		return nil
	}
	return json.Unmarshal(b, out)
}

// IDToken logs the app's user in to client c as a browser would (the
// authorization code flow with PKCE, state and nonce, cookies kept between
// Hydra and the app) and returns the ID token of the exchange. c's redirect
// URI is never visited: the flow stops at Hydra's redirect to it.
func (l *Login) IDToken(t testing.TB, c Client) string {
	t.Helper()
	tok := l.Exchange(t, c)
	raw, _ := tok.Extra("id_token").(string)
	if raw == "" {
		t.Fatalf("hydra's token response has no id_token: %+v", tok)
	}
	return raw
}

// AccessToken logs the app's user in to client c, as IDToken does, asking
// for an access token of audience, and returns it.
func (l *Login) AccessToken(t testing.TB, c Client, audience string) string {
	t.Helper()
	return l.Exchange(t, c, oauth2.SetAuthURLParam("audience", audience)).AccessToken
}

// Exchange is IDToken's flow, returning the whole token response; opts
// add parameters to the authorization request.
func (l *Login) Exchange(t testing.TB, c Client, opts ...oauth2.AuthCodeOption) *oauth2.Token {
	t.Helper()
	cfg := l.h.Config(c)
	jar, err := cookiejar.New(nil)
	if err != nil {
		t.Fatal(err)
	}
	hc := &http.Client{Transport: l.Transport(), Jar: jar, Timeout: 30 * time.Second,
		CheckRedirect: func(req *http.Request, via []*http.Request) error {
			if strings.HasPrefix(req.URL.String(), c.RedirectURL) {
				return http.ErrUseLastResponse // the code: ours to take
			}
			if len(via) > 20 {
				return fmt.Errorf("%d redirects", len(via))
			}
			return nil
		}}
	defer hc.CloseIdleConnections()
	state, nonce, verifier := rand.Text(), rand.Text(), oauth2.GenerateVerifier()
	authURL := cfg.AuthCodeURL(state, append(opts, oauth2.SetAuthURLParam("nonce", nonce), oauth2.S256ChallengeOption(verifier))...)
	req, err := http.NewRequestWithContext(t.Context(), http.MethodGet, authURL, nil)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := hc.Do(req)
	if err != nil {
		t.Fatalf("authorization code flow: %v", err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	loc, err := resp.Location()
	if resp.StatusCode/100 != 3 || err != nil {
		t.Fatalf("authorization code flow ended at %s with %s, not the redirect URI: %s", resp.Request.URL, resp.Status, body)
	}
	q := loc.Query()
	if q.Get("state") != state || q.Get("code") == "" {
		t.Fatalf("redirect to %s: want the state sent and a code", loc)
	}
	ctx := context.WithValue(t.Context(), oauth2.HTTPClient, l.h.hc)
	tok, err := cfg.Exchange(ctx, q.Get("code"), oauth2.VerifierOption(verifier))
	if err != nil {
		t.Fatalf("exchanging the code: %v", err)
	}
	return tok
}

// NewIDTokenKey adds a key (RS256) to Hydra's ID-token key set and returns
// it with its private half. Hydra signs its ID tokens with the newest key
// of the set from then on: a rotation its relying parties must follow.
func (h *Hydra) NewIDTokenKey(t testing.TB) jose.JSONWebKey {
	t.Helper()
	var set jose.JSONWebKeySet
	h.admin(t, http.MethodPost, "/admin/keys/"+IDTokenKeySet, map[string]any{
		"alg": "RS256", "use": "sig", "kid": "cairn-test-" + strings.ToLower(rand.Text()[:12]),
	}, &set, http.StatusCreated)
	for _, k := range set.Keys {
		if !k.IsPublic() {
			return k
		}
	}
	t.Fatalf("hydra returned no private key: %d keys", len(set.Keys))
	return jose.JSONWebKey{}
}
