package gcs

import (
	"context"
	"crypto/rand"
	"crypto/rsa"
	"crypto/x509"
	"encoding/json"
	"encoding/pem"
	"errors"
	"net/url"
	"testing"
	"time"
)

// TestSignedURLNeedsAKey: the driver signs with the service account key it
// was given, locally, pointing at the configured endpoint; without a key it
// refuses at once (errors.ErrUnsupported) rather than asking IAM per URL.
func TestSignedURLNeedsAKey(t *testing.T) {
	ctx := context.Background()
	k, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		t.Fatal(err)
	}
	der, err := x509.MarshalPKCS8PrivateKey(k)
	if err != nil {
		t.Fatal(err)
	}
	creds, err := json.Marshal(map[string]string{
		"type": "service_account", "client_email": "cairn@example.iam.gserviceaccount.com",
		"private_key": string(pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: der})),
	})
	if err != nil {
		t.Fatal(err)
	}
	// New sends no request, so no server is needed.
	d, err := New(ctx, Parameters{Bucket: "b", Credentials: creds, Endpoint: "http://127.0.0.1:4443", RootDirectory: "root"})
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	raw, err := d.SignedURL(ctx, "/docker/registry/v2/blobs/sha256/ab/abcd/data", 20*time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	u, err := url.Parse(raw)
	if err != nil {
		t.Fatal(err)
	}
	if got := u.Scheme + "://" + u.Host + u.Path; got != "http://127.0.0.1:4443/b/root/docker/registry/v2/blobs/sha256/ab/abcd/data" {
		t.Errorf("signed URL %s: wrong object URL", got)
	}
	q := u.Query()
	// Expires counts whole seconds from the library's own clock reading.
	if exp := q.Get("X-Goog-Expires"); exp != "1200" && exp != "1199" {
		t.Errorf("X-Goog-Expires = %q, want 20 minutes", exp)
	}
	if q.Get("X-Goog-Algorithm") != "GOOG4-RSA-SHA256" || q.Get("X-Goog-Signature") == "" ||
		q.Get("X-Goog-Credential") == "" {
		t.Errorf("signed URL query %v: want a V4 signature", q)
	}

	plain, err := New(ctx, Parameters{Bucket: "b", Endpoint: "http://127.0.0.1:4443"})
	if err != nil {
		t.Fatal(err)
	}
	defer plain.Close()
	if _, err := plain.SignedURL(ctx, "/f", time.Minute); !errors.Is(err, errors.ErrUnsupported) {
		t.Errorf("SignedURL without a key = %v, want errors.ErrUnsupported", err)
	}
}
