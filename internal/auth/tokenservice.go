package auth

import (
	"context"
	"crypto"
	"crypto/ecdsa"
	"crypto/ed25519"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/rsa"
	"crypto/x509"
	"encoding/json"
	"encoding/pem"
	"errors"
	"fmt"
	"io/fs"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/go-jose/go-jose/v4"
	"github.com/go-jose/go-jose/v4/jwt"
)

// TokenPath is where cairn serves its token service.
const TokenPath = "/auth/token"

// TokenService is cairn's own token server (distribution's token
// protocol) and the authorizer that verifies its tokens.
//
// Life of a token: a client refused with the challenge `Bearer
// realm=".../auth/token",service=..,scope=..` asks the realm for a token:
// GET with Basic credentials (or none, for what anyone may do), or POST
// with grant_type=password or refresh_token (the spec's OAuth2 variant).
// Accounts checks the credentials; the token's access list is, for each
// requested scope, the actions the identity's grant allows, never more than
// asked. The token is a JWT signed with cairn's key, for Expiration; the
// client sends it as Bearer and the registry verifies it with the same
// Token verifier an external token server's tokens get, trusting only
// cairn's key. A robot key's tokens name the key, and are refused as soon
// as it is revoked or expires. A refresh token (offline_token=true, or
// access_type=offline) is a JWT of another audience naming the user and the
// fingerprint of their password hash, or the robot key: it stops working
// when the password changes or the key goes.
type TokenService struct {
	opts     TokenServiceOptions
	alg      jose.SignatureAlgorithm
	kid      string
	signer   jose.Signer
	pub      crypto.PublicKey
	verifier *Token
	grants   grants
}

// TokenServiceOptions configure the token service (auth.tokenservice).
type TokenServiceOptions struct {
	// Realm is the token service's URL in challenges; "" names TokenPath
	// on the host each request came to.
	Realm string
	// Service names this registry: tokens' audience, and the service
	// clients must ask for.
	Service string
	// Issuer is tokens' iss.
	Issuer string
	// Expiration is how long a token is valid; RefreshExpiration how long
	// a refresh token is.
	Expiration, RefreshExpiration time.Duration
	// Key signs tokens (LoadSigningKey).
	Key crypto.Signer
	// Accounts checks credentials.
	Accounts *Accounts
	// BasicRealm is the realm of the Basic challenge that requests marked
	// by PreferBasic get (the web page: browsers prompt only for Basic).
	BasicRealm string
	// AccessControl (nil: every user may do everything) and AnonymousPull
	// decide what identities may do, as for Basic.
	AccessControl *AccessControl
	AnonymousPull bool
	// Now returns the current time; nil means time.Now.
	Now func() time.Time
}

// maxScopes bounds the scopes of one token request.
const maxScopes = 64

// NewTokenService returns the token service of opts.
func NewTokenService(opts TokenServiceOptions) (*TokenService, error) {
	if opts.Now == nil {
		opts.Now = time.Now
	}
	if opts.Service == "" || opts.Issuer == "" || opts.Key == nil || opts.Accounts == nil {
		return nil, errors.New("token service: service, issuer, key and accounts are required")
	}
	if opts.Expiration <= 0 || opts.RefreshExpiration <= 0 {
		return nil, errors.New("token service: expirations must be positive")
	}
	s := &TokenService{opts: opts, pub: opts.Key.Public()}
	var err error
	if s.alg, err = signingAlgorithm(opts.Key); err != nil {
		return nil, err
	}
	ids := keyIDs(s.pub)
	if len(ids) == 0 {
		return nil, errors.New("token service: the key has no key ID")
	}
	s.kid = ids[0]
	s.signer, err = jose.NewSigner(jose.SigningKey{Algorithm: s.alg, Key: opts.Key},
		(&jose.SignerOptions{}).WithType("JWT").WithHeader(jose.HeaderKey("kid"), s.kid))
	if err != nil {
		return nil, fmt.Errorf("token service: %w", err)
	}
	if s.grants, err = newGrants(opts.AccessControl, opts.AnonymousPull); err != nil {
		return nil, err
	}
	s.verifier, err = NewToken(TokenOptions{
		Realm:            opts.Realm,
		Service:          opts.Service,
		Issuer:           opts.Issuer,
		PublicKeys:       []crypto.PublicKey{s.pub},
		AutoRedirect:     opts.Realm == "",
		AutoRedirectPath: TokenPath,
		Valid:            s.stillValid,
		Now:              opts.Now,
	})
	if err != nil {
		return nil, fmt.Errorf("token service: %w", err)
	}
	return s, nil
}

