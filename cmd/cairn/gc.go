package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/cairn-registry/cairn/internal/config"
	"github.com/cairn-registry/cairn/internal/dedup"
	"github.com/cairn-registry/cairn/internal/dedup/pack"
	"github.com/cairn-registry/cairn/internal/fence"
	"github.com/cairn-registry/cairn/internal/gc"
	"github.com/cairn-registry/cairn/internal/meta"
	"github.com/cairn-registry/cairn/internal/metrics"
	"github.com/cairn-registry/cairn/internal/notify"
	"github.com/cairn-registry/cairn/internal/registry"
	"github.com/cairn-registry/cairn/internal/retention"
	"github.com/cairn-registry/cairn/internal/storage/driver"
	"github.com/cairn-registry/cairn/internal/task"
	"github.com/cairn-registry/cairn/internal/webui"
	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/noop"
)

const gcUsage = `usage: cairn gc [--config FILE] [--root DIR] [--dry-run] [--delete-untagged] [--delay DURATION]
               [--batch-size N] [--concurrency N] [--json] [--quiet]

Deletes what no manifest references, while the registry may go on serving.
Flags override the config file's storage.gc section. The retention policies
of the config file run first (with --dry-run, reported only).

Keys it reads (the whole file is loaded and checked as serve does; an unknown
key stops it): the storage driver (storage.filesystem.rootdirectory, s3, gcs,
azure), storage.gc.{delay,deleteuntagged,batchsize,concurrency},
storage.dedup.metadata and storage.dedup.packs.compactbelow (packs and unique
files), storage.cache.blobdescriptor and redis.* (deleted blobs are forgotten
there), retention.*, log.*.`

// runGC runs `cairn gc`: one garbage collection of the configured storage.
// The report goes to stdout (a summary, or JSON with --json), progress to
// stderr. It fails with a one-line reason when the run could not complete
// or some deletions failed.
func runGC(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	f, done, err := parseGCFlags(args, stdout)
	if done || err != nil {
		return err
	}
	cfg, _, err := loadConfig(f.configPath, f.root, nil)
	if err != nil {
		return err
	}
	if err := checkStored(cfg, "gc", "; nothing to collect"); err != nil {
		return err
	}
	d, err := newDriver(ctx, cfg)
	if err != nil {
		return err
	}
	store, err := f.openMeta(ctx, cfg, d, stderr)
	if err != nil {
		return err
	}
	if store != nil {
		defer store.Close()
	}
	opts, closeOpts, err := f.options(ctx, cfg, d, store, stderr)
	if err != nil {
		return err
	}
	defer closeOpts()
	links, closeLinks, err := newLinkVersions(cfg)
	if err != nil {
		return err
	}
	defer closeLinks()
	gcd, events, err := f.retention(ctx, cfg, d, links, stdout, stderr)
	if err != nil {
		return err
	}
	if !f.quiet {
		p := newGCProgress(stderr)
		opts.Progress, opts.ProgressInterval = p.print, p.interval
		defer p.finish()
	}
	rep, runErr := gc.Run(ctx, gcd, opts)
	if !f.dryRun && links != nil {
		// The nodes' cached links of what the run deleted are void.
		if err := links.BumpAll(ctx); err != nil {
			newLogger(stderr, cfg.Log).Warn("gc: the serving nodes see the links this run deleted within storage.cache.manifests.tagttl", "err", err)
		}
	}
	if !f.dryRun {
		events = append(events, gcEvent(rep, runErr))
		deliverEvents(ctx, cfg, newLogger(stderr, cfg.Log), events)
	}
	return f.report(rep, runErr, stdout)
}

// gcFlags is what `cairn gc`'s command line says; set names the flags
// given, which override the configuration.
type gcFlags struct {
	configPath, root                      string
	dryRun, deleteUntagged, asJSON, quiet bool
	delay                                 time.Duration
	batch, conc                           int
	set                                   map[string]bool
}

