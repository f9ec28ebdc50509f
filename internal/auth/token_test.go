package auth

import (
	"crypto/ecdsa"
	"crypto/ed25519"
	"crypto/elliptic"
	"crypto/hmac"
	"crypto/rand"
	"crypto/rsa"
	"crypto/sha256"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/base64"
	"encoding/json"
	"encoding/pem"
	"errors"
	"math/big"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/go-jose/go-jose/v4"
	"github.com/go-jose/go-jose/v4/jwt"

	"github.com/cairn-registry/cairn/internal/testutil/tokentest"
)

const (
	testIssuer  = "test-issuer"
	testService = "test-registry"
	testRealm   = "https://auth.test/token"
)

// testNow is the registry's clock in these tests.
var testNow = time.Date(2030, 6, 1, 12, 0, 0, 0, time.UTC)

// pki is a token-signing CA and a leaf certificate it issued.
type pki struct {
	caKey   *ecdsa.PrivateKey
	ca      *x509.Certificate
	leafKey *ecdsa.PrivateKey
	leaf    *x509.Certificate
}

func newPKI(t *testing.T, notAfter time.Time) *pki {
	t.Helper()
	p := &pki{}
	var err error
	p.caKey, err = ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	caTmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "token CA"},
		NotBefore: testNow.Add(-time.Hour), NotAfter: testNow.Add(24 * time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature,
	}
	p.ca = mustCert(t, caTmpl, caTmpl, &p.caKey.PublicKey, p.caKey)
	p.leafKey, err = ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	leafTmpl := &x509.Certificate{
		SerialNumber: big.NewInt(2), Subject: pkix.Name{CommonName: "token signer"},
		NotBefore: testNow.Add(-time.Hour), NotAfter: notAfter, KeyUsage: x509.KeyUsageDigitalSignature,
	}
	p.leaf = mustCert(t, leafTmpl, p.ca, &p.leafKey.PublicKey, p.caKey)
	return p
}

