package main

import (
	"context"
	"log/slog"
	"time"

	"github.com/cairn-registry/cairn/internal/config"
	"github.com/cairn-registry/cairn/internal/meta/bolt"
	"github.com/cairn-registry/cairn/internal/proxy"
	"github.com/cairn-registry/cairn/internal/registry"
	"github.com/cairn-registry/cairn/internal/retention"
	"github.com/cairn-registry/cairn/internal/task"
)

// cairn serve's background work and what it undoes at exit. Periodic work
// runs as tasks on one task.Runner; the few loops of their own say why.

// cleanups is what cairn serve undoes at exit, in reverse order of
// registration as defers run: what started later stops sooner.
type cleanups []func()

func (c *cleanups) add(f func()) { *c = append(*c, f) }

// spawn runs f in a goroutine of its own; at exit, stop (which ends f) is
// called and f waited for.
func (c *cleanups) spawn(stop func(), f func()) {
	done := make(chan struct{})
	go func() { f(); close(done) }()
	c.add(func() { stop(); <-done })
}

func (c *cleanups) run() {
	for i := len(*c) - 1; i >= 0; i-- {
		(*c)[i]()
	}
}

// startBackground starts the background work on bg: the Runner's tasks,
// the config reloader, the web page's figures and the health checks. At
// exit each is stopped (stopBG) and waited for.
func (s *serving) startBackground(bg context.Context, stopBG func(), stack *cleanups) {
	runner := s.scheduleBackground()
	go s.rl.run(bg, s.configPath)
	if s.figures != nil {
		// Its own loop, not the Runner's: it waits on changes and spaces
		// its measurements, which a periodic task cannot express.
		stack.spawn(stopBG, func() { s.figures.Run(bg, uiMeasure(s.engine, s.store != nil)) })
	}
	stack.spawn(stopBG, func() { runner.Run(bg) })
	stack.spawn(stopBG, func() { s.checker.Run(bg) })
}

// scheduleBackground puts the periodic work on one Runner: dedup's jobs,
// upload purging, proxy expiry, pull records, scheduled GC and metadata
// compaction. A read-only registry runs none of it.
func (s *serving) scheduleBackground() *task.Runner {
	cfg, log := s.cfg, s.log
	runner := task.New(s.engine.Workers()+2, backgroundQueue, log)
	if cfg.Storage.Maintenance.ReadOnly.Enabled {
		return runner
	}
	s.engine.Schedule(runner)
	if p := cfg.Storage.Maintenance.UploadPurging; p.Enabled {
		runner.Every("upload purge", time.Minute, p.Interval, task.High, purgeUploads(log, s.reg, p.Age, p.DryRun))
		runner.Every("failed upload purge", time.Minute, time.Minute, task.High, purgeFailedUploads(log, s.reg, p.Age, p.DryRun))
	}
	if every := expiryInterval(cfg.Proxy); s.mirror != nil && every > 0 {
		runner.Every("proxy expiry", every, every, task.High, expireCache(log, s.mirror))
	}
	if s.pulls != nil {
		runner.Every("pull records", time.Minute, time.Minute, task.Normal, flushPulls(log, s.pulls))
	}
	s.scheduleGC(runner)
	if b, ok := s.store.(*bolt.Store); ok {
		// Low: it runs once dedup's queue is empty, not amid a bulk
		// run whose writes would soon spread the file out again.
		runner.Every("metadata compaction", metaCompactInterval, metaCompactInterval, task.Low, compactMeta(log, b))
	}
	return runner
}

// scheduleGC puts the scheduled GC (storage.gc) on runner, retention's
// policies first.
func (s *serving) scheduleGC(runner *task.Runner) {
	g := s.cfg.Storage.GC
	if !g.Enabled {
		if s.ret != nil {
			s.log.Warn("retention policies run with the scheduled GC, which is off (storage.gc.enabled): run cairn gc to apply them")
		}
		return
	}
	hooks := gcHooks{retention: s.ret, tracer: s.tr.Tracer("gc"), history: s.history, forget: s.reg.ForgetLinks, descriptors: s.descriptors}
	if s.notifier != nil {
		hooks.events = s.notifier // not a nil *Notifier in the interface
	}
	runner.Every("gc", g.Interval, g.Interval, task.High, scheduledGC(s.log, s.reg.Driver(), s.cfg, s.m, s.store, hooks))
	s.log.Info("gc scheduled", "interval", g.Interval, "delay", g.Delay, "delete_untagged", g.DeleteUntagged, "retention", s.ret != nil)
}

// flushPulls is the task that writes the pulls recorded since the last
// flush, for retention's pull-based rules.
func flushPulls(log *slog.Logger, pulls *retention.Pulls) task.Func {
	return func(ctx context.Context) error {
		if err := pulls.Flush(ctx); err != nil && ctx.Err() == nil {
			log.Warn("retention: recording pulls", "err", err)
		}
		return nil
	}
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
