package testsuite

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net/http"
	"testing"
	"time"

	"github.com/cairn-registry/cairn/internal/storage/driver"
)

// urlSigner is the optional interface of drivers whose files clients may
// GET directly (blob redirects).
type urlSigner interface {
	SignedURL(ctx context.Context, path string, expiry time.Duration) (string, error)
}

// testSignedURL checks, for a driver that signs URLs, that a signed URL
// GETs the file with no credentials, honours a Range, and that an invalid
// path is refused. A driver without the interface, or whose credentials
// cannot sign, skips.
func testSignedURL(t *testing.T, d driver.Driver, base string) {
	s := capability[urlSigner](t, d, "sign URLs")
	ctx := context.Background()
	p := base + "/blobs/data"
	want := randomBytes(7, 100<<10)
	put(t, d, p, want)
	u, err := s.SignedURL(ctx, p, time.Minute)
	if errors.Is(err, errors.ErrUnsupported) {
		t.Skip(err)
	}
	if err != nil {
		t.Fatalf("SignedURL(%s): %v", p, err)
	}
	if got, status := httpGet(t, u, ""); status != http.StatusOK || !bytes.Equal(got, want) {
		t.Errorf("GET %s: status %d, %d bytes; want 200 and the file's %d", u, status, len(got), len(want))
	}
	if got, status := httpGet(t, u, "bytes=1000-1999"); status != http.StatusPartialContent || !bytes.Equal(got, want[1000:2000]) {
		t.Errorf("GET %s Range bytes=1000-1999: status %d, %d bytes; want 206 and those bytes", u, status, len(got))
	}
	refusesBadPaths(t, base, "SignedURL", func(bad string) error {
		_, err := s.SignedURL(ctx, bad, time.Minute)
		return err
	})
}

func httpGet(t *testing.T, u, rng string) ([]byte, int) {
	t.Helper()
	req, err := http.NewRequest(http.MethodGet, u, nil)
	if err != nil {
		t.Fatal(err)
	}
	if rng != "" {
		req.Header.Set("Range", rng)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return b, resp.StatusCode
}