func mustCert(t *testing.T, tmpl, parent *x509.Certificate, pub, priv any) *x509.Certificate {
	t.Helper()
	der, err := x509.CreateCertificate(rand.Reader, tmpl, parent, pub, priv)
	if err != nil {
		t.Fatal(err)
	}
	c, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func writePEM(t *testing.T, certs ...*x509.Certificate) string {
	t.Helper()
	var b []byte
	for _, c := range certs {
		b = append(b, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: c.Raw})...)
	}
	p := filepath.Join(t.TempDir(), "bundle.pem")
	if err := os.WriteFile(p, b, 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

// goodClaims are valid at testNow for testService from testIssuer.
func goodClaims(access ...tokentest.Access) tokentest.Claims {
	return tokentest.Claims{
		Claims: jwt.Claims{
			Issuer: testIssuer, Subject: "alice", Audience: jwt.Audience{testService},
			Expiry:    jwt.NewNumericDate(testNow.Add(5 * time.Minute)),
			NotBefore: jwt.NewNumericDate(testNow.Add(-time.Minute)),
			IssuedAt:  jwt.NewNumericDate(testNow.Add(-time.Minute)),
		},
		Access: access,
	}
}

// sign serializes c signed with key under alg; headers are extra JOSE
// header fields (kid, x5c).
func sign(t *testing.T, alg jose.SignatureAlgorithm, key any, c any, headers map[jose.HeaderKey]any) string {
	t.Helper()
	raw, err := tokentest.Sign(alg, key, c, headers)
	if err != nil {
		t.Fatal(err)
	}
	return raw
}

func x5c(certs ...*x509.Certificate) map[jose.HeaderKey]any {
	var chain []string
	for _, c := range certs {
		chain = append(chain, base64.StdEncoding.EncodeToString(c.Raw))
	}
	return map[jose.HeaderKey]any{"x5c": chain}
}

func kid(id string) map[jose.HeaderKey]any { return map[jose.HeaderKey]any{"kid": id} }

func newTestToken(t *testing.T, opts TokenOptions) *Token {
	t.Helper()
	opts.Realm, opts.Service, opts.Issuer, opts.Now = testRealm, testService, testIssuer, func() time.Time { return testNow }
	tok, err := NewToken(opts)
	if err != nil {
		t.Fatal(err)
	}
	return tok
}

func TestTokenVerification(t *testing.T) {
	p := newPKI(t, testNow.Add(time.Hour))
	other := newPKI(t, testNow.Add(time.Hour)) // an untrusted CA
	expiredCert := newPKI(t, testNow.Add(-time.Minute))
	expiredCert.ca, expiredCert.caKey = p.ca, p.caKey // chains to the trusted CA
	expiredCert.leaf = mustCert(t, &x509.Certificate{
		SerialNumber: big.NewInt(3), Subject: pkix.Name{CommonName: "expired signer"},
		NotBefore: testNow.Add(-2 * time.Hour), NotAfter: testNow.Add(-time.Minute),
	}, p.ca, &expiredCert.leafKey.PublicKey, p.caKey)

	_, edKey, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	rsaKey, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		t.Fatal(err)
	}
	jwks := jose.JSONWebKeySet{Keys: []jose.JSONWebKey{
		{Key: edKey.Public(), KeyID: "ed-1", Algorithm: string(jose.EdDSA), Use: "sig"},
		{Key: &rsaKey.PublicKey, KeyID: "rsa-1", Algorithm: string(jose.RS256), Use: "sig"},
	}}
	jwksPath := filepath.Join(t.TempDir(), "jwks.json")
	b, err := json.Marshal(jwks)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(jwksPath, b, 0o600); err != nil {
		t.Fatal(err)
	}
	tok := newTestToken(t, TokenOptions{RootCertBundle: writePEM(t, p.ca), JWKS: jwksPath})

	caIDs := keyIDs(&p.caKey.PublicKey)
	pull := tokentest.Access{Type: "repository", Name: "team/app", Actions: []string{"pull"}}
	good := goodClaims(pull)
	mod := func(f func(c *tokentest.Claims)) tokentest.Claims {
		c := goodClaims(pull)
		f(&c)
		return c
	}
	// The HMAC of alg-confusion attacks: the trusted public key as secret.
	caDER, err := x509.MarshalPKIXPublicKey(&p.caKey.PublicKey)
	if err != nil {
		t.Fatal(err)
	}

	cases := []struct {
		name string
		raw  string
		ok   bool
	}{
		{"x5c leaf chained to the root", sign(t, jose.ES256, p.leafKey, good, x5c(p.leaf)), true},
		{"x5c leaf with the root in the chain", sign(t, jose.ES256, p.leafKey, good, x5c(p.leaf, p.ca)), true},
		{"kid: RFC 7638 thumbprint of the root key", sign(t, jose.ES256, p.caKey, good, kid(caIDs[0])), true},
		{"kid: libtrust key ID of the root key", sign(t, jose.ES256, p.caKey, good, kid(caIDs[1])), true},
		{"kid from the JWKS, EdDSA", sign(t, jose.EdDSA, edKey, good, kid("ed-1")), true},
		{"kid from the JWKS, RS256", sign(t, jose.RS256, rsaKey, good, kid("rsa-1")), true},
		{"audience list containing the service", sign(t, jose.ES256, p.leafKey, mod(func(c *tokentest.Claims) { c.Audience = jwt.Audience{"other", testService} }), x5c(p.leaf)), true},
		{"expired within the leeway", sign(t, jose.ES256, p.leafKey, mod(func(c *tokentest.Claims) { c.Expiry = jwt.NewNumericDate(testNow.Add(-30 * time.Second)) }), x5c(p.leaf)), true},

		{"expired", sign(t, jose.ES256, p.leafKey, mod(func(c *tokentest.Claims) { c.Expiry = jwt.NewNumericDate(testNow.Add(-2 * time.Minute)) }), x5c(p.leaf)), false},
		{"no expiry", sign(t, jose.ES256, p.leafKey, mod(func(c *tokentest.Claims) { c.Expiry = nil }), x5c(p.leaf)), false},
		{"not valid yet", sign(t, jose.ES256, p.leafKey, mod(func(c *tokentest.Claims) { c.NotBefore = jwt.NewNumericDate(testNow.Add(5 * time.Minute)) }), x5c(p.leaf)), false},
		{"issued in the future", sign(t, jose.ES256, p.leafKey, mod(func(c *tokentest.Claims) { c.IssuedAt = jwt.NewNumericDate(testNow.Add(5 * time.Minute)) }), x5c(p.leaf)), false},
		{"wrong issuer", sign(t, jose.ES256, p.leafKey, mod(func(c *tokentest.Claims) { c.Issuer = "evil" }), x5c(p.leaf)), false},
		{"no issuer", sign(t, jose.ES256, p.leafKey, mod(func(c *tokentest.Claims) { c.Issuer = "" }), x5c(p.leaf)), false},
		{"wrong audience", sign(t, jose.ES256, p.leafKey, mod(func(c *tokentest.Claims) { c.Audience = jwt.Audience{"other-registry"} }), x5c(p.leaf)), false},
		{"no audience", sign(t, jose.ES256, p.leafKey, mod(func(c *tokentest.Claims) { c.Audience = nil }), x5c(p.leaf)), false},
		{"x5c from an untrusted CA", sign(t, jose.ES256, other.leafKey, good, x5c(other.leaf)), false},
		{"x5c of an untrusted self-signed root", sign(t, jose.ES256, other.caKey, good, x5c(other.ca)), false},
		{"trusted x5c, signed by another key", sign(t, jose.ES256, other.leafKey, good, x5c(p.leaf)), false},
		{"x5c certificate expired", sign(t, jose.ES256, expiredCert.leafKey, good, x5c(expiredCert.leaf)), false},
		{"trusted kid, signed by another key", sign(t, jose.ES256, other.caKey, good, kid(caIDs[0])), false},
		{"unknown kid", sign(t, jose.ES256, p.caKey, good, kid("nobody")), false},
		{"no key named", sign(t, jose.ES256, p.caKey, good, nil), false},
		{"embedded jwk of an untrusted key", sign(t, jose.ES256, other.caKey, good, map[jose.HeaderKey]any{"jwk": jose.JSONWebKey{Key: &other.caKey.PublicKey}}), false},
		{"HS256 keyed with the trusted public key", hs256(t, caDER, caIDs[0], good), false},
		{"alg none", unsigned(t, good), false},
		{"garbage", "not.a.token", false},
		{"empty signature", strings.Join(strings.Split(sign(t, jose.ES256, p.leafKey, good, x5c(p.leaf)), ".")[:2], ".") + ".", false},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			g, _, err := tok.verify(c.raw)
			if c.ok {
				if err != nil {
					t.Fatalf("verify: %v", err)
				}
				if g.Subject != "alice" || !g.Allows(Access{TypeRepository, "team/app", "pull"}) || g.Allows(Access{TypeRepository, "team/app", "push"}) {
					t.Errorf("grant %+v does not match the access claim", g)
				}
				return
			}
			if err == nil {
				t.Fatalf("verify accepted the token; grant %+v", g)
			}
			t.Logf("refused: %v", err)
		})
	}

	t.Run("embedded jwk of a trusted key", func(t *testing.T) {
		raw := sign(t, jose.ES256, p.caKey, good, map[jose.HeaderKey]any{"jwk": jose.JSONWebKey{Key: &p.caKey.PublicKey}})
		if _, _, err := tok.verify(raw); err != nil {
			t.Errorf("verify: %v", err)
		}
	})
}

