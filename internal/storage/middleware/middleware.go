// Package middleware builds distribution's storage middlewares that decide
// where a blob GET is redirected: "redirect" (a base URL in front of the
// storage paths, e.g. a CDN or web server whose origin is the store) and
// "cloudfront" (CloudFront URLs signed with a key pair, in front of an S3
// bucket). Each is a registry.Redirector; none changes how files are stored
// or read.
package middleware

import (
	"context"
	"crypto"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"fmt"
	"net/url"
	"os"
	"path"
	"slices"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/feature/cloudfront/sign"
)

// Names of the storage middlewares cairn implements.
const (
	NameRedirect   = "redirect"
	NameCloudFront = "cloudfront"
)

// Redirect sends clients to baseurl + the storage path, unsigned, as
// distribution's redirect middleware does: whatever serves baseurl must
// serve the storage tree (or the bucket, rootdirectory included in its path).
type Redirect struct {
	base url.URL
}

// NewRedirect reads the redirect middleware's options: baseurl, an absolute
// URL whose path (if any) prefixes every storage path.
func NewRedirect(options map[string]any) (*Redirect, error) {
	if err := onlyKeys(options, "baseurl"); err != nil {
		return nil, err
	}
	u, err := baseURL(options)
	if err != nil {
		return nil, err
	}
	return &Redirect{base: *u}, nil
}

// RedirectURL implements registry.Redirector.
func (r *Redirect) RedirectURL(_ context.Context, p string) (string, error) {
	u := r.base
	u.Path = path.Join("/", r.base.Path, p)
	return u.String(), nil
}

// CloudFront sends clients to CloudFront URLs signed with a canned policy
// that expires after duration. Paths map to the S3 keys of the bucket the
// distribution's origin is (KeyFunc), as distribution's middleware does.
type CloudFront struct {
	base     string // ends with "/"
	signer   *sign.URLSigner
	duration time.Duration
	key      func(path string) string
}

// DefaultCloudFrontDuration is how long a signed URL stays valid unless the
// duration option says otherwise (distribution's default).
const DefaultCloudFrontDuration = 20 * time.Minute

// NewCloudFront reads the cloudfront middleware's options: baseurl,
// privatekey (a PEM file, PKCS #1 or PKCS #8 RSA), keypairid, and duration
// (default 20m). key maps a storage path to its S3 object key. The
// returned warnings name options that were accepted but have no effect:
// ipfilteredby and its companions (sending AWS clients straight to S3) are
// not implemented, so every client is sent to CloudFront.
func NewCloudFront(options map[string]any, key func(path string) string) (*CloudFront, []string, error) {
	if err := onlyKeys(options, "baseurl", "privatekey", "keypairid", "duration",
		"ipfilteredby", "awsregion", "updatefrequency", "iprangesurl"); err != nil {
		return nil, nil, err
	}
	u, err := baseURL(options)
	if err != nil {
		return nil, nil, err
	}
	base := u.String()
	if !strings.HasSuffix(base, "/") {
		base += "/"
	}
	keyFile, err := stringOption(options, "privatekey", true)
	if err != nil {
		return nil, nil, err
	}
	keyPairID, err := stringOption(options, "keypairid", true)
	if err != nil {
		return nil, nil, err
	}
	pk, err := loadKey(keyFile)
	if err != nil {
		return nil, nil, fmt.Errorf("privatekey: %w", err)
	}
	duration := DefaultCloudFrontDuration
	if _, ok := options["duration"]; ok {
		s, err := stringOption(options, "duration", true)
		if err != nil {
			return nil, nil, err
		}
		if duration, err = time.ParseDuration(s); err != nil || duration <= 0 {
			return nil, nil, fmt.Errorf("duration: %q is not a positive duration such as 20m", s)
		}
	}
	var warnings []string
	if f, _ := stringOption(options, "ipfilteredby", false); f != "" && !strings.EqualFold(f, "none") {
		warnings = append(warnings, fmt.Sprintf("cloudfront ipfilteredby %q is not supported yet; every client is sent to CloudFront", f))
	}
	return &CloudFront{base: base, signer: sign.NewURLSigner(keyPairID, pk), duration: duration, key: key}, warnings, nil
}

// RedirectURL implements registry.Redirector.
func (c *CloudFront) RedirectURL(_ context.Context, p string) (string, error) {
	u, err := c.signer.Sign(c.base+c.key(p), time.Now().Add(c.duration))
	if err != nil {
		return "", fmt.Errorf("cloudfront: sign %s: %w", p, err)
	}
	return u, nil
}

// loadKey reads an RSA private key, PKCS #1 ("RSA PRIVATE KEY", what
// CloudFront's console hands out) or PKCS #8 ("PRIVATE KEY").
func loadKey(file string) (crypto.Signer, error) {
	b, err := os.ReadFile(file)
	if err != nil {
		return nil, err
	}
	block, _ := pem.Decode(b)
	if block == nil {
		return nil, fmt.Errorf("%s holds no PEM block", file)
	}
	if k, err := x509.ParsePKCS1PrivateKey(block.Bytes); err == nil {
		return k, nil
	}
	k, err := x509.ParsePKCS8PrivateKey(block.Bytes)
	if err != nil {
		return nil, fmt.Errorf("%s: not an RSA private key (PKCS #1 or #8)", file)
	}
	s, ok := k.(crypto.Signer)
	if !ok {
		return nil, fmt.Errorf("%s: not a signing key", file)
	}
	return s, nil
}

func baseURL(options map[string]any) (*url.URL, error) {
	s, err := stringOption(options, "baseurl", true)
	if err != nil {
		return nil, err
	}
	u, err := url.Parse(s)
	switch {
	case err != nil:
		return nil, fmt.Errorf("baseurl: %q is not a URL", s)
	case u.Scheme != "http" && u.Scheme != "https":
		return nil, fmt.Errorf("baseurl: %q needs an http or https scheme", s)
	case u.Host == "":
		return nil, fmt.Errorf("baseurl: %q has no host", s)
	case u.RawQuery != "" || u.Fragment != "":
		return nil, fmt.Errorf("baseurl: %q must not have a query or fragment", s)
	}
	return u, nil
}

func stringOption(options map[string]any, name string, required bool) (string, error) {
	v, ok := options[name]
	if !ok || v == nil {
		if required {
			return "", fmt.Errorf("%s is required", name)
		}
		return "", nil
	}
	s, ok := v.(string)
	if !ok || (required && s == "") {
		return "", fmt.Errorf("%s: want a non-empty string, not %v", name, v)
	}
	return s, nil
}

// onlyKeys refuses an option the middleware does not know: a misspelt key
// would otherwise be ignored silently.
func onlyKeys(options map[string]any, known ...string) error {
	var unknown []string
	for k := range options {
		if !slices.Contains(known, k) {
			unknown = append(unknown, k)
		}
	}
	if len(unknown) > 0 {
		slices.Sort(unknown)
		return errors.New("unknown option " + strings.Join(unknown, ", ") + " (known: " + strings.Join(known, ", ") + ")")
	}
	return nil
}
