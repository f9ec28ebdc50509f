package config

import (
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/cairn-registry/cairn/internal/redisconn"
)

// Redis is the top-level redis section: distribution's keys (go-redis's
// UniversalOptions plus tls), and the one Redis connection that every Redis
// user in cairn shares: the blob descriptor cache
// (storage.cache.blobdescriptor: redis) and, when its own section names no
// address, the dedup metadata store (storage.dedup.metadata.redis).
type Redis struct {
	// Addrs is one host:port, or several: cluster nodes, or sentinels
	// with MasterName.
	Addrs []string `yaml:"addrs"`
	// Addr is the single address older distribution versions read.
	Addr             string        `yaml:"addr"`
	ClientName       string        `yaml:"clientname"`
	DB               int           `yaml:"db"`
	Protocol         int           `yaml:"protocol"`
	Username         string        `yaml:"username"`
	Password         string        `yaml:"password"`
	SentinelUsername string        `yaml:"sentinelusername"`
	SentinelPassword string        `yaml:"sentinelpassword"`
	MaxRetries       int           `yaml:"maxretries"`
	MinRetryBackoff  time.Duration `yaml:"minretrybackoff"`
	MaxRetryBackoff  time.Duration `yaml:"maxretrybackoff"`
	DialTimeout      time.Duration `yaml:"dialtimeout"`
	ReadTimeout      time.Duration `yaml:"readtimeout"`
	WriteTimeout     time.Duration `yaml:"writetimeout"`
	// ContextTimeoutEnabled makes commands honour their context's deadline.
	ContextTimeoutEnabled bool          `yaml:"contexttimeoutenabled"`
	PoolFIFO              bool          `yaml:"poolfifo"`
	PoolSize              int           `yaml:"poolsize"`
	PoolTimeout           time.Duration `yaml:"pooltimeout"`
	MinIdleConns          int           `yaml:"minidleconns"`
	MaxIdleConns          int           `yaml:"maxidleconns"`
	MaxActiveConns        int           `yaml:"maxactiveconns"`
	ConnMaxIdleTime       time.Duration `yaml:"connmaxidletime"`
	ConnMaxLifetime       time.Duration `yaml:"connmaxlifetime"`
	MaxRedirects          int           `yaml:"maxredirects"`
	ReadOnly              bool          `yaml:"readonly"`
	RouteByLatency        bool          `yaml:"routebylatency"`
	RouteRandomly         bool          `yaml:"routerandomly"`
	MasterName            string        `yaml:"mastername"`
	DisableIdentity       bool          `yaml:"disableidentity"`
	IdentitySuffix        string        `yaml:"identitysuffix"`
	UnstableResp3         bool          `yaml:"unstableresp3"`
	TLS                   RedisTLS      `yaml:"tls"`
	// Prefix (cairn) starts every key cairn's blob descriptor cache writes
	// (default "cairn:"), so registries can share a server.
	Prefix string `yaml:"prefix"`
}

// RedisTLS configures TLS to Redis. It is on when Enabled is true, or when
// Enabled is not given and a certificate or root CAs are.
type RedisTLS struct {
	Certificate string   `yaml:"certificate"`
	Key         string   `yaml:"key"`
	RootCAs     []string `yaml:"rootcas"`
	// Enabled is the switch older distribution versions read.
	Enabled *bool `yaml:"enabled"`
}

// On reports whether connections to Redis use TLS.
func (t RedisTLS) On() bool {
	if t.Enabled != nil {
		return *t.Enabled
	}
	return t.Certificate != "" || len(t.RootCAs) > 0
}

// Addresses returns Addrs, or Addr alone.
func (r *Redis) Addresses() []string {
	if len(r.Addrs) == 0 && r.Addr != "" {
		return []string{r.Addr}
	}
	return r.Addrs
}

func (r *Redis) validate() error {
	if len(r.Addresses()) == 0 {
		return errors.New("config: redis.addrs: must name at least one host:port")
	}
	if (r.TLS.Certificate == "") != (r.TLS.Key == "") {
		return errors.New("config: redis.tls: certificate and key go together")
	}
	return nil
}

