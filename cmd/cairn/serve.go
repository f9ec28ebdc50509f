package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"time"

	ocispec "github.com/opencontainers/image-spec/specs-go/v1"

	"github.com/cairn-registry/cairn/internal/config"
	"github.com/cairn-registry/cairn/internal/registry"
	"github.com/cairn-registry/cairn/internal/server"
	"github.com/cairn-registry/cairn/internal/storage/driver"
	"github.com/cairn-registry/cairn/internal/storage/driver/azure"
	"github.com/cairn-registry/cairn/internal/storage/driver/filesystem"
	"github.com/cairn-registry/cairn/internal/storage/driver/gcs"
	"github.com/cairn-registry/cairn/internal/storage/driver/inmemory"
	"github.com/cairn-registry/cairn/internal/storage/driver/s3"
)

// shutdownTimeout bounds how long in-flight requests may run after SIGTERM.
const shutdownTimeout = 60 * time.Second

func runServe(ctx context.Context, args []string, stderr io.Writer) error {
	fs := flag.NewFlagSet("serve", flag.ContinueOnError)
	fs.SetOutput(stderr)
	configPath := fs.String("config", "", "configuration `file` (distribution's config.yml keys)")
	addr := fs.String("addr", "", "listen `address` (overrides http.addr)")
	root := fs.String("root", "", "filesystem storage root `directory` (overrides the storage section)")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return err
		}
		return fmt.Errorf("%w: serve: %v", errUsage, err)
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("%w: serve: unexpected argument %q", errUsage, fs.Arg(0))
	}
	cfg, warnings, err := config.LoadWithEnv(*configPath, os.Environ())
	if err != nil {
		return err
	}
	if *addr != "" {
		cfg.HTTP.Addr = *addr
	}
	if *root != "" {
		// --root selects the filesystem driver whatever the config named.
		if cfg.Storage.Filesystem == nil {
			cfg.Storage.InMemory, cfg.Storage.S3, cfg.Storage.GCS, cfg.Storage.Azure = nil, nil, nil, nil
			cfg.Storage.Filesystem = config.Default().Storage.Filesystem
		}
		cfg.Storage.Filesystem.RootDirectory = *root
	}
	if err := cfg.Validate(); err != nil {
		return err
	}
	log := newLogger(stderr, cfg.Log.Level)
	for _, w := range warnings {
		log.Warn("config: " + w)
	}

	d, err := newDriver(ctx, cfg)
	if err != nil {
		return err
	}
	reg := registry.New(d, registryOptions(cfg))
	srv := server.New(reg, server.Options{
		ReadOnly: cfg.Storage.Maintenance.ReadOnly.Enabled,
		Logger:   log,
	})

	ln, err := net.Listen("tcp", cfg.HTTP.Addr)
	if err != nil {
		return fmt.Errorf("listen: %w", err)
	}
	httpSrv := &http.Server{
		Handler:           srv,
		ReadHeaderTimeout: 30 * time.Second,
		IdleTimeout:       2 * time.Minute,
		MaxHeaderBytes:    1 << 20,
		ErrorLog:          slog.NewLogLogger(log.Handler(), slog.LevelWarn),
	}
	log.Info("cairn serving", "addr", ln.Addr().String(), "driver", d.Name(), "root", rootOf(cfg),
		"delete", cfg.Storage.Delete.Enabled, "readonly", cfg.Storage.Maintenance.ReadOnly.Enabled, "version", versionString())

	bg, stopBG := context.WithCancel(context.WithoutCancel(ctx))
	defer stopBG()
	if p := cfg.Storage.Maintenance.UploadPurging; p.Enabled && !cfg.Storage.Maintenance.ReadOnly.Enabled {
		go purgeUploads(bg, log, reg, p.Age, p.Interval, p.DryRun)
	}

	serveErr := make(chan error, 1)
	go func() { serveErr <- httpSrv.Serve(ln) }()
	select {
	case err := <-serveErr:
		return fmt.Errorf("serve: %w", err)
	case <-ctx.Done():
	}
	log.Info("shutting down: finishing in-flight requests", "timeout", shutdownTimeout)
	stopBG()
	sctx, cancel := context.WithTimeout(context.Background(), shutdownTimeout)
	defer cancel()
	if err := httpSrv.Shutdown(sctx); err != nil {
		return fmt.Errorf("shutdown: %w", err)
	}
	log.Info("stopped")
	return nil
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
	opts := registry.Options{
		DeleteEnabled:   cfg.Storage.Delete.Enabled,
		SparseManifests: v.Sparse,
		IndexPlatforms:  v.Indexes.Platforms,
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

func newLogger(w io.Writer, level string) *slog.Logger {
	var lvl slog.Level
	switch level {
	case "debug":
		lvl = slog.LevelDebug
	case "warn":
		lvl = slog.LevelWarn
	case "error":
		lvl = slog.LevelError
	default:
		lvl = slog.LevelInfo
	}
	return slog.New(slog.NewTextHandler(w, &slog.HandlerOptions{Level: lvl}))
}

// purgeUploads deletes abandoned upload sessions: once shortly after start,
// then every interval, until ctx ends.
func purgeUploads(ctx context.Context, log *slog.Logger, reg *registry.Registry, age, interval time.Duration, dryRun bool) {
	timer := time.NewTimer(time.Minute)
	defer timer.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-timer.C:
		}
		start := time.Now()
		n, err := reg.PurgeUploads(ctx, start.Add(-age), dryRun)
		if err != nil && ctx.Err() == nil {
			log.Warn("upload purge finished with errors", "purged", n, "err", err)
		} else {
			log.Info("upload purge", "purged", n, "dry_run", dryRun, "duration", time.Since(start))
		}
		timer.Reset(interval)
	}
}
