package main

import (
	"context"
	"crypto/tls"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"os"
	"regexp"
	"sync/atomic"

	ocispec "github.com/opencontainers/image-spec/specs-go/v1"

	"github.com/cairn-registry/cairn/internal/auth"
	"github.com/cairn-registry/cairn/internal/config"
	"github.com/cairn-registry/cairn/internal/dedup"
	"github.com/cairn-registry/cairn/internal/health"
	"github.com/cairn-registry/cairn/internal/meta"
	"github.com/cairn-registry/cairn/internal/metrics"
	"github.com/cairn-registry/cairn/internal/notify"
	"github.com/cairn-registry/cairn/internal/proxy"
	"github.com/cairn-registry/cairn/internal/registry"
	"github.com/cairn-registry/cairn/internal/retention"
	"github.com/cairn-registry/cairn/internal/server"
	"github.com/cairn-registry/cairn/internal/storage/driver"
	"github.com/cairn-registry/cairn/internal/storage/driver/azure"
	"github.com/cairn-registry/cairn/internal/storage/driver/filesystem"
	"github.com/cairn-registry/cairn/internal/storage/driver/gcs"
	"github.com/cairn-registry/cairn/internal/storage/driver/inmemory"
	"github.com/cairn-registry/cairn/internal/storage/driver/s3"
	"github.com/cairn-registry/cairn/internal/tracing"
	"github.com/cairn-registry/cairn/internal/webui"
)

const serveUsage = `usage: cairn serve [--config FILE] [--addr ADDRESS] [--root DIR] [--check]

Runs the registry: the OCI distribution API on http.addr (default
127.0.0.1:5000), storage under ./cairn-data when no storage driver is
configured. With no file it needs no configuration at all. The file holds
distribution's config.yml keys, overridden by REGISTRY_* environment
variables (REGISTRY_HTTP_ADDR, REGISTRY_STORAGE_FILESYSTEM_ROOTDIRECTORY,
...), then by the flags. An unknown or refused key, or an invalid value,
stops start-up with one line naming the key and FILE:LINE; --check stops
there on success too, printing the effective configuration (cairn config
check).

Keys it reads (README, Configuration): every section.
  http.*           addr, net, prefix, host, relativeurls, headers, tls.*,
                   debug.addr (/metrics, /healthz, /readyz, pprof), h2c, draintimeout
  storage.*        the driver (filesystem.rootdirectory, s3, gcs, azure, inmemory),
                   delete, maintenance (uploadpurging, readonly), cache, redirect,
                   gc (scheduled GC), dedup, tag
  auth.*           htpasswd, token, silly, anonymous, accesscontrol, tokenservice,
                   robots, failedlogins, audit, oidc
  log.*, redis.*, health.*, notifications.*, proxy.*, replication.*, retention.*, ui.*,
  middleware.storage, validation.*, policy.*, catalog.*, tags.*
SIGHUP, or a change of the file, the htpasswd file or the TLS certificate,
reloads authentication and the certificate; other changes need a restart.`

// runServe is `cairn serve`: each section below builds one part from the
// configuration and what earlier sections built, and registers on stack
// what to undo at exit (reverse order: what started later stops sooner).
func runServe(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	flags, done, err := parseServeFlags(args, stdout, stderr)
	if done || err != nil {
		return err
	}
	s, err := newServing(ctx, flags, stderr)
	if err != nil {
		return err
	}
	var stack cleanups
	defer stack.run()
	if err := s.startTracing(ctx, &stack); err != nil {
		return err
	}
	bg, stopBG := context.WithCancel(context.WithoutCancel(ctx))
	stack.add(stopBG)
	layerEvents, err := s.startEvents(ctx, &stack)
	if err != nil {
		return err
	}
	if err := s.startDedup(bg, layerEvents, &stack); err != nil {
		return err
	}
	if err := s.openRegistry(ctx, &stack); err != nil {
		return err
	}
	srvOpts, err := s.serverOptions(ctx, &stack)
	if err != nil {
		return err
	}
	ln, err := net.Listen(s.cfg.HTTP.Net, s.cfg.HTTP.Addr)
	if err != nil {
		return fmt.Errorf("listen: %w", err)
	}
	httpSrv := s.httpServer(s.handler(srvOpts))
	serveErr := make(chan error, 2)
	debugSrv, err := s.startDebug(serveErr)
	if err != nil {
		ln.Close()
		return err
	}
	s.logServing(ln)
	s.startBackground(bg, stopBG, &stack)
	return s.serve(ctx, ln, httpSrv, debugSrv, serveErr, stopBG)
}

