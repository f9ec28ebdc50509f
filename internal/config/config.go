// Package config loads cairn's YAML configuration. The keys are those of
// distribution/distribution's config.yml, so a distribution configuration
// works unchanged: keys cairn implements are honoured with distribution's
// meaning; keys it does not are refused with a one-line reason where
// running without them would weaken the registry or serve the wrong data
// (refused), else reported as not supported yet (notYet) or obsolete; and
// any other key stops loading with its full path, file:line and the nearest
// valid key (see decoder.unknown for the two kinds only warned of).
// testdata/distribution holds distribution's reference configurations,
// which the tests load: every key in them is honoured.
//
// Environment variables override the file as in distribution:
// REGISTRY_STORAGE_FILESYSTEM_ROOTDIRECTORY=/x sets storage.filesystem.rootdirectory.
// Load and Parse never read the environment; the CLI calls
// LoadWithEnv(path, os.Environ()).
package config

import (
	"fmt"
	"net/netip"
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
	// Retention deletes tags and untagged manifests by rules (cairn).
	Retention Retention `yaml:"retention"`
	// Replication copies images to and from other registries (cairn).
	Replication Replication `yaml:"replication"`
	// UI is the built-in web page (cairn).
	UI UI `yaml:"ui"`

	// Middleware holds distribution's storage middlewares that decide where
	// blob GETs are redirected (redirect, cloudfront).
	Middleware Middleware `yaml:"middleware"`

	// Redis is the one Redis connection every Redis user in cairn shares
	// (see redis.go).
	Redis *Redis `yaml:"redis"`
	// Health adds periodic checks whose failure makes the registry
	// unhealthy (see health.go).
	Health Health `yaml:"health"`
	// Catalog and Tags bound the pages of the listing endpoints.
	Catalog Catalog `yaml:"catalog"`
	Tags    Tags    `yaml:"tags"`
	// Notifications sends distribution's events to listeners.
	Notifications Notifications `yaml:"notifications"`
	// Policy restricts what may be pushed.
	Policy Policy   `yaml:"policy"`
	_      obsolete `yaml:"reporting"`
	_      obsolete `yaml:"compatibility"`
}

// Log configures logging.
type Log struct {
	// Level is debug, info, warn or error (default info). Case is ignored and
	// "warning" means warn; loading stores the canonical lower-case name.
	// distribution's deprecated top-level "loglevel" key is read as log.level.
	Level string `yaml:"level"`
	// Formatter is text (default), json or logstash (JSON with logstash's
	// @timestamp, @version and message keys).
	Formatter string `yaml:"formatter"`
	// Fields are added to every log line.
	Fields map[string]any `yaml:"fields"`
	// AccessLog.Disabled drops the one line per request.
	AccessLog AccessLog `yaml:"accesslog"`
	// ReportCaller adds the source file and line to every line.
	ReportCaller bool `yaml:"reportcaller"`
	// Hooks mail log records of chosen levels (type mail, as in
	// distribution).
	Hooks []LogHook `yaml:"hooks"`
}

// LogHook is one log hook; mail is the only type.
type LogHook struct {
	Type     string `yaml:"type"`
	Disabled bool   `yaml:"disabled"`
	// Levels are logrus's names: panic, fatal, error, warn (warning),
	// info, debug, trace. cairn logs no panic or fatal records: they are
	// read as error, its most severe level.
	Levels  []string       `yaml:"levels"`
	Options LogHookOptions `yaml:"options"`
}

// LogHookOptions say where mail goes.
type LogHookOptions struct {
	SMTP SMTPOptions `yaml:"smtp"`
	From string      `yaml:"from"`
	To   []string    `yaml:"to"`
}

// SMTPOptions locate the mail server.
type SMTPOptions struct {
	Addr     string `yaml:"addr"`
	Username string `yaml:"username"`
	Password string `yaml:"password"`
	Insecure bool   `yaml:"insecure"`
}

// HookLevel maps a hook's level name to cairn's level name.
func HookLevel(name string) (string, bool) {
	switch strings.ToLower(name) {
	case "panic", "fatal", "error":
		return "error", true
	case "warn", "warning":
		return "warn", true
	case "info":
		return "info", true
	case "debug", "trace":
		return "debug", true
	}
	return "", false
}

