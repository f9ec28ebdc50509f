// Package config loads cairn's YAML configuration. The keys are those of
// distribution/distribution's config.yml, so a distribution configuration
// works unchanged: keys cairn implements are honoured, keys distribution
// knows but cairn does not implement yet are reported as warnings (or
// refused, where running without them would weaken the registry or serve the
// wrong data), and any other key is reported as unknown with its full path.
//
// Environment variables override the file as in distribution:
// REGISTRY_STORAGE_FILESYSTEM_ROOTDIRECTORY=/x sets storage.filesystem.rootdirectory.
// Load and Parse never read the environment; the CLI calls
// LoadWithEnv(path, os.Environ()).
package config

import (
	"fmt"
	"os"
	"reflect"
	"strings"
	"time"

	"github.com/cairn-registry/cairn/internal/storage/driver/azure"
	"github.com/cairn-registry/cairn/internal/storage/driver/gcs"
	"github.com/cairn-registry/cairn/internal/storage/driver/s3"
)

// Config is cairn's configuration. Only the keys with fields below are
// implemented; the blank fields name distribution keys that cairn recognises
// but does not implement yet, so they are reported rather than called unknown.
type Config struct {
	// Version is the configuration format; when given it must be "0.1", the
	// only version distribution reads. cairn allows it to be absent.
	Version string  `yaml:"version"`
	Log     Log     `yaml:"log"`
	HTTP    HTTP    `yaml:"http"`
	Storage Storage `yaml:"storage"`
	// Validation configures what a manifest push must satisfy.
	Validation Validation `yaml:"validation"`

	// Auth configures authentication (htpasswd or token, optionally
	// anonymous pull); none by default.
	Auth Auth `yaml:"auth"`
	// Proxy makes cairn a pull-through cache of other registries.
	Proxy Proxy `yaml:"proxy"`

	// Middleware holds distribution's storage middlewares that decide where
	// blob GETs are redirected (redirect, cloudfront).
	Middleware Middleware `yaml:"middleware"`

	_ notYet   `yaml:"notifications"`
	_ notYet   `yaml:"redis"`
	_ notYet   `yaml:"health"`
	_ notYet   `yaml:"catalog"`
	_ notYet   `yaml:"tags"`
	_ notYet   `yaml:"policy"`
	_ obsolete `yaml:"reporting"`
	_ obsolete `yaml:"compatibility"`
}

// Log configures logging.
type Log struct {
	// Level is debug, info, warn or error (default info). Case is ignored and
	// "warning" means warn; loading stores the canonical lower-case name.
	// distribution's deprecated top-level "loglevel" key is read as log.level.
	Level string `yaml:"level"`

	_ notYet `yaml:"accesslog"`
	_ notYet `yaml:"formatter"`
	_ notYet `yaml:"fields"`
	_ notYet `yaml:"hooks"`
	_ notYet `yaml:"reportcaller"`
}

// HTTP configures the listener.
type HTTP struct {
	// Addr is the TCP host:port to listen on (default 127.0.0.1:5000).
	Addr string `yaml:"addr"`
	// TLS serves HTTPS (and HTTP/2) when present.
	TLS *TLS `yaml:"tls"`
	// Debug is the operators' listener: metrics, health, profiling.
	Debug Debug `yaml:"debug"`
	HTTP2 HTTP2 `yaml:"http2"`

	_ notYet `yaml:"net"`
	_ notYet `yaml:"host"`
	_ notYet `yaml:"prefix"`
	_ notYet `yaml:"secret"`
	_ notYet `yaml:"relativeurls"`
	_ notYet `yaml:"draintimeout"`
	_ notYet `yaml:"headers"`
	_ notYet `yaml:"h2c"`
}

