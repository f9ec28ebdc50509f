package auth

import (
	"crypto"
	"crypto/sha256"
	"crypto/x509"
	"encoding/base32"
	"encoding/base64"
	"encoding/json"
	"encoding/pem"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/go-jose/go-jose/v4"
	"github.com/go-jose/go-jose/v4/jwt"
)

// TokenOptions configure token authentication (distribution's auth.token).
type TokenOptions struct {
	// Realm is the token server's URL, named in challenges.
	Realm string
	// Service is this registry's name: named in challenges, and required
	// in a token's audience.
	Service string
	// Issuer must equal a token's iss claim.
	Issuer string
	// RootCertBundle is a PEM file of certificates. A token whose x5c
	// chain verifies up to one of them is trusted, and so is a token whose
	// kid names one of their public keys (by RFC 7638 thumbprint or by the
	// libtrust key ID of distribution 2.x token servers).
	RootCertBundle string
	// JWKS is a JSON Web Key Set file; a token whose kid names one of its
	// keys is verified with that key.
	JWKS string
	// SigningAlgorithms restricts the accepted "alg" values. Empty means
	// every asymmetric algorithm (EdDSA, ES*, RS*, PS*). HMAC algorithms
	// are accepted only when listed here, and only with symmetric JWKS keys.
	SigningAlgorithms []string
	// AutoRedirect makes the challenge's realm this host's
	// AutoRedirectPath (default /auth/token) instead of Realm.
	AutoRedirect     bool
	AutoRedirectPath string
	// PublicKeys are trusted signing keys given in memory (cairn's own
	// token service), beside those of RootCertBundle and JWKS.
	PublicKeys []crypto.PublicKey
	// Valid, when set, is asked about every verified token's grant,
	// cached or not, before it is used: cairn's token service refuses the
	// tokens of a revoked robot key at once, whatever their expiry.
	Valid func(Grant) error
	// Now returns the current time; nil means time.Now (tests set it).
	Now func() time.Time
}

// tokenLeeway absorbs clock skew between token server and registry on exp
// and nbf, as distribution does.
const tokenLeeway = 60 * time.Second

var asymmetricAlgorithms = []jose.SignatureAlgorithm{
	jose.EdDSA,
	jose.ES256, jose.ES384, jose.ES512,
	jose.RS256, jose.RS384, jose.RS512,
	jose.PS256, jose.PS384, jose.PS512,
}

var knownAlgorithms = append([]jose.SignatureAlgorithm{jose.HS256, jose.HS384, jose.HS512}, asymmetricAlgorithms...)

// Token authorizes requests carrying Bearer tokens: JWTs signed by a
// trusted key, issued by Issuer for Service, unexpired, whose access claims
// cover what the request needs.
type Token struct {
	opts  TokenOptions
	algs  []jose.SignatureAlgorithm
	roots *x509.CertPool // nil without a rootcertbundle
	keys  map[string]any // kid -> public key (or []byte for HMAC)
	cache *grantCache
}

// NewToken loads the certificates and keys opts name.
func NewToken(opts TokenOptions) (*Token, error) {
	t := &Token{opts: opts, keys: make(map[string]any), cache: &grantCache{m: make(map[[32]byte]cachedGrant)}}
	if t.opts.Now == nil {
		t.opts.Now = time.Now
	}
	if t.opts.AutoRedirect && t.opts.AutoRedirectPath == "" {
		t.opts.AutoRedirectPath = "/auth/token"
	}
	var err error
	if t.algs, err = signingAlgorithms(opts.SigningAlgorithms); err != nil {
		return nil, fmt.Errorf("signingalgorithms: %w", err)
	}
	if opts.RootCertBundle != "" {
		certs, err := loadCertificates(opts.RootCertBundle)
		if err != nil {
			return nil, fmt.Errorf("rootcertbundle: %w", err)
		}
		t.roots = x509.NewCertPool()
		for _, c := range certs {
			t.roots.AddCert(c)
			for _, id := range keyIDs(c.PublicKey) {
				t.keys[id] = c.PublicKey
			}
		}
	}
	if opts.JWKS != "" {
		if err := t.loadJWKS(opts.JWKS); err != nil {
			return nil, fmt.Errorf("jwks: %w", err)
		}
	}
	for _, pub := range opts.PublicKeys {
		for _, id := range keyIDs(pub) {
			t.keys[id] = pub
		}
	}
	if len(t.keys) == 0 {
		return nil, errors.New("no token signing key: give rootcertbundle or jwks with at least one key")
	}
	return t, nil
}