// AccessLog configures the request log.
type AccessLog struct {
	Disabled bool `yaml:"disabled"`
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
	// H2C serves HTTP/2 without TLS (behind load balancers that speak it).
	H2C H2C `yaml:"h2c"`
	// Net is tcp (default) or unix; with unix, Addr is the socket's path.
	Net string `yaml:"net"`
	// Prefix is the path the API is served under ("/my/registry/": the
	// API is then /my/registry/v2/).
	Prefix string `yaml:"prefix"`
	// Host is the externally reachable URL (https://registry.example:5000)
	// that Location headers are built on, whatever the request said.
	Host string `yaml:"host"`
	// Secret is accepted for distribution's configurations: distribution
	// signs upload state it hands to clients with it; cairn keeps that
	// state in storage and hands none out, so nothing is signed.
	Secret string `yaml:"secret"`
	// RelativeURLs: true or unset (cairn's default) makes Location headers
	// paths, which every client resolves and which survive proxies that
	// terminate TLS without saying so; false, as distribution's default,
	// makes them absolute URLs built from the request (Host overrides
	// both).
	RelativeURLs *bool `yaml:"relativeurls"`
	// DrainTimeout bounds how long in-flight requests may finish after
	// SIGTERM (default 60s; distribution's default, 0, is taken as 60s).
	DrainTimeout time.Duration `yaml:"draintimeout"`
	// Headers are added to every response of the API listener.
	Headers map[string][]string `yaml:"headers"`
	// TrustedProxies (cairn) are the addresses (IPs or CIDR prefixes) of
	// the load balancers and proxies in front of cairn: a request from one
	// is taken to come from the client its X-Forwarded-For names, for the
	// failed-login limit, the logs, the audit trail and events.
	TrustedProxies []string `yaml:"trustedproxies"`
}

// TrustedProxyPrefixes parses TrustedProxies; an IP is a prefix of its
// own full length.
func (h *HTTP) TrustedProxyPrefixes() ([]netip.Prefix, error) {
	var out []netip.Prefix
	for _, s := range h.TrustedProxies {
		if a, err := netip.ParseAddr(s); err == nil {
			a = a.Unmap()
			out = append(out, netip.PrefixFrom(a, a.BitLen()))
			continue
		}
		p, err := netip.ParsePrefix(s)
		if err != nil {
			return nil, fmt.Errorf("config: http.trustedproxies: %q is not an IP address or a CIDR prefix such as 10.0.0.0/8", s)
		}
		out = append(out, p.Masked())
	}
	return out, nil
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

	// Cache keeps blob descriptors, manifests and links (see cache.go).
	Cache Cache `yaml:"cache"`
	// Tag tunes tag lookups.
	Tag Tag `yaml:"tag"`

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
	// SyncBlobs makes every blob durable before its upload's 201, as
	// distribution does; by default a blob is synced in the background and
	// at the latest before a manifest naming it is accepted (cairn's).
	SyncBlobs bool `yaml:"syncblobs"`
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
	defaultDrainTimeout       = 60 * time.Second
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
		Log: Log{Level: "info", Formatter: "text"},
		HTTP: HTTP{
			Addr:         "127.0.0.1:5000",
			Net:          "tcp",
			DrainTimeout: defaultDrainTimeout,
			Debug:        Debug{Prometheus: Prometheus{Enabled: true, Path: defaultMetricsPath}},
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
	c.Log.Formatter = strings.ToLower(c.Log.Formatter)
	if c.HTTP.DrainTimeout == 0 {
		c.HTTP.DrainTimeout = defaultDrainTimeout
	}
	switch p := c.HTTP.Prefix; {
	case p == "/":
		c.HTTP.Prefix = ""
	case p != "" && !strings.HasSuffix(p, "/"):
		c.HTTP.Prefix = p + "/"
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

// Policy is distribution's policy section.
type Policy struct {
	Repository RepositoryPolicy `yaml:"repository"`
}

// RepositoryPolicy lists the classes of image manifests a push may store:
// "image" (image configs) and "plugin" (Docker plugin configs); empty
// allows every manifest.
type RepositoryPolicy struct {
	Classes []string `yaml:"classes"`
}

// URLChecks reports whether the urls of pushed manifests' layers are
// checked against validation.manifests.urls: when allow or deny is given
// and validation is not disabled. (distribution also checks with neither
// given, refusing every URL; cairn accepts http and https URLs then.)
func (v *Validation) URLChecks() bool {
	on := !v.Disabled
	if v.Enabled != nil {
		on = *v.Enabled
	}
	return on && (len(v.Manifests.URLs.Allow) > 0 || len(v.Manifests.URLs.Deny) > 0)
}

// Validation configures manifest validation (distribution's keys plus
// cairn's sparse switch).
type Validation struct {
	Manifests ManifestValidation `yaml:"manifests"`
	// Disabled turns off the URL checks of pushed manifests (urls.allow
	// and urls.deny), as in distribution: any URL is then accepted.
	Disabled bool `yaml:"disabled"`
	// Enabled is distribution's deprecated inverse of Disabled; when given
	// it wins.
	Enabled *bool `yaml:"enabled"`
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
	// URLs restricts the URLs that layers of pushed manifests may name.
	URLs URLValidation `yaml:"urls"`
}

// URLValidation holds regular expressions (RE2) for the "urls" of pushed
// manifests' descriptors. With validation on and Allow empty, no URL is
// accepted; otherwise a URL must match one Allow and no Deny expression.
type URLValidation struct {
	Allow []string `yaml:"allow"`
	Deny  []string `yaml:"deny"`
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
