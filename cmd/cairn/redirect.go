package main

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/cairn-registry/cairn/internal/config"
	"github.com/cairn-registry/cairn/internal/layout"
	"github.com/cairn-registry/cairn/internal/registry"
	"github.com/cairn-registry/cairn/internal/storage/driver"
	"github.com/cairn-registry/cairn/internal/storage/middleware"
)

// urlSigner is a driver that signs URLs for its own files without a
// request (s3; gcs with a service account key; azure). A driver whose
// credentials cannot sign returns an error wrapping errors.ErrUnsupported.
type urlSigner interface {
	SignedURL(ctx context.Context, path string, expiry time.Duration) (string, error)
}

// bucketKeyer maps storage paths to S3 object keys (the s3 driver), for the
// cloudfront middleware.
type bucketKeyer interface {
	BucketKey(path string) string
}

// redirectExpiry is how long a presigned blob URL is valid (distribution's
// 20 minutes). Stores check it when a request starts, so a download that
// outlasts it still completes; a client that retries later asks cairn for
// a new URL.
const redirectExpiry = 20 * time.Minute

// signedURLs makes a urlSigner a registry.Redirector.
type signedURLs struct {
	s      urlSigner
	expiry time.Duration
}

func (s signedURLs) RedirectURL(ctx context.Context, path string) (string, error) {
	return s.s.SignedURL(ctx, path, s.expiry)
}

// newRedirector returns where blob GETs are redirected to: the enabled
// storage middleware, else the driver's presigned URLs; desc says which, or
// with a nil Redirector why there is none (for the start-up log). Warnings
// name middleware options that have no effect.
func newRedirector(ctx context.Context, cfg *config.Config, d driver.Driver) (r registry.Redirector, desc string, warnings []string, err error) {
	if cfg.Storage.Redirect.Disable {
		return nil, "storage.redirect.disable is true", nil, nil
	}
	if sm, i, ok := cfg.Middleware.RedirectMiddleware(); ok {
		where := fmt.Sprintf("config: middleware.storage[%d] (%s)", i, sm.Name)
		switch sm.Name {
		case config.MiddlewareRedirect:
			r, err := middleware.NewRedirect(sm.Options)
			if err != nil {
				return nil, "", nil, fmt.Errorf("%s: %w", where, err)
			}
			return r, "the redirect middleware's baseurl", nil, nil
		case config.MiddlewareCloudFront:
			keyer, ok := driver.As[bucketKeyer](d)
			if !ok {
				return nil, "", nil, fmt.Errorf("%s: needs the s3 storage driver, not %s", where, d.Name())
			}
			r, warnings, err := middleware.NewCloudFront(sm.Options, keyer.BucketKey)
			if err != nil {
				return nil, "", nil, fmt.Errorf("%s: %w", where, err)
			}
			return r, "signed CloudFront URLs", warnings, nil
		}
	}
	s, ok := driver.As[urlSigner](d)
	if !ok {
		return nil, "the " + d.Name() + " driver serves blobs itself", nil, nil
	}
	// Signing is local; a driver that cannot sign says so at once.
	if _, err := s.SignedURL(ctx, layout.BlobsDir, redirectExpiry); errors.Is(err, errors.ErrUnsupported) {
		return nil, err.Error(), nil, nil
	}
	return signedURLs{s: s, expiry: redirectExpiry}, fmt.Sprintf("%s URLs signed for %s", d.Name(), redirectExpiry), nil, nil
}