func signingAlgorithms(names []string) ([]jose.SignatureAlgorithm, error) {
	if len(names) == 0 {
		return asymmetricAlgorithms, nil
	}
	var out []jose.SignatureAlgorithm
	for _, n := range names {
		found := false
		for _, a := range knownAlgorithms {
			if string(a) == n {
				out, found = append(out, a), true
			}
		}
		if !found {
			return nil, fmt.Errorf("%q is not a supported signing algorithm (EdDSA, ES256/384/512, RS256/384/512, PS256/384/512, HS256/384/512)", n)
		}
	}
	return out, nil
}

func loadCertificates(path string) ([]*x509.Certificate, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var certs []*x509.Certificate
	for {
		var block *pem.Block
		block, b = pem.Decode(b)
		if block == nil {
			break
		}
		if block.Type != "CERTIFICATE" {
			continue
		}
		c, err := x509.ParseCertificate(block.Bytes)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", path, err)
		}
		certs = append(certs, c)
	}
	if len(certs) == 0 {
		return nil, fmt.Errorf("%s: no PEM certificate found", path)
	}
	return certs, nil
}

func (t *Token) loadJWKS(path string) error {
	b, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	var set jose.JSONWebKeySet
	if err := json.Unmarshal(b, &set); err != nil {
		return fmt.Errorf("%s: %w", path, err)
	}
	for i, k := range set.Keys {
		if !k.Valid() {
			return fmt.Errorf("%s: key %d (kid %q) is not a valid key", path, i, k.KeyID)
		}
		var key any
		if sym, ok := k.Key.([]byte); ok {
			key = sym
		} else {
			pub := k.Public()
			if pub.Key == nil {
				return fmt.Errorf("%s: key %d (kid %q) has no public key", path, i, k.KeyID)
			}
			key = pub.Key
			for _, id := range keyIDs(key) {
				t.keys[id] = key
			}
		}
		if k.KeyID != "" {
			t.keys[k.KeyID] = key
		}
	}
	return nil
}

// keyIDs returns the kid values a token server may use for pub: its RFC
// 7638 thumbprint (distribution 3) and its libtrust key ID (distribution 2
// and the token servers written for it).
func keyIDs(pub any) []string {
	var ids []string
	if tp, err := (&jose.JSONWebKey{Key: pub}).Thumbprint(crypto.SHA256); err == nil {
		ids = append(ids, base64.RawURLEncoding.EncodeToString(tp))
	}
	if der, err := x509.MarshalPKIXPublicKey(pub); err == nil {
		sum := sha256.Sum256(der)
		s := strings.TrimRight(base32.StdEncoding.EncodeToString(sum[:30]), "=")
		var b strings.Builder
		for i := 0; i < len(s); i += 4 {
			if i > 0 {
				b.WriteByte(':')
			}
			b.WriteString(s[i:min(i+4, len(s))])
		}
		ids = append(ids, b.String())
	}
	return ids
}

// tokenClaims are the claims of a registry token.
type tokenClaims struct {
	jwt.Claims
	Access []struct {
		Type    string   `json:"type"`
		Name    string   `json:"name"`
		Actions []string `json:"actions"`
	} `json:"access"`
	// Robot names the robot key a token of cairn's own token service was
	// issued for (its ID), so that revoking the key ends the token too.
	Robot string `json:"cairn_robot,omitempty"`
}

// verifyCached is verify, remembering tokens that passed: a client sends
// the same token with every request of a pull, and checking a signature
// and a certificate chain each time would cost more than the request.
func (t *Token) verifyCached(raw string) (Grant, error) {
	key := sha256.Sum256([]byte(raw))
	now := t.opts.Now()
	if g, ok := t.cache.get(key, now); ok {
		return g, nil
	}
	g, until, err := t.verify(raw)
	if err != nil {
		return Grant{}, err
	}
	if limit := now.Add(grantCacheTTL); until.After(limit) {
		until = limit
	}
	t.cache.put(key, g, until)
	return g, nil
}

// grantCacheTTL bounds how long a verified token is trusted without
// checking it again (its own expiry still applies within that time).
const (
	grantCacheTTL = time.Minute
	grantCacheMax = 4096
)

type cachedGrant struct {
	g     Grant
	until time.Time
}

type grantCache struct {
	mu sync.Mutex
	m  map[[32]byte]cachedGrant
}

func (c *grantCache) get(k [32]byte, now time.Time) (Grant, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	e, ok := c.m[k]
	if !ok {
		return Grant{}, false
	}
	if !now.Before(e.until) {
		delete(c.m, k)
		return Grant{}, false
	}
	return e.g, true
}

func (c *grantCache) put(k [32]byte, g Grant, until time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if len(c.m) >= grantCacheMax {
		clear(c.m)
	}
	c.m[k] = cachedGrant{g, until}
}