// hs256 builds an HS256 token by hand (go-jose refuses to sign with a
// public key's bytes, which is exactly the attack).
func hs256(t *testing.T, secret []byte, keyID string, c any) string {
	t.Helper()
	h := base64.RawURLEncoding.EncodeToString([]byte(`{"alg":"HS256","typ":"JWT","kid":"` + keyID + `"}`))
	body, err := json.Marshal(c)
	if err != nil {
		t.Fatal(err)
	}
	input := h + "." + base64.RawURLEncoding.EncodeToString(body)
	m := hmac.New(sha256.New, secret)
	m.Write([]byte(input))
	return input + "." + base64.RawURLEncoding.EncodeToString(m.Sum(nil))
}

func unsigned(t *testing.T, c any) string {
	t.Helper()
	body, err := json.Marshal(c)
	if err != nil {
		t.Fatal(err)
	}
	return base64.RawURLEncoding.EncodeToString([]byte(`{"alg":"none","typ":"JWT"}`)) + "." + base64.RawURLEncoding.EncodeToString(body) + "."
}

func TestTokenSigningAlgorithms(t *testing.T) {
	p := newPKI(t, testNow.Add(time.Hour))
	bundle := writePEM(t, p.ca)
	raw := sign(t, jose.ES256, p.leafKey, goodClaims(), x5c(p.leaf))

	onlyRSA := newTestToken(t, TokenOptions{RootCertBundle: bundle, SigningAlgorithms: []string{"RS256"}})
	if _, _, err := onlyRSA.verify(raw); err == nil {
		t.Error("an ES256 token was accepted with signingalgorithms [RS256]")
	}
	es := newTestToken(t, TokenOptions{RootCertBundle: bundle, SigningAlgorithms: []string{"ES256"}})
	if _, _, err := es.verify(raw); err != nil {
		t.Errorf("ES256 token with signingalgorithms [ES256]: %v", err)
	}
	// Even with HS256 allowed, an asymmetric key never verifies an HMAC.
	der, err := x509.MarshalPKIXPublicKey(&p.caKey.PublicKey)
	if err != nil {
		t.Fatal(err)
	}
	withHS := newTestToken(t, TokenOptions{RootCertBundle: bundle, SigningAlgorithms: []string{"ES256", "HS256"}})
	if _, _, err := withHS.verify(hs256(t, der, keyIDs(&p.caKey.PublicKey)[0], goodClaims())); err == nil {
		t.Error("HS256 keyed with the CA's public key was accepted")
	}
	if _, err := NewToken(TokenOptions{RootCertBundle: bundle, SigningAlgorithms: []string{"none"}}); err == nil {
		t.Error(`signingalgorithms ["none"] was accepted`)
	}
}

