package middleware

import (
	"context"
	"crypto"
	"crypto/rand"
	"crypto/rsa"
	"crypto/sha1"
	"crypto/x509"
	"encoding/base64"
	"encoding/pem"
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"
)

func TestRedirect(t *testing.T) {
	const p = "/docker/registry/v2/blobs/sha256/ab/abcd/data"
	for base, want := range map[string]string{
		"https://cdn.example":           "https://cdn.example" + p,
		"https://cdn.example/":          "https://cdn.example" + p,
		"http://127.0.0.1:8080/reg/":    "http://127.0.0.1:8080/reg" + p,
		"https://cdn.example/a/b":       "https://cdn.example/a/b" + p,
		"https://user@cdn.example:8443": "https://user@cdn.example:8443" + p,
	} {
		r, err := NewRedirect(map[string]any{"baseurl": base})
		if err != nil {
			t.Fatalf("NewRedirect(%q): %v", base, err)
		}
		if got, err := r.RedirectURL(context.Background(), p); got != want || err != nil {
			t.Errorf("baseurl %q: RedirectURL = %q, %v; want %q", base, got, err, want)
		}
	}
}

func TestOptionsRefused(t *testing.T) {
	key := writeKey(t, true)
	for _, tc := range []struct {
		cloudfront bool
		opts       map[string]any
		want       string
	}{
		{false, nil, "baseurl is required"},
		{false, map[string]any{"baseurl": "cdn.example"}, "needs an http or https scheme"},
		{false, map[string]any{"baseurl": "https://"}, "has no host"},
		{false, map[string]any{"baseurl": 5}, "baseurl: want a non-empty string"},
		{false, map[string]any{"baseurl": "https://a.example", "baseURL": "x"}, "unknown option baseURL"},
		{true, map[string]any{"baseurl": "https://a.example", "keypairid": "K"}, "privatekey is required"},
		{true, map[string]any{"baseurl": "https://a.example", "privatekey": key}, "keypairid is required"},
		{true, map[string]any{"baseurl": "https://a.example", "privatekey": "/nonexistent.pem", "keypairid": "K"}, "privatekey: open /nonexistent.pem"},
		{true, map[string]any{"baseurl": "https://a.example", "privatekey": key, "keypairid": "K", "duration": "soon"}, `duration: "soon" is not a positive duration`},
	} {
		var err error
		if tc.cloudfront {
			_, _, err = NewCloudFront(tc.opts, func(p string) string { return p })
		} else {
			_, err = NewRedirect(tc.opts)
		}
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("options %v: %v, want an error containing %q", tc.opts, err, tc.want)
		}
	}
}

// TestCloudFrontSignsCannedPolicy checks a URL the way CloudFront does: the
// signature is RSA-SHA1 over the canned policy of the URL and its Expires,
// by the key Key-Pair-Id names.
func TestCloudFrontSignsCannedPolicy(t *testing.T) {
	for _, pkcs1 := range []bool{true, false} {
		key := writeKey(t, pkcs1)
		cf, warnings, err := NewCloudFront(map[string]any{
			"baseurl": "https://d111111abcdef8.cloudfront.net", "privatekey": key, "keypairid": "K2JCJMDEHXQW5F",
			"duration": "10m", "ipfilteredby": "awsregion", "awsregion": "us-east-1",
		}, func(p string) string { return "registry" + p })
		if err != nil {
			t.Fatal(err)
		}
		if len(warnings) != 1 || !strings.Contains(warnings[0], "ipfilteredby") {
			t.Errorf("warnings = %q, want one about ipfilteredby", warnings)
		}
		start := time.Now()
		raw, err := cf.RedirectURL(context.Background(), "/docker/registry/v2/blobs/sha256/ab/abcd/data")
		if err != nil {
			t.Fatal(err)
		}
		u, err := url.Parse(raw)
		if err != nil {
			t.Fatal(err)
		}
		resource := "https://d111111abcdef8.cloudfront.net/registry/docker/registry/v2/blobs/sha256/ab/abcd/data"
		if got := u.Scheme + "://" + u.Host + u.Path; got != resource {
			t.Errorf("URL %s, want %s signed", got, resource)
		}
		q := u.Query()
		if q.Get("Key-Pair-Id") != "K2JCJMDEHXQW5F" {
			t.Errorf("Key-Pair-Id = %q", q.Get("Key-Pair-Id"))
		}
		expires, err := strconv.ParseInt(q.Get("Expires"), 10, 64)
		if err != nil || expires < start.Add(10*time.Minute-time.Second).Unix() || expires > time.Now().Add(10*time.Minute+time.Second).Unix() {
			t.Errorf("Expires = %q, want 10 minutes from now", q.Get("Expires"))
		}
		policy := fmt.Sprintf(`{"Statement":[{"Resource":%q,"Condition":{"DateLessThan":{"AWS:EpochTime":%d}}}]}`, resource, expires)
		sig, err := base64.StdEncoding.DecodeString(strings.NewReplacer("-", "+", "_", "=", "~", "/").Replace(q.Get("Signature")))
		if err != nil {
			t.Fatal(err)
		}
		h := sha1.Sum([]byte(policy))
		if err := rsa.VerifyPKCS1v15(publicKey(t, key), crypto.SHA1, h[:], sig); err != nil {
			t.Errorf("signature does not verify for %s: %v", policy, err)
		}
	}
}

// writeKey writes a new RSA key as PEM, PKCS #1 or PKCS #8.
func writeKey(t *testing.T, pkcs1 bool) string {
	k, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		t.Fatal(err)
	}
	block := &pem.Block{Type: "RSA PRIVATE KEY", Bytes: x509.MarshalPKCS1PrivateKey(k)}
	if !pkcs1 {
		der, err := x509.MarshalPKCS8PrivateKey(k)
		if err != nil {
			t.Fatal(err)
		}
		block = &pem.Block{Type: "PRIVATE KEY", Bytes: der}
	}
	p := filepath.Join(t.TempDir(), "key.pem")
	if err := os.WriteFile(p, pem.EncodeToMemory(block), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

func publicKey(t *testing.T, file string) *rsa.PublicKey {
	s, err := loadKey(file)
	if err != nil {
		t.Fatal(err)
	}
	return s.Public().(*rsa.PublicKey)
}
