package auth

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/coreos/go-oidc/v3/oidc"
)

// SourceOIDC is the OIDC source's Name.
const SourceOIDC = "oidc"

// OIDC is an OpenID Connect provider as an identity source. For the CLI
// (docker login, crane, podman), a token the provider issued is the
// password: an ID token, or an access token that is a JWT, whose issuer is
// the configured one, whose signature verifies against the provider's keys
// (its JWKS, fetched again when a token names a key not seen yet, so that
// the provider's key rotation needs nothing here), whose audience names one
// of the accepted audiences, and which has not expired. The user name must
// be the token's user-name claim (UsernameClaim): a token proves who it
// names, not who the client says, so that nobody becomes another user (an
// admin's name in the policy) by typing that name beside their own token.
// The token's groups claim gives the identity's groups, which access
// control's policies meet as they meet LDAP's.
//
// A password that is not a JWT of this issuer is not this source's: its
// Authenticate says ErrUnknownUser and the next source is asked, so OIDC
// goes before sources that would try any password (LDAP). The web page's
// login (OIDCWeb) uses the same provider and claims.
//
// The provider is discovered at the first login, not at start-up, so that
// a provider down when cairn starts costs its logins, not the registry;
// a failed discovery is retried at most every discoveryRetry.
type OIDC struct {
	opts OIDCOptions
	hc   *http.Client

	mu        sync.Mutex
	provider  *oidc.Provider
	verifier  *oidc.IDTokenVerifier
	failedAt  time.Time
	failedErr error
}

// OIDCOptions configure an OIDC source (auth.oidc).
type OIDCOptions struct {
	// Issuer is the provider's issuer URL (its discovery document is
	// Issuer/.well-known/openid-configuration).
	Issuer string
	// ClientID and ClientSecret are cairn's client at the provider, for
	// the web page's login; ClientSecret is empty for a public client.
	ClientID, ClientSecret string
	// Audiences are the audiences accepted in tokens given as passwords
	// (one of a token's must be among them); empty means ClientID.
	Audiences []string
	// UsernameClaim is the claim whose value is the user name (default
	// preferred_username); GroupsClaim the claim of the groups (default
	// groups; a list of strings or one string).
	UsernameClaim, GroupsClaim string
	// Scopes are asked for at the web page's login (default openid,
	// profile, email; openid is always asked).
	Scopes []string
	// HTTPClient talks to the provider; nil means a client with a 10s
	// timeout.
	HTTPClient *http.Client
	// Now returns the current time; nil means time.Now.
	Now func() time.Time
}

// Defaults of OIDCOptions.
const (
	DefaultOIDCUsernameClaim = "preferred_username"
	DefaultOIDCGroupsClaim   = "groups"
	discoveryRetry           = 5 * time.Second
	providerTimeout          = 10 * time.Second
)

// NewOIDC returns the OIDC source of opts. It does not reach the provider.
func NewOIDC(opts OIDCOptions) (*OIDC, error) {
	if opts.Issuer == "" {
		return nil, errors.New("oidc: issuer is required")
	}
	if opts.ClientID == "" && len(opts.Audiences) == 0 {
		return nil, errors.New("oidc: clientid or audiences is required")
	}
	if len(opts.Audiences) == 0 {
		opts.Audiences = []string{opts.ClientID}
	}
	if opts.UsernameClaim == "" {
		opts.UsernameClaim = DefaultOIDCUsernameClaim
	}
	if opts.GroupsClaim == "" {
		opts.GroupsClaim = DefaultOIDCGroupsClaim
	}
	if len(opts.Scopes) == 0 {
		opts.Scopes = []string{oidc.ScopeOpenID, "profile", "email"}
	}
	if !slices.Contains(opts.Scopes, oidc.ScopeOpenID) {
		opts.Scopes = append([]string{oidc.ScopeOpenID}, opts.Scopes...)
	}
	if opts.Now == nil {
		opts.Now = time.Now
	}
	hc := opts.HTTPClient
	if hc == nil {
		hc = &http.Client{Timeout: providerTimeout}
	}
	return &OIDC{opts: opts, hc: hc}, nil
}

var _ Source = (*OIDC)(nil)

// Name implements Source.
func (o *OIDC) Name() string { return SourceOIDC }

// uncachedLogins: a token is verified locally (the key set is cached), and
// a remembered login would outlive the token's expiry.
func (*OIDC) uncachedLogins() {}

