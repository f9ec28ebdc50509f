package main

import (
	"context"
	"crypto/tls"
	"crypto/x509"
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
	"time"

	ocispec "github.com/opencontainers/image-spec/specs-go/v1"
	"go.opentelemetry.io/contrib/instrumentation/net/http/otelhttp"
	"golang.org/x/crypto/acme"
	"golang.org/x/crypto/acme/autocert"

	"github.com/cairn-registry/cairn/internal/auth"
	"github.com/cairn-registry/cairn/internal/config"
	"github.com/cairn-registry/cairn/internal/dedup"
	"github.com/cairn-registry/cairn/internal/health"
	"github.com/cairn-registry/cairn/internal/meta/bolt"
	"github.com/cairn-registry/cairn/internal/metrics"
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
	"github.com/cairn-registry/cairn/internal/task"
	"github.com/cairn-registry/cairn/internal/tracing"
	"github.com/cairn-registry/cairn/internal/webui"
)

// Connection timeouts. Whole-request read and write timeouts would cut off
// multi-gigabyte layer transfers, so slow clients are bounded instead by
// the time to send headers (which also bounds the TLS handshake), by how
// long a request body may stall, and by how long an idle connection stays.
const (
	readHeaderTimeout = 30 * time.Second
	bodyIdleTimeout   = 2 * time.Minute
	idleTimeout       = 2 * time.Minute
	readyTimeout      = 5 * time.Second
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
  auth.*           htpasswd, token, silly, anonymous, accesscontrol
  log.*, redis.*, health.*, notifications.*, proxy.*, retention.*, ui.*,
  middleware.storage, validation.*, policy.*, catalog.*, tags.*
SIGHUP, or a change of the file, the htpasswd file or the TLS certificate,
reloads authentication and the certificate; other changes need a restart.`

func runServe(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("cairn serve", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	configPath := fs.String("config", "", "configuration `file` (distribution's config.yml keys)")
	addr := fs.String("addr", "", "listen `address` (overrides http.addr)")
	root := fs.String("root", "", "filesystem storage root `directory` (overrides the storage section)")
	check := fs.Bool("check", false, "load and check the configuration, print it with secrets masked, and exit (cairn config check)")
	if done, err := parseFlags(fs, args, "serve", serveUsage, stdout); done || err != nil {
		return err
	}
	overrides := func(c *config.Config) {
		if *addr != "" {
			c.HTTP.Addr = *addr
		}
	}
	if *check {
		return checkConfig(*configPath, *root, overrides, stdout, stderr)
	}
	cfg, warnings, err := loadConfig(*configPath, *root, overrides)
	if err != nil {
		return err
	}
	log := newLogger(stderr, cfg.Log)
	for _, w := range warnings {
		log.Warn("config: " + w)
	}

	d, err := newDriver(ctx, cfg)
	if err != nil {
		return err
	}
	authz, err := newAuthorizer(cfg.Auth)
	if err != nil {
		return err
	}
	tlsConfig, err := newTLSConfig(cfg.HTTP.TLS)
	if err != nil {
		return err
	}
	// What a reload may replace while serving (reload.go).
	rl := &reloader{log: log, cfg: cfg, load: func() (*config.Config, error) {
		c, _, err := loadConfig(*configPath, *root, overrides)
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
	tr, err := tracing.Setup(ctx, versionString(), os.Getenv)
	if err != nil {
		return err
	}
	defer func() {
		if err := tr.Shutdown(context.WithoutCancel(ctx)); err != nil {
			log.Warn("tracing: flushing spans", "err", err)
		}
	}()
	m := metrics.New()
	id := metrics.InstrumentDriver(d, m, tr.Tracer("storage"))
	bg, stopBG := context.WithCancel(context.WithoutCancel(ctx))
	defer stopBG()
	notifier, err := newNotifier(cfg, m, log)
	if err != nil {
		return err
	}
	var layerEvents dedup.LayerEvents
	if notifier != nil {
		// Stopped last (deferred first): requests, GC and dedup still
		// emit events while they finish, and Run writes them to the
		// queue before it returns.
		defer notifier.Close()
		notifyCtx, stopNotify := context.WithCancel(context.WithoutCancel(ctx))
		notifyDone := make(chan struct{})
		go func() { notifier.Run(notifyCtx); close(notifyDone) }()
		defer func() { stopNotify(); <-notifyDone }()
		layerEvents = dedupEvents{notifier}
	}
	// The web page's storage figures are measured again when dedup
	// replaces a layer and when a GC run ends (History.AddGCRun); its
	// history is kept in storage.
	history := &webui.History{}
	var figures *webui.Figures
	if cfg.UI.Enabled {
		figures = webui.NewFigures(webui.FiguresOptions{History: history, Store: id, ReadOnly: cfg.Storage.Maintenance.ReadOnly.Enabled, Log: log})
		layerEvents = layerEventsTee{figures, layerEvents}
	}
	engine, store, err := openDedup(bg, cfg, id, log, m, tr.Tracer("dedup"), layerEvents)
	if err != nil {
		return err
	}
	defer func() {
		engine.Close()
		if store != nil {
			store.Close()
		}
	}()
	redirector, redirectDesc, rw, err := newRedirector(ctx, cfg, d)
	if err != nil {
		return err
	}
	for _, w := range rw {
		log.Warn("config: " + w)
	}
	regOpts := registryOptions(cfg)
	regOpts.Redirector = redirector
	regOpts.Dedup = engine.Source
	descriptors, closeDescriptors, err := newDescriptorCache(ctx, cfg, m.CacheLookup)
	if err != nil {
		return err
	}
	defer closeDescriptors()
	regOpts.Descriptors = descriptors
	if store != nil {
		regOpts.Observer = engine
	}
	var mirror *proxy.Cache
	if cfg.Proxy.Enabled() {
		regOpts.Mirrored = func(repo string) bool { return mirror.Mirrors(repo) }
	}
	reg := registry.New(id, regOpts)
	// Before serving: a blob a crash tore must not be served (see
	// registry's seal.go); at exit, what is not durable yet becomes so.
	if rec, err := reg.Recover(ctx); err != nil {
		log.Error("recovering blobs stored without a sync", "err", err)
	} else if rec != (registry.Recovered{}) {
		log.Warn("recovered blobs stored without a sync before a restart",
			"sealed", rec.Sealed, "verified", rec.Verified, "lost", rec.Lost)
	}
	defer func() {
		if err := reg.SealAll(context.WithoutCancel(ctx)); err != nil {
			log.Error("syncing blobs at exit", "err", err)
		}
	}()
	checker := health.New(healthChecks(cfg.Health, d))
	srvOpts := server.Options{
		ReadOnly:          cfg.Storage.Maintenance.ReadOnly.Enabled,
		Logger:            log,
		Auth:              authz,
		Metrics:           m,
		BodyIdleTimeout:   bodyIdleTimeout,
		Headers:           http.Header(cfg.HTTP.Headers),
		Prefix:            cfg.HTTP.Prefix,
		AbsoluteURLs:      cfg.HTTP.RelativeURLs != nil && !*cfg.HTTP.RelativeURLs,
		NoAccessLog:       cfg.Log.AccessLog.Disabled,
		MaxCatalogEntries: cfg.Catalog.MaxEntries,
		MaxTags:           cfg.Tags.MaxTags,
		Healthy:           checker.Err,
	}
	if cfg.Proxy.Enabled() {
		if mirror, err = newMirror(cfg.Proxy, reg, log); err != nil {
			return err
		}
		srvOpts.Mirror = mirror
	}
	ret, err := newRetention(cfg, reg, false)
	if err != nil {
		return err
	}
	var pulls *retention.Pulls
	if ret != nil {
		pulls = retention.NewPulls(id)
		srvOpts.Pulls = pulls
		defer func() {
			// What was pulled since the last flush.
			if err := pulls.Flush(context.WithoutCancel(ctx)); err != nil {
				log.Warn("retention: recording pulls", "err", err)
			}
		}()
	}
	if cfg.HTTP.Host != "" {
		// Validated: an http or https URL with a host.
		srvOpts.Host, _ = url.Parse(cfg.HTTP.Host)
	}
	if notifier != nil {
		srvOpts.Events = notifier
		srvOpts.EventReferences = cfg.Notifications.Events.IncludeReferences
	}
	ln, err := net.Listen(cfg.HTTP.Net, cfg.HTTP.Addr)
	if err != nil {
		return fmt.Errorf("listen: %w", err)
	}
	srv := server.New(reg, srvOpts)
	var handler http.Handler = srv
	var ui http.Handler
	if cfg.UI.Enabled {
		uiAuth := authz
		if cfg.UI.Listener == "debug" {
			uiAuth = nil // the operators' listener has no authentication
		}
		ui = newUI(reg, uiAuth, figures, m)
		if cfg.UI.Listener != "debug" {
			handler = withUI(handler, ui)
		}
	}
	if tr.Enabled {
		// A span per request, named by method and route; the propagated
		// context of a caller's trace is its parent.
		handler = otelhttp.NewHandler(handler, "cairn", otelhttp.WithTracerProvider(tr.Provider), otelhttp.WithPropagators(tr.Propagator),
			otelhttp.WithSpanNameFormatter(func(_ string, r *http.Request) string { return r.Method + " " + server.RouteName(r.URL.Path) }))
		log.Info("tracing on: spans exported over OTLP (OTEL_* environment)")
	}
	httpSrv := &http.Server{
		Handler:           handler,
		TLSConfig:         tlsConfig,
		ReadHeaderTimeout: readHeaderTimeout,
		IdleTimeout:       idleTimeout,
		MaxHeaderBytes:    1 << 20,
		ErrorLog:          slog.NewLogLogger(log.Handler(), slog.LevelWarn),
	}
	if cfg.HTTP.HTTP2.Disabled {
		// A non-nil empty map keeps net/http from configuring HTTP/2.
		httpSrv.TLSNextProto = map[string]func(*http.Server, *tls.Conn, http.Handler){}
	}
	if cfg.HTTP.H2C.Enabled {
		httpSrv.Protocols = new(http.Protocols)
		httpSrv.Protocols.SetHTTP1(true)
		httpSrv.Protocols.SetUnencryptedHTTP2(true)
		httpSrv.Protocols.SetHTTP2(!cfg.HTTP.HTTP2.Disabled)
	}
	serveErr := make(chan error, 2)

	// The debug listener reports unready from the moment shutdown starts,
	// so that load balancers stop sending new requests while in-flight ones
	// finish.
	var stopping atomic.Bool
	var debugSrv *http.Server
	if dc := cfg.HTTP.Debug; dc.Addr != "" {
		dln, err := net.Listen("tcp", dc.Addr)
		if err != nil {
			ln.Close()
			return fmt.Errorf("listen (http.debug.addr): %w", err)
		}
		storageReady := metrics.StorageReady(d)
		// A listing passes on a read-only or full store: readiness also
		// proves a write (rate-limited), unless writes are refused on
		// purpose (storage.maintenance.readonly).
		var storageWritable func(context.Context) error
		if !cfg.Storage.Maintenance.ReadOnly.Enabled {
			storageWritable = metrics.StorageWritable(d, 0)
		}
		opts := metrics.DebugOptions{
			MetricsPath:  dc.Prometheus.Path,
			ReadyTimeout: readyTimeout,
			Ready: func(ctx context.Context) error {
				if stopping.Load() {
					return errors.New("shutting down")
				}
				if err := checker.Err(); err != nil {
					return fmt.Errorf("health: %w", err)
				}
				if store != nil {
					// Pulls of deduplicated layers and every GC need it.
					if _, err := store.StoreID(ctx); err != nil {
						return fmt.Errorf("dedup metadata store: %w", err)
					}
				}
				if err := storageReady(ctx); err != nil || storageWritable == nil {
					return err
				}
				return storageWritable(ctx)
			},
			Handlers: map[string]http.Handler{"/debug/health": checker.Handler()},
		}
		if dc.Prometheus.Enabled {
			opts.Metrics = m
		}
		if store != nil {
			opts.Handlers["/dedup/stats"] = statsHandler(engine)
		}
		if ui != nil && cfg.UI.Listener == "debug" {
			opts.Handlers[uiPrefix+"/"] = ui
		}
		debugSrv = &http.Server{
			Handler:           metrics.DebugHandler(opts),
			ReadHeaderTimeout: readHeaderTimeout,
			IdleTimeout:       idleTimeout,
			ErrorLog:          slog.NewLogLogger(log.Handler(), slog.LevelWarn),
		}
		log.Info("debug listener: /metrics, /healthz, /readyz, /debug/health, /debug/pprof/", "addr", dln.Addr().String())
		go func() { serveErr <- fmt.Errorf("debug listener: %w", debugSrv.Serve(dln)) }()
	}
	log.Info("cairn serving", "addr", ln.Addr().String(), "tls", tlsConfig != nil, "auth", authName(cfg.Auth),
		"driver", d.Name(), "root", rootOf(cfg),
		"delete", cfg.Storage.Delete.Enabled, "dedup", cfg.Storage.Dedup.Mode, "readonly", cfg.Storage.Maintenance.ReadOnly.Enabled, "version", versionString())
	if redirector != nil {
		log.Info("blob GETs are redirected", "to", redirectDesc)
		if n, _ := config.ParseBytes(cfg.Storage.Dedup.Cache.Prefetch.Size); n > 0 {
			log.Warn("storage.dedup.cache.prefetch holds intact layers that redirected GETs never read; set storage.redirect.disable or a prefetch size of 0")
		}
	} else {
		log.Info("blob redirects off", "reason", redirectDesc)
	}

	// Background work runs on one Runner: dedup's jobs, scheduled GC and
	// upload purging.
	runner := task.New(engine.Workers()+2, backgroundQueue, log)
	if !cfg.Storage.Maintenance.ReadOnly.Enabled {
		engine.Schedule(runner)
		if p := cfg.Storage.Maintenance.UploadPurging; p.Enabled {
			runner.Every("upload purge", time.Minute, p.Interval, task.High, purgeUploads(log, reg, p.Age, p.DryRun))
			runner.Every("failed upload purge", time.Minute, time.Minute, task.High, purgeFailedUploads(log, reg, p.Age, p.DryRun))
		}
		if every := expiryInterval(cfg.Proxy); mirror != nil && every > 0 {
			runner.Every("proxy expiry", every, every, task.High, expireCache(log, mirror))
		}
		if pulls != nil {
			runner.Every("pull records", time.Minute, time.Minute, task.Normal, func(ctx context.Context) error {
				if err := pulls.Flush(ctx); err != nil && ctx.Err() == nil {
					log.Warn("retention: recording pulls", "err", err)
				}
				return nil
			})
		}
		if g := cfg.Storage.GC; g.Enabled {
			hooks := gcHooks{retention: ret, tracer: tr.Tracer("gc"), history: history, forget: reg.ForgetLinks, descriptors: descriptors}
			if notifier != nil {
				hooks.events = notifier // not a nil *Notifier in the interface
			}
			runner.Every("gc", g.Interval, g.Interval, task.High, scheduledGC(log, reg.Driver(), cfg, m, store, hooks))
			log.Info("gc scheduled", "interval", g.Interval, "delay", g.Delay, "delete_untagged", g.DeleteUntagged, "retention", ret != nil)
		} else if ret != nil {
			log.Warn("retention policies run with the scheduled GC, which is off (storage.gc.enabled): run cairn gc to apply them")
		}
		if b, ok := store.(*bolt.Store); ok {
			// Low: it runs once dedup's queue is empty, not amid a bulk
			// run whose writes would soon spread the file out again.
			runner.Every("metadata compaction", metaCompactInterval, metaCompactInterval, task.Low, compactMeta(log, b))
		}
	}
	go rl.run(bg, *configPath)
	if figures != nil {
		// Its own loop, not the Runner's: it waits on changes and spaces
		// its measurements, which a periodic task cannot express.
		figuresDone := make(chan struct{})
		go func() { figures.Run(bg, uiMeasure(engine, store != nil)); close(figuresDone) }()
		defer func() { stopBG(); <-figuresDone }()
	}
	runnerDone := make(chan struct{})
	go func() { runner.Run(bg); close(runnerDone) }()
	defer func() { stopBG(); <-runnerDone }()
	healthDone := make(chan struct{})
	go func() { checker.Run(bg); close(healthDone) }()
	defer func() { stopBG(); <-healthDone }()

	go func() {
		if tlsConfig != nil {
			// Certificates come from TLSConfig; ServeTLS adds HTTP/2.
			serveErr <- httpSrv.ServeTLS(ln, "", "")
		} else {
			serveErr <- httpSrv.Serve(ln)
		}
	}()
	select {
	case err := <-serveErr:
		httpSrv.Close()
		if debugSrv != nil {
			debugSrv.Close()
		}
		return fmt.Errorf("serve: %w", err)
	case <-ctx.Done():
	}
	log.Info("shutting down: finishing in-flight requests", "timeout", cfg.HTTP.DrainTimeout)
	stopping.Store(true)
	stopBG()
	sctx, cancel := context.WithTimeout(context.Background(), cfg.HTTP.DrainTimeout)
	defer cancel()
	err = httpSrv.Shutdown(sctx)
	if debugSrv != nil {
		debugSrv.Close()
	}
	if err != nil {
		return fmt.Errorf("shutdown: %w", err)
	}
	log.Info("stopped")
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

// backgroundQueue bounds the background tasks waiting per priority.
const backgroundQueue = 4096

// metaCompactInterval is how often the bolt metadata file is checked for
// space a compact copy would give back (bbolt's file never shrinks).
const metaCompactInterval = 10 * time.Minute

// compactMeta is the task that compacts the bolt metadata store when at
// least half of its file would be saved (bolt.Store.Compact).
func compactMeta(log *slog.Logger, s *bolt.Store) task.Func {
	return func(ctx context.Context) error {
		start := time.Now()
		before, after, err := s.Compact(ctx)
		if err != nil && ctx.Err() == nil {
			log.Warn("metadata compaction", "err", err)
		}
		if after < before {
			log.Info("metadata compaction", "bytes_before", before, "bytes_after", after, "saved", before-after, "duration", time.Since(start))
		}
		return nil
	}
}

// failedUploadAge is how long a session whose newest chunk failed waits
// for a further chunk before it is purged: registry.FailedUploadAge, or
// uploadpurging.age when that is shorter.
func failedUploadAge(age time.Duration) time.Duration { return min(age, registry.FailedUploadAge) }

// purgeUploads is the task that deletes upload sessions older than age,
// and those whose newest chunk failed longer ago than failedUploadAge.
func purgeUploads(log *slog.Logger, reg *registry.Registry, age time.Duration, dryRun bool) task.Func {
	return func(ctx context.Context) error {
		start := time.Now()
		n, err := reg.PurgeUploads(ctx, start.Add(-age), start.Add(-failedUploadAge(age)), dryRun)
		if err != nil && ctx.Err() == nil {
			log.Warn("upload purge finished with errors", "purged", n, "err", err)
		} else {
			log.Info("upload purge", "purged", n, "dry_run", dryRun, "duration", time.Since(start))
		}
		return nil
	}
}

// purgeFailedUploads is the task, run every minute, that deletes the
// sessions this process saw fail and that no chunk joined since, once
// failedUploadAge has passed: it looks at those sessions only, not at the
// store, so a killed push's session goes within minutes of its age.
func purgeFailedUploads(log *slog.Logger, reg *registry.Registry, age time.Duration, dryRun bool) task.Func {
	return func(ctx context.Context) error {
		n, err := reg.PurgeFailedUploads(ctx, time.Now().Add(-failedUploadAge(age)), dryRun)
		if err != nil && ctx.Err() == nil {
			log.Warn("failed upload purge finished with errors", "purged", n, "err", err)
		} else if n > 0 {
			log.Info("failed upload purge", "purged", n, "dry_run", dryRun)
		}
		return nil
	}
}

// expiryInterval is how often cached content is expired: a quarter of the
// shortest TTL, between a minute and an hour; 0 when nothing expires.
func expiryInterval(c config.Proxy) time.Duration {
	var shortest time.Duration
	for _, u := range c.All() {
		if ttl := *u.TTL; ttl > 0 && (shortest == 0 || ttl < shortest) {
			shortest = ttl
		}
	}
	if shortest == 0 {
		return 0
	}
	return min(max(shortest/4, time.Minute), time.Hour)
}

// expireCache removes cached content nobody pulled within its TTL; the
// scheduled GC frees the blobs that leaves unreferenced.
func expireCache(log *slog.Logger, mirror *proxy.Cache) task.Func {
	return func(ctx context.Context) error {
		start := time.Now()
		rep, err := mirror.Expire(ctx, start)
		if err != nil && ctx.Err() == nil {
			log.Warn("proxy expiry finished with errors", "tags", rep.Tags, "manifests", rep.Manifests, "err", err)
		} else {
			log.Info("proxy expiry", "repositories", rep.Repositories, "tags", rep.Tags, "manifests", rep.Manifests, "duration", time.Since(start))
		}
		return nil
	}
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

// newTLSConfig builds the listener's TLS configuration; nil without TLS.
// TLS 1.2 is the floor whatever the configuration says.
func newTLSConfig(c *config.TLS) (*tls.Config, error) {
	if c == nil {
		return nil, nil
	}
	tc := &tls.Config{MinVersion: tls.VersionTLS12}
	if le := c.LetsEncrypt; le != nil {
		m := &autocert.Manager{
			Cache:  autocert.DirCache(le.CacheFile),
			Email:  le.Email,
			Prompt: autocert.AcceptTOS,
		}
		if len(le.Hosts) > 0 {
			m.HostPolicy = autocert.HostWhitelist(le.Hosts...)
		}
		if le.DirectoryURL != "" {
			m.Client = &acme.Client{DirectoryURL: le.DirectoryURL}
		}
		tc.GetCertificate = m.GetCertificate
		// TLS-ALPN-01: the ACME server proves the name on this listener.
		tc.NextProtos = []string{acme.ALPNProto}
	} else {
		cert, err := tls.LoadX509KeyPair(c.Certificate, c.Key)
		if err != nil {
			return nil, fmt.Errorf("config: http.tls: certificate and key: %w", err)
		}
		tc.Certificates = []tls.Certificate{cert}
	}
	if c.MinimumTLS == "tls1.3" {
		tc.MinVersion = tls.VersionTLS13
	}
	if len(c.CipherSuites) > 0 {
		// tls.CipherSuites lists only the suites Go considers secure.
		ids := make(map[string]uint16)
		for _, cs := range tls.CipherSuites() {
			ids[cs.Name] = cs.ID
		}
		for _, name := range c.CipherSuites {
			id, ok := ids[name]
			if !ok {
				return nil, fmt.Errorf("config: http.tls.ciphersuites: %q is not a secure cipher suite", name)
			}
			tc.CipherSuites = append(tc.CipherSuites, id)
		}
	}
	if len(c.ClientCAs) > 0 {
		pool := x509.NewCertPool()
		for _, p := range c.ClientCAs {
			pem, err := os.ReadFile(p)
			if err != nil {
				return nil, fmt.Errorf("config: http.tls.clientcas: %w", err)
			}
			if !pool.AppendCertsFromPEM(pem) {
				return nil, fmt.Errorf("config: http.tls.clientcas: %s holds no PEM certificate", p)
			}
		}
		tc.ClientCAs = pool
		switch c.ClientAuth {
		case config.ClientAuthIfGiven:
			tc.ClientAuth = tls.VerifyClientCertIfGiven
		case config.ClientAuthRequest:
			tc.ClientAuth = tls.RequestClientCert
		case config.ClientAuthAny:
			tc.ClientAuth = tls.RequireAnyClientCert
		default:
			tc.ClientAuth = tls.RequireAndVerifyClientCert
		}
	}
	return tc, nil
}