// PublicKey is the key that verifies the service's tokens.
func (s *TokenService) PublicKey() crypto.PublicKey { return s.pub }

// stillValid refuses the tokens of a robot key that is no longer valid.
func (s *TokenService) stillValid(g Grant) error {
	if g.robotID == "" {
		return nil
	}
	if s.opts.Accounts.robots == nil {
		return errors.New("robot keys are not enabled")
	}
	_, err := s.opts.Accounts.robots.valid(g.robotID, s.opts.Now())
	return err
}

var _ Authorizer = (*TokenService)(nil)

// Authorize implements Authorizer: Bearer tokens of this service, and
// Basic credentials too (a client that sends them directly is served as
// Basic would serve it), both challenged with the Bearer challenge. What
// anyone may do needs no token.
func (s *TokenService) Authorize(r *http.Request, need []Access) (Grant, error) {
	if user, pass, ok := r.BasicAuth(); ok && (user != "" || pass != "") {
		id, err := s.opts.Accounts.Login(r, user, pass, ViaBasic)
		if err != nil {
			return Grant{}, s.challenge(r, err, need, "")
		}
		g := s.grants.of(&id)
		if missing := g.missing(need); len(missing) > 0 {
			return g, &Challenge{err: fmt.Errorf("%w: user %q", ErrInsufficientScope, id.Name), need: missing}
		}
		return g, nil
	}
	scheme, _, _ := strings.Cut(r.Header.Get("Authorization"), " ")
	if !strings.EqualFold(scheme, "Bearer") {
		g := s.grants.of(nil)
		if len(need) > 0 && len(g.missing(need)) == 0 {
			return g, nil
		}
		return g, s.challenge(r, ErrNoCredentials, need, "")
	}
	g, err := s.verifier.Authorize(r, need)
	if err != nil && s.opts.AnonymousPull && onlyPulls(need) && errors.Is(err, ErrInsufficientScope) {
		// What anyone may do needs no token, nor the right one.
		g.anonymousPull = true
		return g, nil
	}
	if err != nil && g.Subject == "" && errors.Is(err, ErrInsufficientScope) {
		// An anonymous token lacking an access: the client should log
		// in, as a request without credentials is told.
		return g, s.challenge(r, ErrNoCredentials, need, "")
	}
	return g, err
}

func (s *TokenService) challenge(r *http.Request, err error, need []Access, code string) *Challenge {
	switch {
	case errors.Is(err, ErrTooManyAttempts):
		return &Challenge{err: err, need: need}
	case r.Context().Value(preferBasicKey{}) != nil:
		return &Challenge{err: err, header: fmt.Sprintf("Basic realm=%q", s.opts.BasicRealm), need: need}
	}
	return s.verifier.challenge(r, err, need, code)
}

type preferBasicKey struct{}

// PreferBasic marks a request whose refusal should challenge Basic rather
// than Bearer: a browser visiting the web page prompts for a password only
// on a Basic challenge, and TokenService accepts Basic credentials too.
func PreferBasic(ctx context.Context) context.Context {
	return context.WithValue(ctx, preferBasicKey{}, true)
}

// tokenAccess is one entry of a token's access claim.
type tokenAccess struct {
	Type    string   `json:"type"`
	Name    string   `json:"name"`
	Actions []string `json:"actions"`
}

type issuedClaims struct {
	jwt.Claims
	Access []tokenAccess `json:"access"`
	Robot  string        `json:"cairn_robot,omitempty"`
}

type refreshClaims struct {
	jwt.Claims
	Robot string `json:"cairn_robot,omitempty"`
	Cred  string `json:"cairn_cred,omitempty"`
	// Source names the Source that proved the user (its Name); the
	// refresh resumes through its Lookup.
	Source string `json:"cairn_source,omitempty"`
}

// refreshAudience keeps refresh tokens from being taken for access tokens
// (whose audience is the service) and the other way round.
func (s *TokenService) refreshAudience() string { return "cairn-refresh:" + s.opts.Service }

// tokenResponse is the token endpoint's answer (token and access_token
// alike: clients read one or the other).
type tokenResponse struct {
	Token        string `json:"token,omitempty"`
	AccessToken  string `json:"access_token"`
	Scope        string `json:"scope,omitempty"`
	ExpiresIn    int    `json:"expires_in"`
	IssuedAt     string `json:"issued_at"`
	RefreshToken string `json:"refresh_token,omitempty"`
}