// Tag tunes tag lookups.
type Tag struct {
	// ConcurrencyLimit bounds the tag links read at once when a manifest
	// delete looks for the tags naming it (default 0: GOMAXPROCS).
	ConcurrencyLimit int `yaml:"concurrencylimit"`
}

const (
	defaultBlobDescriptorSize = 10000
	defaultBlobDescriptorTTL  = 10 * time.Minute
)

// DescriptorCache returns the blob descriptor cache kind: "", inmemory or
// redis.
func (c *Cache) DescriptorCache() string {
	if c.BlobDescriptor != "" {
		return strings.ToLower(c.BlobDescriptor)
	}
	return strings.ToLower(c.LayerInfo)
}

func (c *Cache) validate(haveRedis bool) error {
	switch c.DescriptorCache() {
	case "", "inmemory":
	case "redis":
		if !haveRedis {
			return errors.New("config: storage.cache.blobdescriptor: redis needs the redis section")
		}
	default:
		return fmt.Errorf("config: storage.cache.blobdescriptor: %q is not one of inmemory, redis", c.DescriptorCache())
	}
	switch {
	case c.BlobDescriptorSize < 0:
		return fmt.Errorf("config: storage.cache.blobdescriptorsize: must not be negative, not %d", c.BlobDescriptorSize)
	case c.TTL <= 0:
		return fmt.Errorf("config: storage.cache.ttl: must be positive, not %s", c.TTL)
	}
	return nil
}

// Catalog bounds the catalog endpoint's pages.
type Catalog struct {
	// MaxEntries, when set, is distribution's rule: a request without n
	// gets at most 100 repositories (fewer when MaxEntries is lower), and
	// one asking for more than MaxEntries is refused with
	// PAGINATION_NUMBER_INVALID. Unset (cairn's default), a request
	// without n gets every repository and n is capped at 10000.
	MaxEntries int `yaml:"maxentries"`
}

// Tags bounds the tags endpoint's pages.
type Tags struct {
	// MaxTags caps n: a request asking for more gets MaxTags tags and a
	// Link to the next page (0: no cap beyond cairn's 10000).
	MaxTags int `yaml:"maxtags"`
}

// Options returns the connection options for redisconn.Open.
func (r *Redis) Options() redisconn.Options {
	return redisconn.Options{
		UniversalOptions: redis.UniversalOptions{
			Addrs: r.Addresses(), ClientName: r.ClientName, DB: r.DB, Protocol: r.Protocol,
			Username: r.Username, Password: r.Password,
			SentinelUsername: r.SentinelUsername, SentinelPassword: r.SentinelPassword,
			MaxRetries: r.MaxRetries, MinRetryBackoff: r.MinRetryBackoff, MaxRetryBackoff: r.MaxRetryBackoff,
			DialTimeout: r.DialTimeout, ReadTimeout: r.ReadTimeout, WriteTimeout: r.WriteTimeout,
			ContextTimeoutEnabled: r.ContextTimeoutEnabled,
			PoolFIFO:              r.PoolFIFO, PoolSize: r.PoolSize, PoolTimeout: r.PoolTimeout,
			MinIdleConns: r.MinIdleConns, MaxIdleConns: r.MaxIdleConns, MaxActiveConns: r.MaxActiveConns,
			ConnMaxIdleTime: r.ConnMaxIdleTime, ConnMaxLifetime: r.ConnMaxLifetime,
			MaxRedirects: r.MaxRedirects, ReadOnly: r.ReadOnly, RouteByLatency: r.RouteByLatency, RouteRandomly: r.RouteRandomly,
			MasterName: r.MasterName, DisableIdentity: r.DisableIdentity, IdentitySuffix: r.IdentitySuffix,
			UnstableResp3: r.UnstableResp3,
		},
		TLS:         r.TLS.On(),
		Certificate: r.TLS.Certificate,
		Key:         r.TLS.Key,
		RootCAs:     r.TLS.RootCAs,
	}
}
