package config

import (
	"errors"
	"fmt"
	"net"
	"reflect"
	"regexp"
	"strconv"
	"strings"
)

// Validate reports the first invalid value as a one-line error that names
// its key, e.g. `config: log.level: "loud" is not one of debug, info, warn, error`.
func (c *Config) Validate() error {
	if c.Version != "" && c.Version != "0.1" {
		return fmt.Errorf("config: version: %q is not supported; cairn reads version 0.1 configurations", c.Version)
	}
	if _, ok := canonicalLevel(c.Log.Level); !ok {
		return fmt.Errorf("config: log.level: %q is not one of debug, info, warn, error", c.Log.Level)
	}
	switch strings.ToLower(c.Log.Formatter) {
	case "text", "json", "logstash":
	default:
		return fmt.Errorf("config: log.formatter: %q is not one of text, json, logstash", c.Log.Formatter)
	}
	for i, h := range c.Log.Hooks {
		if h.Disabled {
			continue
		}
		key := fmt.Sprintf("config: log.hooks[%d]", i)
		if h.Type != "mail" {
			return fmt.Errorf("%s.type: %q is not mail, the one hook type", key, h.Type)
		}
		for _, l := range h.Levels {
			if _, ok := HookLevel(l); !ok {
				return fmt.Errorf("%s.levels: %q is not one of panic, fatal, error, warn, info, debug, trace", key, l)
			}
		}
		if err := validateAddr(h.Options.SMTP.Addr); err != nil {
			return fmt.Errorf("%s.options.smtp.addr: %w", key, err)
		}
		if h.Options.From == "" || len(h.Options.To) == 0 {
			return fmt.Errorf("%s.options: from and to are required", key)
		}
	}
	if c.HTTP.Net != "unix" {
		if err := validateAddr(c.HTTP.Addr); err != nil {
			return fmt.Errorf("config: http.addr: %w", err)
		}
	} else if c.HTTP.Addr == "" {
		return errors.New("config: http.addr: the socket's path is required with http.net: unix")
	}
	if err := c.HTTP.validateServing(); err != nil {
		return err
	}
	if _, err := c.HTTP.TrustedProxyPrefixes(); err != nil {
		return err
	}
	if err := c.Auth.validate(); err != nil {
		return err
	}
	if err := c.Validation.validate(); err != nil {
		return err
	}
	if err := c.Proxy.validate(); err != nil {
		return err
	}
	if err := c.Retention.validate(); err != nil {
		return err
	}
	if err := c.Replication.validate(); err != nil {
		return err
	}
	if err := c.UI.validate(c.HTTP.Debug.Addr); err != nil {
		return err
	}
	if err := c.Middleware.validate(); err != nil {
		return err
	}
	if c.Redis != nil {
		if err := c.Redis.validate(); err != nil {
			return err
		}
	}
	if r := c.Storage.Dedup.Metadata.Redis; r != nil && r.Addr == "" && c.Redis == nil {
		return errors.New("config: storage.dedup.metadata.redis.addr: must be set (host:port), or give the redis section")
	}
	if err := c.Storage.Cache.validate(c.Redis != nil); err != nil {
		return err
	}
	if err := c.Health.validate(); err != nil {
		return err
	}
	if err := c.Notifications.validate(); err != nil {
		return err
	}
	switch {
	case c.Catalog.MaxEntries < 0:
		return fmt.Errorf("config: catalog.maxentries: must not be negative, not %d", c.Catalog.MaxEntries)
	case c.Tags.MaxTags < 0:
		return fmt.Errorf("config: tags.maxtags: must not be negative, not %d", c.Tags.MaxTags)
	case c.Storage.Tag.ConcurrencyLimit < 0:
		return fmt.Errorf("config: storage.tag.concurrencylimit: must not be negative, not %d", c.Storage.Tag.ConcurrencyLimit)
	}
	return c.Storage.validate()
}

func (v *Validation) validate() error {
	idx := v.Manifests.Indexes
	switch strings.ToLower(idx.Platforms) {
	case "all", "none":
	case "list":
		if len(idx.PlatformList) == 0 {
			return errors.New("config: validation.manifests.indexes.platformlist: must name at least one platform when platforms is list")
		}
	default:
		return fmt.Errorf("config: validation.manifests.indexes.platforms: %q is not one of all, none, list", idx.Platforms)
	}
	for key, res := range map[string][]string{"allow": v.Manifests.URLs.Allow, "deny": v.Manifests.URLs.Deny} {
		for _, re := range res {
			if _, err := regexp.Compile(re); err != nil {
				return fmt.Errorf("config: validation.manifests.urls.%s: %s", key, oneLine(err))
			}
		}
	}
	return nil
}

func (s *Storage) validate() error {
	switch names := driversSet(reflect.ValueOf(s).Elem()); len(names) {
	case 0:
		return errors.New("config: storage: no storage driver selected")
	case 1:
	default:
		return fmt.Errorf("config: storage: more than one storage driver (%s); give exactly one", strings.Join(names, ", "))
	}
	if fs := s.Filesystem; fs != nil {
		if fs.RootDirectory == "" {
			return errors.New("config: storage.filesystem.rootdirectory: must not be empty")
		}
		if fs.MaxThreads < minMaxThreads {
			return fmt.Errorf("config: storage.filesystem.maxthreads: %d is below the minimum of %d", fs.MaxThreads, minMaxThreads)
		}
	}
	// Distribution accepts any duration here; a negative age would purge
	// uploads still in progress, and a zero interval would purge in a loop.
	up := s.Maintenance.UploadPurging
	if up.Age <= 0 {
		return fmt.Errorf("config: storage.maintenance.uploadpurging.age: must be positive, not %s", up.Age)
	}
	if up.Interval <= 0 {
		return fmt.Errorf("config: storage.maintenance.uploadpurging.interval: must be positive, not %s", up.Interval)
	}
	if err := s.Dedup.validate(); err != nil {
		return err
	}
	if err := s.Cache.validateManifests(); err != nil {
		return err
	}
	return s.GC.validate()
}

// validateAddr accepts host:port with a numeric port; the host may be empty
// (all interfaces) and port 0 asks for any free port. Whether the host
// resolves is for the listener to find out.
func validateAddr(addr string) error {
	_, port, err := net.SplitHostPort(addr)
	if err != nil {
		var ae *net.AddrError
		if errors.As(err, &ae) {
			return fmt.Errorf("%q: %s", addr, ae.Err)
		}
		return fmt.Errorf("%q: %w", addr, err)
	}
	if n, err := strconv.Atoi(port); err != nil || n < 0 || n > 65535 {
		return fmt.Errorf("%q: port %q is not a number from 0 to 65535", addr, port)
	}
	return nil
}

// canonicalLevel maps a log level as written (any case, "warning") to its
// canonical name.
func canonicalLevel(level string) (string, bool) {
	switch l := strings.ToLower(level); l {
	case "debug", "info", "warn", "error":
		return l, true
	case "warning":
		return "warn", true
	}
	return "", false
}