func TestNewTokenErrors(t *testing.T) {
	dir := t.TempDir()
	notPEM := filepath.Join(dir, "x.pem")
	if err := os.WriteFile(notPEM, []byte("hello"), 0o600); err != nil {
		t.Fatal(err)
	}
	emptyJWKS := filepath.Join(dir, "jwks.json")
	if err := os.WriteFile(emptyJWKS, []byte(`{"keys":[]}`), 0o600); err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		name string
		opts TokenOptions
		want string
	}{
		{"no keys at all", TokenOptions{}, "no token signing key"},
		{"missing bundle", TokenOptions{RootCertBundle: filepath.Join(dir, "missing.pem")}, "rootcertbundle: open"},
		{"bundle without certificates", TokenOptions{RootCertBundle: notPEM}, "rootcertbundle: " + notPEM + ": no PEM certificate"},
		{"empty jwks", TokenOptions{JWKS: emptyJWKS}, "no token signing key"},
		{"jwks not json", TokenOptions{JWKS: notPEM}, "jwks: " + notPEM},
	}
	for _, c := range cases {
		if _, err := NewToken(c.opts); err == nil || !strings.HasPrefix(err.Error(), c.want) {
			t.Errorf("%s: err = %v, want prefix %q", c.name, err, c.want)
		}
	}
}