// verify checks a raw token and returns the grant its claims describe and
// the time after which the token is no longer valid.
func (t *Token) verify(raw string) (Grant, time.Time, error) {
	tok, err := jwt.ParseSigned(raw, t.algs)
	if err != nil {
		return Grant{}, time.Time{}, fmt.Errorf("malformed token or algorithm not accepted: %w", err)
	}
	if len(tok.Headers) != 1 {
		return Grant{}, time.Time{}, errors.New("token must have exactly one signature")
	}
	key, err := t.signingKey(tok.Headers[0])
	if err != nil {
		return Grant{}, time.Time{}, err
	}
	var c tokenClaims
	if err := tok.Claims(key, &c); err != nil {
		return Grant{}, time.Time{}, fmt.Errorf("signature: %w", err)
	}
	if c.Expiry == nil {
		return Grant{}, time.Time{}, errors.New("token has no expiry (exp)")
	}
	if err := c.ValidateWithLeeway(jwt.Expected{
		Issuer:      t.opts.Issuer,
		AnyAudience: jwt.Audience{t.opts.Service},
		Time:        t.opts.Now(),
	}, tokenLeeway); err != nil {
		return Grant{}, time.Time{}, err
	}
	g := Grant{Subject: c.Subject, access: make(map[resource][]string, len(c.Access)), robotID: c.Robot}
	for _, a := range c.Access {
		r := resource{a.Type, a.Name}
		g.access[r] = append(g.access[r], a.Actions...)
	}
	return g, c.Expiry.Time().Add(tokenLeeway), nil
}

// signingKey finds the trusted key a token header names: an x5c chain
// that verifies up to a root certificate, or a kid (or embedded jwk) that
// names a trusted key. A key the header carries is never trusted by itself.
func (t *Token) signingKey(h jose.Header) (any, error) {
	roots := t.roots
	if roots == nil {
		// An empty pool, never the system's: a public CA's certificate
		// must not sign registry tokens.
		roots = x509.NewCertPool()
	}
	chains, err := h.Certificates(x509.VerifyOptions{
		Roots:       roots,
		CurrentTime: t.opts.Now(),
		KeyUsages:   []x509.ExtKeyUsage{x509.ExtKeyUsageAny},
	})
	switch {
	case err == nil:
		return chains[0][0].PublicKey, nil
	case !errors.Is(err, jose.ErrMissingX5cHeader):
		return nil, fmt.Errorf("x5c chain: %w", err)
	}
	if h.KeyID != "" {
		if k, ok := t.keys[h.KeyID]; ok {
			return k, nil
		}
		return nil, fmt.Errorf("token signed by an untrusted key (kid %q)", h.KeyID)
	}
	if h.JSONWebKey != nil {
		for _, id := range keyIDs(h.JSONWebKey.Key) {
			if k, ok := t.keys[id]; ok {
				return k, nil
			}
		}
		return nil, errors.New("token signed by an untrusted jwk")
	}
	return nil, errors.New("token names no signing key (x5c, kid or jwk)")
}

// Authorize implements Authorizer.
func (t *Token) Authorize(r *http.Request, need []Access) (Grant, error) {
	scheme, raw, ok := strings.Cut(r.Header.Get("Authorization"), " ")
	if !ok || !strings.EqualFold(scheme, "Bearer") || strings.TrimSpace(raw) == "" {
		return Grant{}, t.challenge(r, ErrNoCredentials, need, "")
	}
	g, err := t.verifyCached(strings.TrimSpace(raw))
	if err == nil && t.opts.Valid != nil {
		err = t.opts.Valid(g)
	}
	if err != nil {
		return Grant{}, t.challenge(r, fmt.Errorf("%w: %w", ErrInvalidCredentials, err), need, "invalid_token")
	}
	if missing := g.missing(need); len(missing) > 0 {
		return g, t.challenge(r, fmt.Errorf("%w: %s lacks %s", ErrInsufficientScope, subject(g), Scope(missing)), need, "insufficient_scope")
	}
	return g, nil
}

func subject(g Grant) string {
	if g.Subject == "" {
		return "token"
	}
	return fmt.Sprintf("token of %q", g.Subject)
}

// challenge builds a Bearer challenge naming realm, service and the scope
// the request needs (RFC 6750 section 3, as the token spec uses it).
func (t *Token) challenge(r *http.Request, err error, need []Access, code string) *Challenge {
	realm := t.opts.Realm
	if t.opts.AutoRedirect {
		scheme := "https"
		if r.TLS == nil {
			scheme = "http"
		}
		realm = (&url.URL{Scheme: scheme, Host: r.Host, Path: t.opts.AutoRedirectPath}).String()
	}
	h := fmt.Sprintf("Bearer realm=%q,service=%q", realm, t.opts.Service)
	if s := Scope(need); s != "" {
		h += fmt.Sprintf(",scope=%q", s)
	}
	if code != "" {
		h += fmt.Sprintf(",error=%q", code)
	}
	return &Challenge{err: err, header: h, need: need}
}