// parseGCFlags parses `cairn gc`'s command line; done after -h.
func parseGCFlags(args []string, stdout io.Writer) (f gcFlags, done bool, err error) {
	fs := flag.NewFlagSet("cairn gc", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	fs.StringVar(&f.configPath, "config", "", "configuration `file` (distribution's config.yml keys)")
	fs.StringVar(&f.root, "root", "", "filesystem storage root `directory` (overrides the storage section)")
	fs.BoolVar(&f.dryRun, "dry-run", false, "report what would be deleted; delete nothing")
	fs.BoolVar(&f.deleteUntagged, "delete-untagged", false, "also delete manifests no tag reaches")
	fs.DurationVar(&f.delay, "delay", 0, "keep what was modified within this `duration` before the run (default storage.gc.delay, 1h)")
	fs.IntVar(&f.batch, "batch-size", 0, "paths per bulk delete (default storage.gc.batchsize, 1000)")
	fs.IntVar(&f.conc, "concurrency", 0, "manifest reads and bulk deletes in flight (default storage.gc.concurrency, 8)")
	fs.BoolVar(&f.asJSON, "json", false, "print the report as one JSON object")
	fs.BoolVar(&f.quiet, "quiet", false, "print no progress, and no summary unless --json")
	if done, err := parseFlags(fs, args, "gc", gcUsage, stdout); done || err != nil {
		return f, true, err
	}
	f.set = map[string]bool{}
	fs.Visit(func(fl *flag.Flag) { f.set[fl.Name] = true })
	if (f.set["delay"] && f.delay < 0) || (f.set["batch-size"] && f.batch < 1) || (f.set["concurrency"] && f.conc < 1) {
		return f, true, fmt.Errorf("%w: gc: --delay must be >= 0, --batch-size and --concurrency >= 1", errUsage)
	}
	return f, false, nil
}

// openMeta opens the dedup metadata store (nil: none). Deleting a
// deduplicated layer must release its files, which needs it: a store in
// use is refused rather than its files leaked.
func (f gcFlags) openMeta(ctx context.Context, cfg *config.Config, d driver.Driver, stderr io.Writer) (meta.Store, error) {
	store, err := openMeta(ctx, cfg, time.Second, newLogger(stderr, cfg.Log))
	if errors.Is(err, meta.ErrLocked) {
		return nil, errors.New("gc: the dedup metadata store is in use by a running cairn serve; enable storage.gc in serve, or stop it")
	}
	if err != nil || store == nil || f.dryRun {
		return store, err
	}
	// This process owns a bolt store (serve is stopped), so nobody else
	// rebuilds it: an incomplete index is rebuilt before the run, which
	// then collects packs and files too.
	if err := ensureIndexed(ctx, "gc", d, store, false, f.quiet, stderr); err != nil {
		store.Close()
		return nil, err
	}
	return store, nil
}

// options are the run's options: storage.gc overridden by the flags, the
// dedup metadata, and the shared blob descriptor cache to forget what the
// run deletes in (closed by the func returned).
func (f gcFlags) options(ctx context.Context, cfg *config.Config, d driver.Driver, store gcIndex, stderr io.Writer) (gc.Options, func(), error) {
	opts := gcOptions(cfg.Storage.GC)
	if err := withDedup(&opts, d, store, cfg); err != nil {
		return opts, nil, err
	}
	opts.DryRun = f.dryRun
	opts.DeleteUntagged = opts.DeleteUntagged || f.deleteUntagged
	if f.set["delay"] {
		opts.Delay = f.delay
	}
	if f.set["batch-size"] {
		opts.BatchSize = f.batch
	}
	if f.set["concurrency"] {
		opts.Concurrency = f.conc
	}
	if cfg.Storage.Cache.DescriptorCache() != "redis" || f.dryRun {
		return opts, func() {}, nil
	}
	// The servers' shared cache must not keep answering HEADs for what
	// this run deletes. An inmemory cache lives in serve's process, out of
	// reach: see README (storage.cache.ttl).
	dc, closeDC, err := newDescriptorCache(ctx, cfg, nil)
	if err != nil {
		newLogger(stderr, cfg.Log).Warn("gc: the blob descriptor cache is out of reach; its entries of what this run deletes expire on their own", "err", err)
		return opts, func() {}, nil
	}
	opts.Forget, _ = dc.(gc.BlobForgetter)
	return opts, closeDC, nil
}

// retention applies the retention policies before the run: what they
// delete is collected in this run (a dry run reports both). A dry run
// reads the store through a preview, into which retention evicts (unless
// retention.dryrun keeps the real run from evicting too): the GC's counts
// are then those of the real run, blobs only the evicted manifests held
// included. It returns the driver the run reads and retention's events.
func (f gcFlags) retention(ctx context.Context, cfg *config.Config, d driver.Driver, links registry.LinkVersions, stdout, stderr io.Writer) (driver.Driver, []notify.Event, error) {
	gcd, retd := d, d
	if f.dryRun {
		pv := retention.NewPreview(d)
		gcd = pv
		if !cfg.Retention.DryRun {
			retd = pv
		}
	}
	regOpts := registryOptions(cfg)
	regOpts.LinkVersions = links
	ret, err := newRetention(cfg, registry.New(retd, regOpts), f.dryRun)
	if err != nil {
		return nil, nil, err
	}
	rrep, err := applyRetention(ctx, newLogger(stderr, cfg.Log), ret)
	// Retention's deletes are events as they are inside serve; what it
	// deleted before an error too.
	var events []notify.Event
	if rrep != nil && !rrep.DryRun {
		events = retentionEvents(rrep)
	}
	if err != nil {
		deliverEvents(ctx, cfg, newLogger(stderr, cfg.Log), events)
		return nil, nil, fmt.Errorf("gc: retention: %s", oneLine(err.Error()))
	}
	if rrep != nil && !f.quiet && !f.asJSON {
		verb := "deleted"
		if rrep.DryRun {
			verb = "would delete"
		}
		fmt.Fprintf(stdout, "retention: %d repositories governed; %s %d tags and %d untagged manifests\n", rrep.Repositories, verb, len(rrep.Tags), len(rrep.Manifests))
	}
	return gcd, events, nil
}

// report prints the run's report (a summary, or JSON) and fails with a
// one-line reason when the run could not complete or deletions failed.
func (f gcFlags) report(rep *gc.Report, runErr error, stdout io.Writer) error {
	if rep != nil {
		switch {
		case f.asJSON:
			enc := json.NewEncoder(stdout)
			enc.SetIndent("", "  ")
			if err := enc.Encode(rep); err != nil {
				return err
			}
		case !f.quiet:
			writeGCSummary(stdout, rep, runErr == nil)
		}
	}
	if runErr != nil {
		return errors.New(oneLine(runErr.Error()))
	}
	if rep.DeleteFailures > 0 {
		first := ""
		if len(rep.DeleteErrors) > 0 {
			first = ": first: " + oneLine(rep.DeleteErrors[0])
		}
		return fmt.Errorf("gc: %d deletions failed%s", rep.DeleteFailures, first)
	}
	return nil
}

// deliverEvents hands a CLI run's events to the notification endpoints.
// While cairn serve runs it holds the queue file (bbolt locks it, so two
// processes never write one), and the events are spooled for it to queue
// and send; otherwise this process queues and sends them itself, and what
// a receiver does not take stays queued for serve. Failures are logged:
// the run's outcome does not depend on its events.
func deliverEvents(ctx context.Context, cfg *config.Config, log *slog.Logger, events []notify.Event) {
	if len(events) == 0 || len(cfg.Notifications.Enabled()) == 0 {
		return
	}
	n, err := newNotifier(cfg, metrics.New(), log)
	if errors.Is(err, notify.ErrQueueLocked) {
		path, perr := notifyQueuePath(cfg)
		if perr == nil {
			perr = notify.Spool(path, notify.Source{Addr: sourceAddr(cfg.HTTP.Addr), InstanceID: notify.NewID()}, events)
		}
		if perr != nil {
			log.Error("notifications: events lost", "events", len(events), "err", perr)
			return
		}
		log.Info("notifications: the queue is held by a running cairn serve; events spooled for it", "events", len(events), "dir", notify.SpoolDir(path))
		return
	}
	if err != nil {
		log.Error("notifications: events lost", "events", len(events), "err", err)
		return
	}
	defer n.Close()
	if err := n.Deliver(ctx, events); err != nil {
		log.Error("notifications: events lost", "events", len(events), "err", err)
	}
}

// gcIndex is what a GC run needs of the dedup metadata store: the files'
// references, the pack records (compaction places files too), and the
// identity that tells whether the index is complete.
type gcIndex interface {
	gc.DedupIndex
	gc.PackIndex
	meta.Identity
}

// withDedup gives a run the dedup metadata store (nil: none): layers'
// file references, pack records and compaction.
func withDedup(opts *gc.Options, d driver.Driver, store gcIndex, cfg *config.Config) error {
	if store == nil {
		return nil
	}
	opts.Dedup, opts.Packs = store, store
	// Packs and files are deleted only on the word of an index known
	// complete for this storage (a lost or flushed one says nothing).
	opts.DedupComplete = func(ctx context.Context) (bool, error) {
		st, err := dedup.CheckIndex(ctx, d, store)
		return st.Complete(), err
	}
	ps, err := pack.NewStore(d, store, packOptions(cfg), nil)
	if err != nil {
		return err
	}
	opts.Compactor = ps
	opts.CompactBelow = cfg.Storage.Dedup.Packs.CompactBelow
	opts.CompactBatch = ps.Options().PackSize
	return nil
}

// checkStored refuses storage a one-off command (cmd, in messages) has
// nothing to work on in: the inmemory driver's (nothing, the rest of its
// message), or a filesystem root that is not there.
func checkStored(cfg *config.Config, cmd, nothing string) error {
	if cfg.Storage.InMemory != nil {
		return fmt.Errorf("%s: the inmemory driver keeps nothing between processes%s", cmd, nothing)
	}
	if fs := cfg.Storage.Filesystem; fs != nil {
		if _, err := os.Stat(fs.RootDirectory); err != nil {
			return fmt.Errorf("%s: storage root: %w", cmd, err)
		}
	}
	return nil
}

// counts lists a report's counts as "key n, key n", keys in order.
func counts[K ~string](m map[K]int64) string {
	parts := make([]string, 0, len(m))
	for _, k := range slices.Sorted(maps.Keys(m)) {
		parts = append(parts, fmt.Sprintf("%s %d", k, m[k]))
	}
	return strings.Join(parts, ", ")
}

func gcOptions(g config.GC) gc.Options {
	return gc.Options{DeleteUntagged: g.DeleteUntagged, Delay: g.Delay, BatchSize: g.BatchSize, Concurrency: g.Concurrency}
}

func oneLine(s string) string { return strings.Join(strings.Fields(s), " ") }

// writeGCSummary prints the report for people.
func writeGCSummary(w io.Writer, r *gc.Report, completed bool) {
	state := "completed"
	if !completed {
		state = "stopped"
	}
	if r.DryRun {
		state += " (dry run: nothing deleted)"
	}
	fmt.Fprintf(w, "gc %s %s in %.2fs\n", r.RunID, state, r.Seconds)
	fmt.Fprintf(w, "  seen:    %d repositories, %d manifests, %d tags, %d blobs\n", r.Repositories, r.Manifests, r.Tags, r.Blobs)
	d := r.Deleted
	verb := "deleted"
	if r.DryRun {
		verb = "to delete"
	}
	fmt.Fprintf(w, "  %s: %d manifests, %d tag index entries, %d referrer links, %d layer links, %d blobs (%s)\n",
		verb, d.Manifests, d.TagIndexEntries, d.ReferrerLinks, d.LayerLinks, d.Blobs, webui.HumanBytes(d.BytesFreed))
	if r.Dedup != nil {
		fmt.Fprintf(w, "  dedup:   %d recipes, %d unique files %s; %d re-referenced (kept), %d revived, %d left for a later run (%d resumed)\n",
			d.Recipes, d.DedupFiles, verb, r.Dedup.Rereferenced, r.Dedup.Revived, r.Dedup.Left, r.Dedup.Resumed)
	}
	if p := r.Packs; p != nil {
		fmt.Fprintf(w, "  packs:   %d seen, %d empty and %d orphaned %s (%s); %d compacted (%d files, %s moved)",
			p.Packs, p.Deleted, p.Orphans, verb, webui.HumanBytes(p.BytesFreed), p.Compacted, p.FilesMoved, webui.HumanBytes(p.BytesMoved))
		if p.CompactErrors > 0 {
			fmt.Fprintf(w, ", %d could not be compacted", p.CompactErrors)
		}
		fmt.Fprintln(w)
	}
	if d.TmpFiles > 0 {
		fmt.Fprintf(w, "  tmp:     %d leftovers of interrupted dedup writes %s\n", d.TmpFiles, verb)
	}
	fmt.Fprintf(w, "  kept:    %d younger than %s, %d named by operations in flight\n", r.KeptYoung, r.Delay, r.KeptJournal)
	if r.BlobSweep != "done" && r.BlobSweep != "" {
		fmt.Fprintf(w, "  blobs:   %s\n", r.BlobSweep)
	}
	if r.DeleteFailures > 0 || r.Deferred > 0 {
		fmt.Fprintf(w, "  failed:  %d deletions failed, %d not attempted\n", r.DeleteFailures, r.Deferred)
	}
	for _, k := range r.ProblemKinds() {
		fmt.Fprintf(w, "  problem: %s: %d (e.g. %s)\n", k, r.Problems[k], strings.Join(r.Examples[k], ", "))
	}
	fmt.Fprintf(w, "  storage: %s\n", counts(r.Requests))
}

// gcProgress draws a progress bar on a terminal and prints a line
// every 10 seconds otherwise.
type gcProgress struct{ progressLine }

func newGCProgress(w io.Writer) *gcProgress {
	return &gcProgress{newProgressLine(w)}
}

func (p *gcProgress) print(pr gc.Progress) {
	if !p.tty {
		if pr.Phase == "done" {
			return // the summary follows
		}
		fmt.Fprintf(p.w, "gc: %s: %d repositories, %d manifests read, %d blobs listed, %d of %d paths deleted, %s\n",
			pr.Phase, pr.Repositories, pr.Manifests, pr.Blobs, pr.Deleted, pr.Planned, pr.Elapsed.Round(time.Second))
		return
	}
	p.draw("gc %-5s [%s] %d/%d paths  %d repos  %d manifests  %d blobs  %s",
		pr.Phase, bar(pr.Deleted, pr.Planned), pr.Deleted, pr.Planned, pr.Repositories, pr.Manifests, pr.Blobs, pr.Elapsed.Round(100*time.Millisecond))
}

// gcEvents receives the event of each scheduled run (notify.Notifier).
type gcEvents interface {
	Notify(notify.Event)
}

// gcHooks is what a scheduled GC run reports to, and retention to run
// first; nil fields are skipped.
type gcHooks struct {
	retention *retention.Retention
	tracer    trace.Tracer
	history   *webui.History
	events    gcEvents
	// forget voids what the serving registry, and with shared link
	// versions every node, cached of the links a run may have deleted.
	forget func(context.Context)
	// descriptors is the serving registry's blob descriptor cache, told
	// what each run deletes (gc.Options.Forget); in memory too, as the
	// run is in the same process.
	descriptors registry.DescriptorCache
}

// scheduledGC is the task of a scheduled garbage collection (the Runner
// adds jitter, so that nodes sharing a store do not start together). A turn
// is skipped while another node's or process's run is active.
func scheduledGC(log *slog.Logger, d driver.Driver, cfg *config.Config, m *metrics.Metrics, store gcIndex, hooks gcHooks) task.Func {
	g := cfg.Storage.GC
	opts := gcOptions(g)
	if err := withDedup(&opts, d, store, cfg); err != nil {
		log.Error("gc: pack compaction is off", "err", err)
	}
	opts.Forget, _ = hooks.descriptors.(gc.BlobForgetter)
	return func(ctx context.Context) error {
		if busy, err := fence.Running(ctx, d); err != nil || busy {
			if ctx.Err() == nil {
				log.Info("gc skipped: another run is active, or the store could not be read", "err", err)
			}
			return nil
		}
		tracer := hooks.tracer
		if tracer == nil {
			tracer = noop.NewTracerProvider().Tracer("")
		}
		ctx, span := tracer.Start(ctx, "gc.run")
		defer span.End()
		// Retention first: the blobs what it deletes leaves unreferenced
		// go in this run.
		rrep, err := applyRetention(ctx, log, hooks.retention)
		if err != nil && ctx.Err() == nil {
			log.Warn("retention failed; collecting anyway", "err", err)
		}
		if hooks.events != nil && rrep != nil && !rrep.DryRun {
			for _, ev := range retentionEvents(rrep) {
				hooks.events.Notify(ev)
			}
		}
		start := time.Now()
		rep, err := gc.Run(ctx, d, opts)
		if hooks.forget != nil {
			hooks.forget(ctx)
		}
		if ctx.Err() != nil {
			return nil
		}
		m.GCRun(err, time.Since(start))
		run := webui.GCRun{At: start, Error: err != nil}
		if rep != nil {
			run.Freed, run.Blobs = rep.Deleted.BytesFreed, rep.Deleted.Blobs
		}
		if hooks.history != nil {
			hooks.history.AddGCRun(run)
		}
		if hooks.events != nil {
			hooks.events.Notify(gcEvent(rep, err))
		}
		if err != nil {
			return fmt.Errorf("gc: %w", err)
		}
		logGCRun(ctx, log, m, rep)
		return nil
	}
}

// logGCRun counts a scheduled run's deletions in the metrics and logs
// them: a warning when anything was left or went wrong.
func logGCRun(ctx context.Context, log *slog.Logger, m *metrics.Metrics, rep *gc.Report) {
	m.GCDeleted("manifests", int(rep.Deleted.Manifests))
	m.GCDeleted("tag_index_entries", int(rep.Deleted.TagIndexEntries))
	m.GCDeleted("layer_links", int(rep.Deleted.LayerLinks))
	m.GCDeleted("blobs", int(rep.Deleted.Blobs))
	m.GCDeleted("dedup_files", int(rep.Deleted.DedupFiles))
	var problems int64
	for _, n := range rep.Problems {
		problems += n
	}
	lvl := slog.LevelInfo
	if rep.DeleteFailures > 0 || problems > 0 || rep.BlobSweep != "done" || (rep.Dedup != nil && rep.Dedup.Left > 0) {
		lvl = slog.LevelWarn
	}
	log.Log(ctx, lvl, "gc", "run", rep.RunID, "seconds", rep.Seconds,
		"manifests", rep.Deleted.Manifests, "tag_index_entries", rep.Deleted.TagIndexEntries,
		"layer_links", rep.Deleted.LayerLinks, "blobs", rep.Deleted.Blobs, "dedup_files", rep.Deleted.DedupFiles, "bytes_freed", rep.Deleted.BytesFreed,
		"problems", problems, "delete_failures", rep.DeleteFailures, "blob_sweep", rep.BlobSweep)
}