func TestTokenAuthorize(t *testing.T) {
	p := newPKI(t, testNow.Add(time.Hour))
	tok := newTestToken(t, TokenOptions{RootCertBundle: writePEM(t, p.ca)})
	bearer := func(c tokentest.Claims) string { return "Bearer " + sign(t, jose.ES256, p.leafKey, c, x5c(p.leaf)) }
	pullA := goodClaims(tokentest.Access{Type: "repository", Name: "a", Actions: []string{"pull"}})
	all := goodClaims(tokentest.Access{Type: "repository", Name: "a", Actions: []string{"*"}}, tokentest.Access{Type: "registry", Name: "catalog", Actions: []string{"*"}})

	cases := []struct {
		name       string
		auth       string
		need       []Access
		status     int // 0: allowed
		wantHeader string
	}{
		{"no credentials", "", Needed(EndpointManifest, "a", http.MethodGet), 401,
			`Bearer realm="https://auth.test/token",service="test-registry",scope="repository:a:pull"`},
		{"no credentials for the base", "", nil, 401, `Bearer realm="https://auth.test/token",service="test-registry"`},
		{"basic credentials", "Basic YTpi", Needed(EndpointManifest, "a", http.MethodGet), 401,
			`Bearer realm="https://auth.test/token",service="test-registry",scope="repository:a:pull"`},
		{"bad token", "Bearer x.y.z", Needed(EndpointUpload, "a", http.MethodPost), 401,
			`Bearer realm="https://auth.test/token",service="test-registry",scope="repository:a:pull,push",error="invalid_token"`},
		{"pull token pulls", bearer(pullA), Needed(EndpointBlob, "a", http.MethodGet), 0, ""},
		{"lower-case scheme", strings.Replace(bearer(pullA), "Bearer", "bearer", 1), Needed(EndpointBlob, "a", http.MethodHead), 0, ""},
		{"pull token on the base", bearer(pullA), nil, 0, ""},
		{"pull token pushes", bearer(pullA), Needed(EndpointUpload, "a", http.MethodPost), 403,
			`Bearer realm="https://auth.test/token",service="test-registry",scope="repository:a:pull,push",error="insufficient_scope"`},
		{"pull token deletes", bearer(pullA), Needed(EndpointManifest, "a", http.MethodDelete), 403, ""},
		{"pull token on another repository", bearer(pullA), Needed(EndpointManifest, "b", http.MethodGet), 403, ""},
		{"pull token on a repository below", bearer(pullA), Needed(EndpointManifest, "a/b", http.MethodGet), 403, ""},
		{"pull token on the catalog", bearer(pullA), Needed(EndpointCatalog, "", http.MethodGet), 403, ""},
		{"wildcard token deletes", bearer(all), Needed(EndpointManifest, "a", http.MethodDelete), 0, ""},
		{"catalog token lists", bearer(all), Needed(EndpointCatalog, "", http.MethodGet), 0, ""},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			r := httptest.NewRequest(http.MethodGet, "/v2/", nil)
			if c.auth != "" {
				r.Header.Set("Authorization", c.auth)
			}
			_, err := tok.Authorize(r, c.need)
			if c.status == 0 {
				if err != nil {
					t.Fatalf("refused: %v", err)
				}
				return
			}
			var ch *Challenge
			if !errors.As(err, &ch) {
				t.Fatalf("err = %v, want a challenge", err)
			}
			if ch.Status() != c.status {
				t.Errorf("status %d, want %d (%v)", ch.Status(), c.status, err)
			}
			if c.wantHeader != "" && ch.Header() != c.wantHeader {
				t.Errorf("WWW-Authenticate\n got %s\nwant %s", ch.Header(), c.wantHeader)
			}
			wantCode := map[int]string{401: "UNAUTHORIZED", 403: "DENIED"}[c.status]
			if ch.Code() != wantCode {
				t.Errorf("code %s, want %s", ch.Code(), wantCode)
			}
		})
	}

	t.Run("autoredirect realm", func(t *testing.T) {
		ar := newTestToken(t, TokenOptions{RootCertBundle: writePEM(t, p.ca), AutoRedirect: true})
		r := httptest.NewRequest(http.MethodGet, "http://registry.test:5000/v2/", nil)
		_, err := ar.Authorize(r, nil)
		var ch *Challenge
		if !errors.As(err, &ch) || !strings.HasPrefix(ch.Header(), `Bearer realm="http://registry.test:5000/auth/token",`) {
			t.Errorf("challenge %v", err)
		}
	})
}

