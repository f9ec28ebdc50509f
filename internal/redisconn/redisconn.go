// Package redisconn opens the one Redis connection cairn's Redis users
// share (the redis section of the configuration): a single server, a
// sentinel-managed primary, or a cluster, as go-redis's UniversalOptions
// choose, optionally over TLS.
package redisconn

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"os"
	"strings"

	"github.com/redis/go-redis/v9"
	"github.com/redis/go-redis/v9/maintnotifications"
)

// Options are go-redis's UniversalOptions (without TLSConfig) and the TLS
// files to build it from.
type Options struct {
	redis.UniversalOptions
	// TLS turns TLS on; Certificate and Key (together) are the client's
	// certificate, RootCAs the CA files that verify the server (the
	// system's roots when empty).
	TLS              bool
	Certificate, Key string
	RootCAs          []string
}

// Open connects and checks that the server answers.
func Open(ctx context.Context, o Options) (redis.UniversalClient, error) {
	c, err := New(o)
	if err != nil {
		return nil, err
	}
	if err := c.Ping(ctx).Err(); err != nil {
		c.Close()
		return nil, fmt.Errorf("redis at %s: %w", strings.Join(o.Addrs, ","), err)
	}
	return c, nil
}

// New returns a client that connects on first use, for a user that works
// on (more slowly) while the server is down.
func New(o Options) (redis.UniversalClient, error) {
	u := o.UniversalOptions
	if len(u.Addrs) == 0 {
		return nil, fmt.Errorf("redis: no address")
	}
	if o.TLS {
		tc, err := tlsConfig(o)
		if err != nil {
			return nil, err
		}
		u.TLSConfig = tc
	}
	if u.MaintNotificationsConfig == nil {
		// A managed-cloud handshake that a plain server refuses: skip the
		// round trip.
		u.MaintNotificationsConfig = &maintnotifications.Config{Mode: maintnotifications.ModeDisabled}
	}
	return redis.NewUniversalClient(&u), nil
}

func tlsConfig(o Options) (*tls.Config, error) {
	tc := &tls.Config{MinVersion: tls.VersionTLS12}
	if o.Certificate != "" {
		cert, err := tls.LoadX509KeyPair(o.Certificate, o.Key)
		if err != nil {
			return nil, fmt.Errorf("redis: tls certificate and key: %w", err)
		}
		tc.Certificates = []tls.Certificate{cert}
	}
	if len(o.RootCAs) > 0 {
		pool := x509.NewCertPool()
		for _, p := range o.RootCAs {
			pem, err := os.ReadFile(p)
			if err != nil {
				return nil, fmt.Errorf("redis: tls rootcas: %w", err)
			}
			if !pool.AppendCertsFromPEM(pem) {
				return nil, fmt.Errorf("redis: tls rootcas: %s holds no PEM certificate", p)
			}
		}
		tc.RootCAs = pool
	}
	return tc, nil
}