// Authenticate implements Source: pass is a token of the provider, user
// its user-name claim.
func (o *OIDC) Authenticate(ctx context.Context, user, pass string) ([]string, error) {
	if !o.ours(pass) {
		return nil, fmt.Errorf("%w: the password is not a token of %s", ErrUnknownUser, o.opts.Issuer)
	}
	c, err := o.verify(ctx, pass, o.opts.Audiences)
	if err != nil {
		return nil, err
	}
	if c.name != user {
		return nil, fmt.Errorf("the token is %s's (claim %s), not %q's", c.name, o.opts.UsernameClaim, user)
	}
	return c.groups, nil
}

// ours reports whether raw looks like a JWT whose (unverified) issuer is
// the provider's: whether this source should be the one to judge it.
func (o *OIDC) ours(raw string) bool {
	parts := strings.Split(raw, ".")
	if len(parts) != 3 {
		return false
	}
	payload, err := base64.RawURLEncoding.DecodeString(parts[1])
	if err != nil {
		return false
	}
	var c struct {
		Issuer string `json:"iss"`
	}
	return json.Unmarshal(payload, &c) == nil && c.Issuer == o.opts.Issuer
}

// claims are what cairn takes from a verified token.
type claims struct {
	name   string
	groups []string
	expiry time.Time
	nonce  string
}

// verify checks raw (signature, issuer, expiry, one of audiences) and reads
// its user name and groups.
func (o *OIDC) verify(ctx context.Context, raw string, audiences []string) (claims, error) {
	v, err := o.discover(ctx)
	if err != nil {
		return claims{}, err
	}
	tok, err := v.Verify(oidc.ClientContext(ctx, o.hc), raw)
	if err != nil {
		return claims{}, fmt.Errorf("token: %w", err)
	}
	if !slices.ContainsFunc(tok.Audience, func(a string) bool { return slices.Contains(audiences, a) }) {
		return claims{}, fmt.Errorf("token: audience %q is not one of %q", tok.Audience, audiences)
	}
	var all map[string]any
	if err := tok.Claims(&all); err != nil {
		return claims{}, fmt.Errorf("token claims: %w", err)
	}
	c := claims{expiry: tok.Expiry, nonce: tok.Nonce}
	name, _ := all[o.opts.UsernameClaim].(string)
	if name == "" {
		return claims{}, fmt.Errorf("token: no user name in claim %q", o.opts.UsernameClaim)
	}
	if o.opts.UsernameClaim == "email" {
		// An address the provider did not verify names nobody yet.
		if verified, ok := all["email_verified"].(bool); ok && !verified {
			return claims{}, fmt.Errorf("token: email %q is not verified", name)
		}
	}
	c.name = name
	switch g := all[o.opts.GroupsClaim].(type) {
	case nil:
	case string:
		c.groups = []string{g}
	case []any:
		for _, x := range g {
			s, ok := x.(string)
			if !ok || s == "" {
				return claims{}, fmt.Errorf("token: claim %q holds a group that is not a name: %v", o.opts.GroupsClaim, x)
			}
			c.groups = append(c.groups, s)
		}
	default:
		return claims{}, fmt.Errorf("token: claim %q is not a list of group names", o.opts.GroupsClaim)
	}
	return c, nil
}

// discover returns the verifier of the provider, discovering it at the
// first call (and after a failure, at most every discoveryRetry).
func (o *OIDC) discover(ctx context.Context) (*oidc.IDTokenVerifier, error) {
	p, err := o.providerOf(ctx)
	if err != nil {
		return nil, err
	}
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.verifier == nil {
		// The audience is checked by verify, against several audiences;
		// go-oidc's check takes one.
		o.verifier = p.Verifier(&oidc.Config{SkipClientIDCheck: true, Now: o.opts.Now})
	}
	return o.verifier, nil
}

func (o *OIDC) providerOf(ctx context.Context) (*oidc.Provider, error) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.provider != nil {
		return o.provider, nil
	}
	if o.failedErr != nil && o.opts.Now().Sub(o.failedAt) < discoveryRetry {
		return nil, o.failedErr
	}
	// The provider keeps the client of this context for its key set;
	// the request's cancellation must not end a discovery others wait on.
	dctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), providerTimeout)
	defer cancel()
	p, err := oidc.NewProvider(oidc.ClientContext(dctx, o.hc), o.opts.Issuer)
	if err != nil {
		o.failedAt, o.failedErr = o.opts.Now(), fmt.Errorf("%w: oidc discovery of %s: %w", ErrUnavailable, o.opts.Issuer, err)
		return nil, o.failedErr
	}
	o.provider, o.failedErr = p, nil
	return p, nil
}
