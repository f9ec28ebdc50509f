package config

import (
	"errors"
	"fmt"
	"net"
	"reflect"
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
	if err := validateAddr(c.HTTP.Addr); err != nil {
		return fmt.Errorf("config: http.addr: %w", err)
	}
	if err := c.HTTP.validateServing(); err != nil {
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
	if err := c.Middleware.validate(); err != nil {
		return err
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
	if err := s.Cache.validate(); err != nil {
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
