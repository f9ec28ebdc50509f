package main

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"net/http"
	"slices"
	"strings"

	"github.com/cairn-registry/cairn/internal/blobcache"
	"github.com/cairn-registry/cairn/internal/config"
	"github.com/cairn-registry/cairn/internal/health"
	"github.com/cairn-registry/cairn/internal/linkversion"
	"github.com/cairn-registry/cairn/internal/logmail"
	"github.com/cairn-registry/cairn/internal/metrics"
	"github.com/cairn-registry/cairn/internal/redisconn"
	"github.com/cairn-registry/cairn/internal/registry"
	"github.com/cairn-registry/cairn/internal/storage/driver"
)

// Wiring of the configuration's optional sections that cairn serve (and,
// for the logger, every command) builds from distribution's keys: log
// format, health checks, the blob descriptor cache, notifications and the
// manifest URL rules.

// alternation joins regular expressions into one that matches what any of
// them matches.
func alternation(res []string) string {
	parts := make([]string, len(res))
	for i, re := range res {
		parts[i] = "(?:" + re + ")"
	}
	return strings.Join(parts, "|")
}

// newLogger builds the process's logger from the log section: level,
// formatter (text, json, logstash), fields on every line, and the caller
// with reportcaller.
func newLogger(w io.Writer, c config.Log) *slog.Logger {
	opts := &slog.HandlerOptions{Level: slogLevel(c.Level), AddSource: c.ReportCaller}
	var h slog.Handler
	switch c.Formatter {
	case "json":
		h = slog.NewJSONHandler(w, opts)
	case "logstash":
		// logstash's JSON event: @timestamp, @version and message.
		opts.ReplaceAttr = func(groups []string, a slog.Attr) slog.Attr {
			if len(groups) == 0 {
				switch a.Key {
				case slog.TimeKey:
					a.Key = "@timestamp"
				case slog.MessageKey:
					a.Key = "message"
				}
			}
			return a
		}
		h = slog.NewJSONHandler(w, opts).WithAttrs([]slog.Attr{slog.String("@version", "1")})
	default:
		h = slog.NewTextHandler(w, opts)
	}
	for _, hook := range c.Hooks {
		if hook.Disabled {
			continue
		}
		var levels []slog.Level
		for _, name := range hook.Levels {
			l, _ := config.HookLevel(name) // validated
			levels = append(levels, slogLevel(l))
		}
		o := hook.Options
		h = logmail.New(h, logmail.Options{
			Levels: levels, Addr: o.SMTP.Addr, Username: o.SMTP.Username, Password: o.SMTP.Password,
			Insecure: o.SMTP.Insecure, From: o.From, To: o.To,
			OnError: func(err error) { fmt.Fprintf(w, "cairn: %v\n", err) },
		})
	}
	if len(c.Fields) > 0 {
		attrs := make([]slog.Attr, 0, len(c.Fields))
		for _, k := range slices.Sorted(maps.Keys(c.Fields)) {
			attrs = append(attrs, slog.Any(k, c.Fields[k]))
		}
		h = h.WithAttrs(attrs)
	}
	return slog.New(h)
}

// healthChecks turns the health section into checks.
func healthChecks(h config.Health, d driver.Driver) []health.Check {
	var checks []health.Check
	if sd := h.StorageDriver; sd.Enabled {
		ready := metrics.StorageReady(d)
		checks = append(checks, health.Check{
			Name: "storagedriver_" + d.Name(), Interval: sd.Interval, Threshold: sd.Threshold,
			Run: func(ctx context.Context) error {
				ctx, cancel := context.WithTimeout(ctx, readyTimeout)
				defer cancel()
				return ready(ctx)
			},
		})
	}
	for _, f := range h.File {
		checks = append(checks, health.Check{Name: "file:" + f.File, Interval: f.Interval, Run: health.File(f.File)})
	}
	for _, c := range h.HTTP {
		checks = append(checks, health.Check{Name: "http:" + c.URI, Interval: c.Interval, Threshold: c.Threshold,
			Run: health.HTTP(c.URI, http.Header(c.Headers), c.StatusCode, c.Timeout)})
	}
	for _, c := range h.TCP {
		checks = append(checks, health.Check{Name: "tcp:" + c.Addr, Interval: c.Interval, Threshold: c.Threshold,
			Run: health.TCP(c.Addr, c.Timeout)})
	}
	return checks
}

// newLinkVersions builds the link versions every node shares when the
// redis section is configured (nil when it is not): serve, `cairn gc`,
// retention and replication bump them after their link writes, whether or
// not they cache links themselves. Redis down at start is no error: until it answers, links
// are read from storage on every request.
func newLinkVersions(cfg *config.Config) (registry.LinkVersions, func(), error) {
	if cfg.Redis == nil {
		return nil, func() {}, nil
	}
	o := cfg.Redis.Options()
	// A failure is reported at once (linkversion then stops asking for a
	// while): retries would hold up every manifest request.
	o.MaxRetries, o.ContextTimeoutEnabled = -1, true
	client, err := redisconn.New(o)
	if err != nil {
		return nil, nil, fmt.Errorf("redis: %w", err)
	}
	return linkversion.New(client, redisPrefix(cfg)), func() { client.Close() }, nil
}

// redisPrefix starts every key cairn writes in the redis section's server.
func redisPrefix(cfg *config.Config) string {
	if cfg.Redis.Prefix == "" {
		return "cairn:"
	}
	return cfg.Redis.Prefix
}

// newDescriptorCache builds storage.cache.blobdescriptor's cache: nil when
// none is configured; the Redis one on the redis section's server. Lookups
// are counted by observe (nil: not counted). serve and `cairn gc` both
// build it here, so that GC forgets the very keys the servers read.
func newDescriptorCache(ctx context.Context, cfg *config.Config, observe blobcache.Observer) (registry.DescriptorCache, func(), error) {
	c := cfg.Storage.Cache
	switch c.DescriptorCache() {
	case "inmemory":
		return blobcache.NewMemory(c.BlobDescriptorSize, c.TTL, observe), func() {}, nil
	case "redis":
		client, err := redisconn.Open(ctx, cfg.Redis.Options())
		if err != nil {
			return nil, nil, fmt.Errorf("storage.cache.blobdescriptor: %w", err)
		}
		return blobcache.NewRedis(client, redisPrefix(cfg), c.TTL, observe), func() { client.Close() }, nil
	}
	return nil, func() {}, nil
}

// slogLevel maps a canonical level name to slog's.
func slogLevel(name string) slog.Level {
	switch name {
	case "debug":
		return slog.LevelDebug
	case "warn":
		return slog.LevelWarn
	case "error":
		return slog.LevelError
	}
	return slog.LevelInfo
}