// ServeHTTP serves the token endpoint: GET as in the token spec, POST as
// in its OAuth2 variant.
func (s *TokenService) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("Cache-Control", "no-store")
	var (
		scopes  []string
		id      *Identity
		offline bool
		err     error
		get     = r.Method == http.MethodGet
	)
	switch r.Method {
	case http.MethodGet:
		q := r.URL.Query()
		if err := s.checkService(q.Get("service")); err != nil {
			tokenError(w, http.StatusBadRequest, "UNSUPPORTED", err.Error())
			return
		}
		scopes, offline = q["scope"], q.Get("offline_token") == "true"
		if user, pass, ok := r.BasicAuth(); ok && (user != "" || pass != "") {
			var i Identity
			if i, err = s.opts.Accounts.Login(r, user, pass, ViaToken); err == nil {
				id = &i
			}
		}
	case http.MethodPost:
		r.Body = http.MaxBytesReader(w, r.Body, 64<<10)
		if err := r.ParseForm(); err != nil {
			tokenError(w, http.StatusBadRequest, "UNSUPPORTED", "malformed form: "+err.Error())
			return
		}
		f := r.PostForm
		if err := s.checkService(f.Get("service")); err != nil {
			tokenError(w, http.StatusBadRequest, "UNSUPPORTED", err.Error())
			return
		}
		scopes = []string{f.Get("scope")}
		var i Identity
		switch f.Get("grant_type") {
		case "password":
			offline = f.Get("access_type") == "offline"
			i, err = s.opts.Accounts.Login(r, f.Get("username"), f.Get("password"), ViaToken)
		case "refresh_token":
			i, err = s.refresh(r, f.Get("refresh_token"))
		default:
			tokenError(w, http.StatusBadRequest, "UNSUPPORTED", "grant_type must be password or refresh_token")
			return
		}
		if err == nil {
			id = &i
		}
	default:
		w.Header().Set("Allow", "GET, POST")
		tokenError(w, http.StatusMethodNotAllowed, "UNSUPPORTED", "method not allowed")
		return
	}
	if err != nil {
		status, code, msg := http.StatusUnauthorized, "UNAUTHORIZED", "authentication required: invalid credentials"
		switch {
		case errors.Is(err, ErrTooManyAttempts):
			status, code, msg = http.StatusTooManyRequests, "TOOMANYREQUESTS", ErrTooManyAttempts.Error()
		case errors.Is(err, ErrUnavailable):
			// The directory could not be asked: the client should retry
			// later, not think its password wrong. Which source, and
			// why, goes to the log (the audit line), not to the client.
			status, code, msg = http.StatusServiceUnavailable, "UNAVAILABLE", "the identity source is unavailable; retry later"
		}
		tokenError(w, status, code, msg)
		return
	}
	need, err := ParseScopes(scopes)
	if err != nil {
		tokenError(w, http.StatusBadRequest, "UNSUPPORTED", err.Error())
		return
	}
	now := s.opts.Now()
	access, token, exp, err := s.issue(id, need, now)
	if err != nil {
		tokenError(w, http.StatusInternalServerError, "UNKNOWN", "issuing the token failed")
		return
	}
	resp := tokenResponse{AccessToken: token, ExpiresIn: int(exp.Sub(now).Seconds()), IssuedAt: now.UTC().Format(time.RFC3339)}
	if get {
		resp.Token = token
	} else {
		resp.Scope = Scope(access)
	}
	if offline && id != nil && s.opts.Accounts.resumable(id) {
		if resp.RefreshToken, err = s.issueRefresh(id, now); err != nil {
			tokenError(w, http.StatusInternalServerError, "UNKNOWN", "issuing the refresh token failed")
			return
		}
	}
	w.Header().Set("Content-Type", "application/json")
	json.NewEncoder(w).Encode(resp)
}

func (s *TokenService) checkService(service string) error {
	if service != "" && service != s.opts.Service {
		return fmt.Errorf("service %q: this registry is %q", service, s.opts.Service)
	}
	return nil
}

func tokenError(w http.ResponseWriter, status int, code, msg string) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	json.NewEncoder(w).Encode(map[string]any{"errors": []map[string]string{{"code": code, "message": msg}}})
}