// Storage selects the storage driver and its parameters. Exactly one driver
// section (fields tagged cairn:"driver") may be present; the other keys are
// parameters, as in distribution. With no driver section the filesystem
// driver stores under ./cairn-data.
type Storage struct {
	Filesystem *Filesystem `yaml:"filesystem" cairn:"driver"`
	// InMemory is selected by an "inmemory:" key, even with no value.
	InMemory *InMemory `yaml:"inmemory" cairn:"driver"`
	// The object-store drivers own their parameter types (distribution's
	// keys for each); config names them so unknown keys are still reported.
	S3          *s3.Parameters    `yaml:"s3" cairn:"driver"`
	GCS         *gcs.Parameters   `yaml:"gcs" cairn:"driver"`
	Azure       *azure.Parameters `yaml:"azure" cairn:"driver"`
	Delete      Delete            `yaml:"delete"`
	Maintenance Maintenance       `yaml:"maintenance"`
	// GC is cairn's garbage collector (see gc.go).
	GC GC `yaml:"gc"`
	// Dedup is cairn's layer deduplication (see dedup.go).
	Dedup Dedup `yaml:"dedup"`
	// Redirect controls blob redirects to the store (see redirect.go).
	Redirect Redirect `yaml:"redirect"`

	// Cache keeps manifests and links in memory (see cache.go).
	Cache Cache `yaml:"cache"`

	_ notYet `yaml:"tag"`

	// defaulted is set while Filesystem holds the ./cairn-data default rather
	// than a section the user wrote, so that naming another driver (in the
	// environment) replaces it instead of counting as a second driver.
	defaulted bool
}

// Filesystem configures the filesystem driver.
type Filesystem struct {
	// RootDirectory holds the registry's files. A filesystem section without
	// it means /var/lib/registry, as in distribution; with no driver section
	// at all cairn uses ./cairn-data.
	RootDirectory string `yaml:"rootdirectory"`
	// MaxThreads bounds concurrent blocking filesystem calls (default 100;
	// values below 25 are raised to 25, as distribution does).
	MaxThreads int `yaml:"maxthreads"`
}

// InMemory configures the in-memory driver (tests only); it has no parameters.
type InMemory struct{}

// Delete configures deletion of manifests and blobs through the API.
type Delete struct {
	// Enabled defaults to true in cairn; distribution's default is false.
	Enabled bool `yaml:"enabled"`
}

// Maintenance configures background upkeep and read-only mode.
type Maintenance struct {
	UploadPurging UploadPurging `yaml:"uploadpurging"`
	ReadOnly      ReadOnly      `yaml:"readonly"`
}

// UploadPurging removes upload directories left behind by abandoned uploads.
// Durations are Go duration strings ("168h", "30m"); plain numbers are
// rejected, as distribution rejects them for these keys.
type UploadPurging struct {
	Enabled  bool          `yaml:"enabled"`  // default true
	Age      time.Duration `yaml:"age"`      // uploads older than this are purged; default 168h
	Interval time.Duration `yaml:"interval"` // time between purges; default 24h
	DryRun   bool          `yaml:"dryrun"`   // report what would be purged, delete nothing
}

// ReadOnly refuses writes, e.g. while an offline garbage collection runs.
type ReadOnly struct {
	Enabled bool `yaml:"enabled"`
}

const (
	defaultRootDirectory      = "./cairn-data"
	distributionRootDirectory = "/var/lib/registry"
	defaultMaxThreads         = 100
	minMaxThreads             = 25
)

// notYet marks a distribution key cairn does not implement yet: reported as a
// warning, then ignored.
type notYet struct{}

// refused marks a distribution key cairn does not implement and must not
// ignore; its why tag says what ignoring it would do. Loading fails.
type refused struct{}

// obsolete marks a key that older distribution versions read and current ones
// dropped: reported as a warning, then ignored.
type obsolete struct{}

// setDefaults fills the parameters of a filesystem section the user wrote.
func (f *Filesystem) setDefaults() {
	f.RootDirectory = distributionRootDirectory
	f.MaxThreads = defaultMaxThreads
}

// yieldDefaultDriver is called when a document names the driver "named":
// the default filesystem gives way to another driver, and becomes the user's
// own when filesystem itself is named.
func (s *Storage) yieldDefaultDriver(named string) {
	if !s.defaulted {
		return
	}
	s.defaulted = false
	if named != "filesystem" {
		s.Filesystem = nil
	}
}

// base is the configuration before any document is read: every default
// except the storage driver, which depends on what the documents name.
func base() *Config {
	return &Config{
		Log: Log{Level: "info"},
		HTTP: HTTP{
			Addr:  "127.0.0.1:5000",
			Debug: Debug{Prometheus: Prometheus{Enabled: true, Path: defaultMetricsPath}},
		},
		Storage: Storage{
			Delete: Delete{Enabled: true},
			Maintenance: Maintenance{
				UploadPurging: UploadPurging{
					Enabled:  true,
					Age:      168 * time.Hour,
					Interval: 24 * time.Hour,
				},
			},
			GC:    defaultGC(),
			Dedup: defaultDedup(),
			Cache: defaultCache(),
		},
		Validation: Validation{Manifests: ManifestValidation{Indexes: IndexValidation{Platforms: "all"}}},
	}
}