// serveFlags is what cairn serve's command line says.
type serveFlags struct {
	configPath, root string
	overrides        func(*config.Config)
}

// load reads and checks the configuration the flags name, overrides
// applied; a reload calls it again.
func (f serveFlags) load() (*config.Config, []string, error) {
	return loadConfig(f.configPath, f.root, f.overrides)
}

// parseServeFlags parses cairn serve's command line; done when nothing is
// left to run (-h, or --check, which it runs).
func parseServeFlags(args []string, stdout, stderr io.Writer) (f serveFlags, done bool, err error) {
	fs := flag.NewFlagSet("cairn serve", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	configPath := fs.String("config", "", "configuration `file` (distribution's config.yml keys)")
	addr := fs.String("addr", "", "listen `address` (overrides http.addr)")
	root := fs.String("root", "", "filesystem storage root `directory` (overrides the storage section)")
	check := fs.Bool("check", false, "load and check the configuration, print it with secrets masked, and exit (cairn config check)")
	if done, err := parseFlags(fs, args, "serve", serveUsage, stdout); done || err != nil {
		return f, true, err
	}
	f = serveFlags{configPath: *configPath, root: *root, overrides: func(c *config.Config) {
		if *addr != "" {
			c.HTTP.Addr = *addr
		}
	}}
	if *check {
		return f, true, checkConfig(f.configPath, f.root, f.overrides, stdout, stderr)
	}
	return f, false, nil
}

// serving is what cairn serve builds, section by section (runServe's
// order); the sections read what earlier ones built.
type serving struct {
	cfg        *config.Config
	log        *slog.Logger
	configPath string // watched by the reloader

	// storage and access
	d, id     driver.Driver // id: d instrumented (metrics, spans)
	authz     auth.Authorizer
	oidcWeb   *auth.OIDCWeb // nil: no web login through OIDC (oidc.go)
	tlsConfig *tls.Config
	rl        *reloader

	tr       *tracing.Tracing
	m        *metrics.Metrics
	notifier *notify.Notifier // nil: no endpoints
	history  *webui.History
	figures  *webui.Figures // nil: no web page

	engine *dedup.Engine
	store  meta.Store // nil: dedup never ran on this storage

	redirector   registry.Redirector // nil: blob redirects off
	redirectDesc string
	descriptors  registry.DescriptorCache
	reg          *registry.Registry
	mirror       *proxy.Cache // nil: no pull-through cache
	checker      *health.Checker
	ret          *retention.Retention // nil: no retention policies
	pulls        *retention.Pulls     // with ret
	ui           http.Handler         // nil: no web page

	// stopping turns readiness off once shutdown starts.
	stopping atomic.Bool
}

// newServing loads the configuration and builds the logger, the storage
// driver and access (authorizer, TLS, reloader).
func newServing(ctx context.Context, flags serveFlags, stderr io.Writer) (*serving, error) {
	cfg, warnings, err := flags.load()
	if err != nil {
		return nil, err
	}
	s := &serving{cfg: cfg, log: newLogger(stderr, cfg.Log), configPath: flags.configPath}
	for _, w := range warnings {
		s.log.Warn("config: " + w)
	}
	if s.d, err = newDriver(ctx, cfg); err != nil {
		return nil, err
	}
	if err := s.wireAccess(flags); err != nil {
		return nil, err
	}
	return s, nil
}

// wireAccess builds the authorizer and the TLS configuration, and the
// reloader that may replace both while serving (reload.go).
func (s *serving) wireAccess(flags serveFlags) error {
	authz, err := newAuthorizer(s.cfg.Auth)
	if err != nil {
		return err
	}
	tlsConfig, err := newTLSConfig(s.cfg.HTTP.TLS)
	if err != nil {
		return err
	}
	rl := &reloader{log: s.log, cfg: s.cfg, load: func() (*config.Config, error) {
		c, _, err := flags.load()
		return c, err
	}}
	if authz != nil {
		rl.authz = auth.NewSwappable(authz)
		authz = rl.authz
	}
	if tlsConfig != nil && len(tlsConfig.Certificates) == 1 {
		rl.cert = new(atomic.Pointer[tls.Certificate])
		rl.cert.Store(&tlsConfig.Certificates[0])
		tlsConfig.Certificates = nil
		tlsConfig.GetCertificate = func(*tls.ClientHelloInfo) (*tls.Certificate, error) { return rl.cert.Load(), nil }
	}
	s.authz, s.tlsConfig, s.rl = authz, tlsConfig, rl
	s.oidcWeb, err = newOIDCWeb(s.cfg, authz)
	return err
}

// startTracing sets up tracing (OTEL_* environment; spans flushed at exit)
// and the metrics, and instruments the driver with both.
func (s *serving) startTracing(ctx context.Context, stack *cleanups) error {
	tr, err := tracing.Setup(ctx, versionString(), os.Getenv)
	if err != nil {
		return err
	}
	stack.add(func() {
		if err := tr.Shutdown(context.WithoutCancel(ctx)); err != nil {
			s.log.Warn("tracing: flushing spans", "err", err)
		}
	})
	s.tr, s.m = tr, metrics.New()
	s.id = metrics.InstrumentDriver(s.d, s.m, tr.Tracer("storage"))
	return nil
}

// startEvents starts delivering notifications (when endpoints are
// configured) and builds the web page's storage figures; it returns who
// hears of deduplicated layers.
func (s *serving) startEvents(ctx context.Context, stack *cleanups) (dedup.LayerEvents, error) {
	notifier, err := newNotifier(s.cfg, s.m, s.log)
	if err != nil {
		return nil, err
	}
	var layerEvents dedup.LayerEvents
	if notifier != nil {
		// Stopped last (registered first): requests, GC and dedup still
		// emit events while they finish, and Run writes them to the
		// queue before it returns.
		stack.add(func() { notifier.Close() })
		notifyCtx, stopNotify := context.WithCancel(context.WithoutCancel(ctx))
		stack.spawn(stopNotify, func() { notifier.Run(notifyCtx) })
		layerEvents = dedupEvents{notifier}
		s.notifier = notifier
	}
	// The web page's storage figures are measured again when dedup
	// replaces a layer and when a GC run ends (History.AddGCRun); its
	// history is kept in storage.
	s.history = &webui.History{}
	if s.cfg.UI.Enabled {
		s.figures = webui.NewFigures(webui.FiguresOptions{History: s.history, Store: s.id, ReadOnly: s.cfg.Storage.Maintenance.ReadOnly.Enabled, Log: s.log})
		layerEvents = layerEventsTee{s.figures, layerEvents}
	}
	return layerEvents, nil
}

// startDedup opens the dedup engine and its metadata store (openDedup);
// both are closed at exit.
func (s *serving) startDedup(bg context.Context, events dedup.LayerEvents, stack *cleanups) error {
	engine, store, err := openDedup(bg, s.cfg, s.id, s.log, s.m, s.tr.Tracer("dedup"), events)
	if err != nil {
		return err
	}
	stack.add(func() {
		engine.Close()
		if store != nil {
			store.Close()
		}
	})
	s.engine, s.store = engine, store
	return nil
}

// openRegistry builds the registry over the instrumented driver: blob
// redirects, the blob descriptor cache, dedup's restores and observer.
func (s *serving) openRegistry(ctx context.Context, stack *cleanups) error {
	redirector, redirectDesc, rw, err := newRedirector(ctx, s.cfg, s.d)
	if err != nil {
		return err
	}
	for _, w := range rw {
		s.log.Warn("config: " + w)
	}
	s.redirector, s.redirectDesc = redirector, redirectDesc
	regOpts := registryOptions(s.cfg)
	regOpts.Redirector = redirector
	regOpts.Dedup = s.engine.Source
	descriptors, closeDescriptors, err := newDescriptorCache(ctx, s.cfg, s.m.CacheLookup)
	if err != nil {
		return err
	}
	stack.add(closeDescriptors)
	regOpts.Descriptors, s.descriptors = descriptors, descriptors
	links, closeLinks, err := newLinkVersions(s.cfg)
	if err != nil {
		return err
	}
	stack.add(closeLinks)
	regOpts.LinkVersions, regOpts.Log = links, s.log
	if s.store != nil {
		regOpts.Observer = s.engine
	}
	if s.cfg.Proxy.Enabled() {
		regOpts.Mirrored = func(repo string) bool { return s.mirror.Mirrors(repo) }
	}
	s.reg = registry.New(s.id, regOpts)
	s.recoverBlobs(ctx, stack)
	return nil
}

// recoverBlobs runs before serving: a blob a crash tore must not be served
// (see registry's seal.go); at exit, what is not durable yet becomes so.
func (s *serving) recoverBlobs(ctx context.Context, stack *cleanups) {
	if rec, err := s.reg.Recover(ctx); err != nil {
		s.log.Error("recovering blobs stored without a sync", "err", err)
	} else if rec != (registry.Recovered{}) {
		s.log.Warn("recovered blobs stored without a sync before a restart",
			"sealed", rec.Sealed, "verified", rec.Verified, "lost", rec.Lost)
	}
	stack.add(func() {
		if err := s.reg.SealAll(context.WithoutCancel(ctx)); err != nil {
			s.log.Error("syncing blobs at exit", "err", err)
		}
	})
}

// serverOptions builds the API server's options, with the health checks,
// the pull-through cache, retention's pull records and the events.
func (s *serving) serverOptions(ctx context.Context, stack *cleanups) (server.Options, error) {
	cfg := s.cfg
	s.checker = health.New(healthChecks(cfg.Health, s.d))
	opts := server.Options{
		ReadOnly:          cfg.Storage.Maintenance.ReadOnly.Enabled,
		Logger:            s.log,
		Auth:              s.authz,
		Metrics:           s.m,
		BodyIdleTimeout:   bodyIdleTimeout,
		Headers:           http.Header(cfg.HTTP.Headers),
		Prefix:            cfg.HTTP.Prefix,
		AbsoluteURLs:      cfg.HTTP.RelativeURLs != nil && !*cfg.HTTP.RelativeURLs,
		NoAccessLog:       cfg.Log.AccessLog.Disabled,
		MaxCatalogEntries: cfg.Catalog.MaxEntries,
		MaxTags:           cfg.Tags.MaxTags,
		Healthy:           s.checker.Err,
	}
	if cfg.Proxy.Enabled() {
		mirror, err := newMirror(cfg.Proxy, s.reg, s.log)
		if err != nil {
			return opts, err
		}
		s.mirror, opts.Mirror = mirror, mirror
	}
	if err := s.startRetention(ctx, &opts, stack); err != nil {
		return opts, err
	}
	if cfg.HTTP.Host != "" {
		// Validated: an http or https URL with a host.
		opts.Host, _ = url.Parse(cfg.HTTP.Host)
	}
	if s.notifier != nil {
		opts.Events = s.notifier
		opts.EventReferences = cfg.Notifications.Events.IncludeReferences
	}
	if err := s.startReplication(ctx, &opts, stack); err != nil { // replicate.go
		return opts, err
	}
	return opts, nil
}

// startRetention builds the retention policies (run before each scheduled
// GC) and, with any, the pull records they read, flushed at exit.
func (s *serving) startRetention(ctx context.Context, opts *server.Options, stack *cleanups) error {
	ret, err := newRetention(s.cfg, s.reg, false)
	if err != nil || ret == nil {
		return err
	}
	s.ret, s.pulls = ret, retention.NewPulls(s.id)
	opts.Pulls = s.pulls
	stack.add(func() {
		// What was pulled since the last flush.
		if err := s.pulls.Flush(context.WithoutCancel(ctx)); err != nil {
			s.log.Warn("retention: recording pulls", "err", err)
		}
	})
	return nil
}

// loadConfig reads the configuration (file, then REGISTRY_* variables),
// applies the command line's overrides (root, then edit) and validates the
// result. A non-empty root selects the filesystem driver whatever the
// configuration named.
func loadConfig(path, root string, edit func(*config.Config)) (*config.Config, []string, error) {
	cfg, warnings, err := config.LoadWithEnv(path, os.Environ())
	if err != nil {
		return nil, warnings, err
	}
	if root != "" {
		if cfg.Storage.Filesystem == nil {
			cfg.Storage.InMemory, cfg.Storage.S3, cfg.Storage.GCS, cfg.Storage.Azure = nil, nil, nil, nil
			cfg.Storage.Filesystem = config.Default().Storage.Filesystem
		}
		cfg.Storage.Filesystem.RootDirectory = root
	}
	if edit != nil {
		edit(cfg)
	}
	authDefaults(cfg) // identity files beside the registry's (auth.go)
	oidcDefaults(cfg) // auth.oidc's, and its session key beside them (oidc.go)
	if err := cfg.Validate(); err != nil {
		return nil, warnings, err
	}
	return cfg, warnings, nil
}

func newDriver(ctx context.Context, cfg *config.Config) (driver.Driver, error) {
	var d driver.Driver
	var err error
	switch {
	case cfg.Storage.S3 != nil:
		d, err = s3.New(ctx, *cfg.Storage.S3)
	case cfg.Storage.GCS != nil:
		d, err = gcs.New(ctx, *cfg.Storage.GCS)
	case cfg.Storage.Azure != nil:
		d, err = azure.New(ctx, *cfg.Storage.Azure)
	case cfg.Storage.InMemory != nil:
		return inmemory.New(), nil
	case cfg.Storage.Filesystem != nil:
		d, err = filesystem.New(cfg.Storage.Filesystem.RootDirectory)
	default:
		return nil, errors.New("storage: no driver configured")
	}
	if err != nil {
		return nil, fmt.Errorf("storage: %w", err)
	}
	return d, nil
}

func registryOptions(cfg *config.Config) registry.Options {
	v := cfg.Validation.Manifests
	mc := cfg.Storage.Cache.Manifests
	size, _ := config.ParseBytes(mc.Size) // validated on load
	opts := registry.Options{
		DeleteEnabled:     cfg.Storage.Delete.Enabled,
		SparseManifests:   v.Sparse,
		IndexPlatforms:    v.Indexes.Platforms,
		TagLookups:        cfg.Storage.Tag.ConcurrencyLimit,
		ManifestClasses:   cfg.Policy.Repository.Classes,
		ManifestCacheSize: size,
		TagTTL:            mc.TagTTL,
	}
	if fs := cfg.Storage.Filesystem; fs != nil {
		opts.SyncBlobs = fs.SyncBlobs
	}
	if cfg.Validation.URLChecks() {
		// distribution joins each list into one alternation; the
		// expressions were compiled once by validation already.
		rules := &registry.URLRules{}
		if a := v.URLs.Allow; len(a) > 0 {
			rules.Allow = regexp.MustCompile(alternation(a))
		}
		if d := v.URLs.Deny; len(d) > 0 {
			rules.Deny = regexp.MustCompile(alternation(d))
		}
		opts.LayerURLs = rules
	}
	for _, p := range v.Indexes.PlatformList {
		opts.PlatformList = append(opts.PlatformList, ocispec.Platform{OS: p.OS, Architecture: p.Architecture})
	}
	return opts
}

func rootOf(cfg *config.Config) string {
	if cfg.Storage.Filesystem != nil {
		return cfg.Storage.Filesystem.RootDirectory
	}
	return ""
}

// newMirror builds the pull-through cache the proxy section configures.
func newMirror(c config.Proxy, reg *registry.Registry, log *slog.Logger) (*proxy.Cache, error) {
	var ups []proxy.Upstream
	for _, u := range c.All() {
		up := proxy.Upstream{Prefix: u.Prefix, URL: u.RemoteURL, Username: u.Username, Password: u.Password, Revalidate: u.Revalidate, TTL: *u.TTL}
		if e := u.Exec; e != nil {
			// distribution's lifetime: unset keeps the answer, 0 asks every time.
			up.CredentialHelper, up.HelperLifetime = e.Command, -1
			if e.Lifetime == nil {
				up.HelperLifetime = 0
			} else if *e.Lifetime > 0 {
				up.HelperLifetime = *e.Lifetime
			}
		}
		ups = append(ups, up)
		log.Info("pull-through cache", "prefix", u.Prefix, "upstream", u.RemoteURL, "revalidate", u.Revalidate, "ttl", *u.TTL)
	}
	cache, err := proxy.New(reg, proxy.Options{Upstreams: ups, Log: log})
	if err != nil {
		return nil, fmt.Errorf("config: proxy: %w", err)
	}
	return cache, nil
}