// issue signs a token for id (nil: anonymous) whose access is what id's
// grant allows of need. It returns the access granted, the token and its
// expiry (the robot key's, when sooner).
func (s *TokenService) issue(id *Identity, need []Access, now time.Time) ([]Access, string, time.Time, error) {
	g := s.grants.of(id)
	granted := Granted(g, need)
	exp := now.Add(s.opts.Expiration)
	c := issuedClaims{Access: []tokenAccess{}}
	if id != nil {
		c.Subject = id.Name
		if id.robot != nil {
			c.Robot = id.robot.ID
			if !id.robot.Expires.IsZero() && id.robot.Expires.Before(exp) {
				exp = id.robot.Expires
			}
		}
	}
	for _, a := range granted {
		i := slices.IndexFunc(c.Access, func(t tokenAccess) bool { return t.Type == a.Type && t.Name == a.Name })
		if i < 0 {
			c.Access = append(c.Access, tokenAccess{Type: a.Type, Name: a.Name})
			i = len(c.Access) - 1
		}
		c.Access[i].Actions = append(c.Access[i].Actions, a.Action)
	}
	c.Issuer = s.opts.Issuer
	c.Audience = jwt.Audience{s.opts.Service}
	c.Expiry, c.NotBefore, c.IssuedAt = jwt.NewNumericDate(exp), jwt.NewNumericDate(now), jwt.NewNumericDate(now)
	c.ID = rand.Text()
	raw, err := jwt.Signed(s.signer).Claims(c).Serialize()
	return granted, raw, exp, err
}

func (s *TokenService) issueRefresh(id *Identity, now time.Time) (string, error) {
	c := refreshClaims{}
	c.Subject = id.Name
	switch {
	case id.robot != nil:
		c.Robot = id.robot.ID
	case id.Source != SourceHtpasswd && id.Source != "":
		c.Source = id.Source
	default:
		fp, ok := s.opts.Accounts.users.fingerprint(id.Name)
		if !ok {
			return "", fmt.Errorf("user %q vanished", id.Name)
		}
		c.Cred = fp
	}
	c.Issuer = s.opts.Issuer
	c.Audience = jwt.Audience{s.refreshAudience()}
	c.Expiry, c.IssuedAt = jwt.NewNumericDate(now.Add(s.opts.RefreshExpiration)), jwt.NewNumericDate(now)
	c.ID = rand.Text()
	return jwt.Signed(s.signer).Claims(c).Serialize()
}

// refresh is the login of a refresh token: one this service signed, for
// the refresh audience, unexpired, whose user or robot key still holds.
func (s *TokenService) refresh(r *http.Request, raw string) (Identity, error) {
	c, err := s.parseRefresh(raw)
	if err != nil {
		return s.opts.Accounts.resume(r, "", refreshClaims{}, fmt.Errorf("refresh token: %w", err))
	}
	return s.opts.Accounts.resume(r, c.Subject, c, nil)
}

func (s *TokenService) parseRefresh(raw string) (refreshClaims, error) {
	var c refreshClaims
	tok, err := jwt.ParseSigned(raw, []jose.SignatureAlgorithm{s.alg})
	if err != nil {
		return c, err
	}
	if err := tok.Claims(s.pub, &c); err != nil {
		return c, err
	}
	if c.Expiry == nil {
		return c, errors.New("no expiry")
	}
	if err := c.ValidateWithLeeway(jwt.Expected{Issuer: s.opts.Issuer, AnyAudience: jwt.Audience{s.refreshAudience()}, Time: s.opts.Now()}, tokenLeeway); err != nil {
		return c, err
	}
	if c.Subject == "" {
		return c, errors.New("no subject")
	}
	return c, nil
}

// Granted returns the accesses of need that g allows: the intersection of
// what was asked and what g gives, never more than asked. A "*" that g
// does not allow as such yields those of pull, push and delete it does.
func Granted(g Grant, need []Access) []Access {
	var out []Access
	add := func(a Access) {
		if !slices.Contains(out, a) {
			out = append(out, a)
		}
	}
	for _, a := range need {
		switch {
		case g.Allows(a):
			add(a)
		case a.Action == ActionAll && a.Type == TypeRepository:
			for _, act := range []string{ActionPull, ActionPush, ActionDelete} {
				if b := (Access{Type: a.Type, Name: a.Name, Action: act}); g.Allows(b) {
					add(b)
				}
			}
		}
	}
	return out
}