func TestKeyIDs(t *testing.T) {
	// RFC 7638 section 3.1's example key and thumbprint.
	pub := &rsa.PublicKey{E: 65537, N: new(big.Int).SetBytes(b64(t, "0vx7agoebGcQSuuPiLJXZptN9nndrQmbXEps2aiAFbWhM78LhWx4cbbfAAtVT86zwu1RK7aPFFxuhDR1L6tSoc_BJECPebWKRXjBZCiFV4n3oknjhMstn64tZ_2W-5JsGY4Hc5n9yBXArwl93lqt7_RN5w6Cf0h4QyQ5v-65YGjQR0_FDW2QvzqY368QQMicAtaSqzs8KJZgnYb9c7d0zgdAZHzu6qMQvRL5hajrn1n91CbOpbISD08qNLyrdkt-bFTWhAI4vMQFh6WeZu0fM4lFd2NcRwr3XPksINHaQ-G_xBniIqbw0Ls1jF44-csFCur-kEgU8awapJzKnqDKgw"))}
	ids := keyIDs(pub)
	if len(ids) != 2 || ids[0] != "NzbLsXh8uDCcd-6MNwXF4W_7noWXFZAfHkxZsRGC9Xs" {
		t.Errorf("thumbprint = %q, want RFC 7638's NzbLsXh8uDCcd-6MNwXF4W_7noWXFZAfHkxZsRGC9Xs", ids)
	}
	// A libtrust key ID is 12 groups of 4 base32 characters.
	if g := strings.Split(ids[1], ":"); len(g) != 12 || len(g[0]) != 4 {
		t.Errorf("libtrust key ID %q", ids[1])
	}
}

func b64(t *testing.T, s string) []byte {
	t.Helper()
	b, err := base64.RawURLEncoding.DecodeString(s)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// TestTokenCacheHonoursExpiry: a verified token is remembered, but never
// past its expiry.
func TestTokenCacheHonoursExpiry(t *testing.T) {
	p := newPKI(t, testNow.Add(24*time.Hour))
	now := testNow
	tok := newTestToken(t, TokenOptions{RootCertBundle: writePEM(t, p.ca)})
	tok.opts.Now = func() time.Time { return now }
	c := goodClaims(tokentest.Access{Type: "repository", Name: "a", Actions: []string{"pull"}})
	c.Expiry = jwt.NewNumericDate(testNow.Add(2 * time.Minute))
	raw := sign(t, jose.ES256, p.leafKey, c, x5c(p.leaf))
	need := Needed(EndpointBlob, "a", http.MethodGet)
	authorize := func() error {
		r := httptest.NewRequest(http.MethodGet, "/v2/a/blobs/x", nil)
		r.Header.Set("Authorization", "Bearer "+raw)
		_, err := tok.Authorize(r, need)
		return err
	}
	for _, step := range []struct {
		advance time.Duration
		ok      bool
	}{
		{0, true},
		{30 * time.Second, true}, // from the cache
		{90 * time.Second, true}, // 2m: verified again, still valid
		{2 * time.Minute, false}, // 4m: past exp and leeway
		{-4 * time.Minute, true}, // the clock back: valid again
		{3*time.Minute + time.Second, false},
	} {
		now = now.Add(step.advance)
		if err := authorize(); (err == nil) != step.ok {
			t.Errorf("at %s: err = %v, want ok=%v", now.Sub(testNow), err, step.ok)
		}
	}
}
