package config

import (
	"fmt"
	"strings"
)

// Redirect is distribution's storage.redirect: blob GETs are answered with a
// 307 to a URL the store (or a middleware's CDN) serves, unless disabled.
type Redirect struct {
	// Disable serves every blob through cairn even where the store can
	// sign URLs (S3, GCS with a service account key, Azure) or a storage
	// middleware names a CDN.
	Disable bool `yaml:"disable"`
}

// Middleware is distribution's middleware section. Only storage middlewares
// that choose redirect URLs are implemented.
type Middleware struct {
	Storage []StorageMiddleware `yaml:"storage"`

	_ notYet `yaml:"registry"`
	_ notYet `yaml:"repository"`
}

// StorageMiddleware is one entry of middleware.storage, in distribution's
// form. The options are read by package storage/middleware when the
// server starts.
type StorageMiddleware struct {
	Name     string         `yaml:"name"`
	Disabled bool           `yaml:"disabled"`
	Options  map[string]any `yaml:"options"`
}

// Storage middleware names cairn implements.
const (
	MiddlewareRedirect   = "redirect"
	MiddlewareCloudFront = "cloudfront"
)

// RedirectMiddleware returns the enabled storage middleware, if any, and
// its index in middleware.storage (for messages).
func (m *Middleware) RedirectMiddleware() (StorageMiddleware, int, bool) {
	for i, sm := range m.Storage {
		if !sm.Disabled {
			return sm, i, true
		}
	}
	return StorageMiddleware{}, -1, false
}

func (m *Middleware) validate() error {
	enabled := 0
	for i, sm := range m.Storage {
		switch sm.Name {
		case MiddlewareRedirect, MiddlewareCloudFront:
		case "":
			return fmt.Errorf("config: middleware.storage[%d]: name is required", i)
		default:
			// distribution's rewrite, or one of its own: ignoring it would
			// send clients to URLs the operator did not mean.
			return fmt.Errorf("config: middleware.storage[%d]: %q is not supported (cairn implements %s, %s)",
				i, sm.Name, MiddlewareRedirect, MiddlewareCloudFront)
		}
		if !sm.Disabled {
			enabled++
		}
	}
	if enabled > 1 {
		names := make([]string, 0, len(m.Storage))
		for _, sm := range m.Storage {
			if !sm.Disabled {
				names = append(names, sm.Name)
			}
		}
		return fmt.Errorf("config: middleware.storage: more than one enabled (%s); each would choose the redirect URL, give one",
			strings.Join(names, ", "))
	}
	return nil
}