// Default returns the configuration cairn runs with when given none:
// 127.0.0.1:5000, filesystem storage under ./cairn-data, delete enabled,
// upload purging every 24h of uploads older than 168h, log level info.
func Default() *Config {
	c := base()
	c.finish()
	return c
}

// finish completes a decoded configuration: the default driver when none is
// named, and canonical spellings.
func (c *Config) finish() {
	if c.DriverName() == "" {
		c.Storage.Filesystem = &Filesystem{RootDirectory: defaultRootDirectory, MaxThreads: defaultMaxThreads}
		c.Storage.defaulted = true
	}
	if fs := c.Storage.Filesystem; fs != nil && fs.MaxThreads < minMaxThreads {
		fs.MaxThreads = minMaxThreads
	}
	c.Validation.Manifests.Indexes.Platforms = strings.ToLower(c.Validation.Manifests.Indexes.Platforms)
	if lvl, ok := canonicalLevel(c.Log.Level); ok {
		c.Log.Level = lvl
	}
}

// DriverName names the selected storage driver ("filesystem" or "inmemory"),
// or "" when none is selected.
func (c *Config) DriverName() string {
	names := driversSet(reflect.ValueOf(&c.Storage).Elem())
	if len(names) == 0 {
		return ""
	}
	return names[0]
}

// Parse decodes a configuration document, fills defaults and validates it.
// The warnings name keys that were ignored. It does not read the environment.
func Parse(data []byte) (*Config, []string, error) {
	return parse(data, "")
}

// Load reads and parses the configuration file at path (see Parse). It does
// not read the environment.
func Load(path string) (*Config, []string, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, nil, fmt.Errorf("config: %w", err)
	}
	return parse(data, path)
}

// LoadWithEnv is what the CLI calls: the file at path (or the defaults when
// path is ""), then the REGISTRY_* overrides from environ (os.Environ() in
// the CLI), then validation. Warnings from the file come first.
func LoadWithEnv(path string, environ []string) (*Config, []string, error) {
	c := base()
	var warnings []string
	if path != "" {
		data, err := os.ReadFile(path)
		if err != nil {
			return nil, nil, fmt.Errorf("config: %w", err)
		}
		d := decoder{file: path}
		if err := d.document(data, c); err != nil {
			return nil, d.warnings, fmt.Errorf("config: %w", err)
		}
		warnings = d.warnings
	}
	c.finish()
	w, err := ApplyEnv(c, environ)
	warnings = append(warnings, w...)
	if err != nil {
		return nil, warnings, err
	}
	return c, warnings, nil
}

func parse(data []byte, file string) (*Config, []string, error) {
	c := base()
	d := decoder{file: file}
	if err := d.document(data, c); err != nil {
		return nil, d.warnings, fmt.Errorf("config: %w", err)
	}
	c.finish()
	if err := c.Validate(); err != nil {
		return nil, d.warnings, err
	}
	return c, d.warnings, nil
}

// Validation configures manifest validation (distribution's keys plus
// cairn's sparse switch).
type Validation struct {
	Manifests ManifestValidation `yaml:"manifests"`

	_ notYet `yaml:"disabled"`
	_ notYet `yaml:"enabled"`
}

// ManifestValidation says which descriptors of a pushed manifest must exist.
type ManifestValidation struct {
	// Indexes sets which children of an index must exist (distribution's
	// validation.manifests.indexes).
	Indexes IndexValidation `yaml:"indexes"`
	// Sparse (cairn) accepts image manifests whose config or layers, and
	// indexes whose children, were never pushed: mirrors that copy only some
	// platforms or layers. Off by default: a push naming a missing blob fails
	// with MANIFEST_BLOB_UNKNOWN.
	Sparse bool `yaml:"sparse"`

	_ notYet `yaml:"urls"`
}

// IndexValidation selects the index children that must exist.
type IndexValidation struct {
	// Platforms is all (default: every child), none, or list (only children
	// whose platform is in PlatformList). Case is ignored.
	Platforms    string     `yaml:"platforms"`
	PlatformList []Platform `yaml:"platformlist"`
}

// Platform names an OS and architecture.
type Platform struct {
	Architecture string `yaml:"architecture"`
	OS           string `yaml:"os"`
}