// ParseScopes reads the token spec's scope parameters: each holds
// space-separated "type:name:action,action" entries; a type's class
// ("repository(plugin)") is dropped. Resource names may hold colons
// (a registry host with a port): the type ends at the first colon, the
// actions start after the last.
func ParseScopes(values []string) ([]Access, error) {
	var out []Access
	for _, v := range values {
		for _, entry := range strings.Fields(v) {
			first, last := strings.IndexByte(entry, ':'), strings.LastIndexByte(entry, ':')
			if first < 0 || first == last {
				return nil, fmt.Errorf("scope %q: want type:name:actions", entry)
			}
			typ, name, actions := entry[:first], entry[first+1:last], entry[last+1:]
			if i := strings.IndexByte(typ, '('); i >= 0 && strings.HasSuffix(typ, ")") {
				typ = typ[:i]
			}
			if typ == "" || name == "" {
				return nil, fmt.Errorf("scope %q: want type:name:actions", entry)
			}
			for _, act := range strings.Split(actions, ",") {
				if act == "" {
					continue
				}
				if len(out) == maxScopes {
					return nil, fmt.Errorf("more than %d scopes in one request", maxScopes)
				}
				out = append(out, Access{Type: typ, Name: name, Action: act})
			}
		}
	}
	return out, nil
}

// signingAlgorithm is the JWS algorithm of key.
func signingAlgorithm(key crypto.Signer) (jose.SignatureAlgorithm, error) {
	switch k := key.Public().(type) {
	case *ecdsa.PublicKey:
		switch k.Curve {
		case elliptic.P256():
			return jose.ES256, nil
		case elliptic.P384():
			return jose.ES384, nil
		case elliptic.P521():
			return jose.ES512, nil
		}
	case *rsa.PublicKey:
		if k.N.BitLen() < 2048 {
			return "", errors.New("token service: an RSA key needs at least 2048 bits")
		}
		return jose.RS256, nil
	case ed25519.PublicKey:
		return jose.EdDSA, nil
	}
	return "", fmt.Errorf("token service: unsupported key type %T (ECDSA P-256/384/521, RSA or Ed25519)", key.Public())
}

// LoadSigningKey reads the PEM private key at path (PKCS #8, SEC 1 EC or
// PKCS #1 RSA). When create is set and no file is there, it makes an ECDSA
// P-256 key and writes it (mode 0600) without ever replacing a file: of
// two processes creating it at once, the second reads the first's key.
func LoadSigningKey(path string, create bool) (key crypto.Signer, created bool, err error) {
	b, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) && create {
		return createSigningKey(path)
	}
	if err != nil {
		return nil, false, err
	}
	key, err = parseSigningKey(b)
	if err != nil {
		return nil, false, fmt.Errorf("%s: %w", path, err)
	}
	return key, false, nil
}

func parseSigningKey(b []byte) (crypto.Signer, error) {
	block, _ := pem.Decode(b)
	if block == nil {
		return nil, errors.New("no PEM block")
	}
	var k any
	var err error
	switch block.Type {
	case "PRIVATE KEY":
		k, err = x509.ParsePKCS8PrivateKey(block.Bytes)
	case "EC PRIVATE KEY":
		k, err = x509.ParseECPrivateKey(block.Bytes)
	case "RSA PRIVATE KEY":
		k, err = x509.ParsePKCS1PrivateKey(block.Bytes)
	default:
		return nil, fmt.Errorf("PEM block %q is not a private key", block.Type)
	}
	if err != nil {
		return nil, err
	}
	s, ok := k.(crypto.Signer)
	if !ok {
		return nil, fmt.Errorf("unsupported key type %T", k)
	}
	if _, err := signingAlgorithm(s); err != nil {
		return nil, err
	}
	return s, nil
}

func createSigningKey(path string) (crypto.Signer, bool, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, false, err
	}
	der, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		return nil, false, err
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return nil, false, err
	}
	f, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".*")
	if err != nil {
		return nil, false, err
	}
	defer os.Remove(f.Name())
	_, err = f.Write(pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: der}))
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return nil, false, err
	}
	// A link, not a rename: it fails when the file exists, so a key
	// another process made first is never replaced (its tokens would stop
	// verifying).
	if err := os.Link(f.Name(), path); errors.Is(err, fs.ErrExist) {
		k, _, err := LoadSigningKey(path, false)
		return k, false, err
	} else if err != nil {
		return nil, false, err
	}
	return key, true, nil
}
