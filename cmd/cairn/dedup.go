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
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/cairn-registry/cairn/internal/config"
	"github.com/cairn-registry/cairn/internal/dedup"
	"github.com/cairn-registry/cairn/internal/dedup/pack"
	"github.com/cairn-registry/cairn/internal/meta"
	"github.com/cairn-registry/cairn/internal/meta/bolt"
	metaredis "github.com/cairn-registry/cairn/internal/meta/redis"
	"github.com/cairn-registry/cairn/internal/redisconn"
	"github.com/cairn-registry/cairn/internal/storage/driver"
	"github.com/cairn-registry/cairn/internal/webui"
	"go.opentelemetry.io/otel/trace"
)

const dedupUsage = `usage: cairn dedup run [--config FILE] [--root DIR] [--mode MODE] [--json] [--quiet]
       cairn dedup stats [--config FILE] [--root DIR] [--json]
       cairn dedup repack [--config FILE] [--root DIR] [--json]
       cairn dedup reindex [--config FILE] [--root DIR] [--json] [--quiet] [--force]

run    deduplicates every layer of every stored manifest, in each repository's
       mode (storage.dedup), or in --mode for all; cairn serve must be stopped
       (it owns the metadata store) — a running server does the same in the
       background. Progress goes to stderr: a line redrawn on a terminal,
       else a line every 10 s (--quiet: none).
stats  prints logical and stored bytes, the ratio, layers by state, unique and
       shared files and recipe hits by encoder; with cairn serve running it
       asks the server's http.debug.addr.
repack moves unique files stored one object each (by cairn before packs)
       into packs, layer by layer; safe beside running servers on Redis
       metadata (a bolt store needs cairn serve stopped). A rerun resumes.
reindex (or rebuild) rebuilds the metadata store from storage: every recipe's
       layer takes its file references and state, every pack's files are
       located from the pack's own index; the store is then marked a
       complete index of this storage, so GC deletes packs and files again.
       cairn serve does the same by itself when it finds the metadata new,
       lost, flushed or corrupt; this runs it by hand (beside running servers
       on Redis; a bolt store needs serve stopped). --force takes over a bolt
       metadata store that indexes another storage (moved aside first).

Keys it reads (the whole file is loaded and checked as serve does; an unknown
key stops it): the storage driver (storage.filesystem.rootdirectory, s3, gcs,
azure), storage.dedup.* (mode, repositories, workers, metadata, packs,
selective, cache), redis.* (a Redis metadata store), http.debug.addr (stats
asks a running server), log.*.`

// metaPath is where the bolt metadata store lives for cfg.
func metaPath(cfg *config.Config) (string, error) {
	if p := cfg.Storage.Dedup.Metadata.Path; p != "" {
		return p, nil
	}
	if fs := cfg.Storage.Filesystem; fs != nil {
		return filepath.Join(fs.RootDirectory, "cairn-meta.db"), nil
	}
	return "", errors.New("storage.dedup.metadata.path must be set with an object-store driver")
}

// preconstructDir is the on-disk restore cache's directory for cfg.
func preconstructDir(cfg *config.Config) string {
	if p := cfg.Storage.Dedup.Cache.Preconstruct.Dir; p != "" {
		return p
	}
	if fs := cfg.Storage.Filesystem; fs != nil {
		return filepath.Join(fs.RootDirectory, "cairn-cache", "preconstruct")
	}
	if dir, err := os.UserCacheDir(); err == nil {
		return filepath.Join(dir, "cairn", "preconstruct")
	}
	return filepath.Join(os.TempDir(), "cairn-preconstruct")
}

// spoolDir holds blobs while the worker processes them: beside the data
// with the filesystem driver (a tmpfs /tmp would hold whole layers in RAM).
func spoolDir(cfg *config.Config) string {
	if fs := cfg.Storage.Filesystem; fs != nil {
		return filepath.Join(fs.RootDirectory, "cairn-cache", "spool")
	}
	if dir, err := os.UserCacheDir(); err == nil {
		return filepath.Join(dir, "cairn", "spool")
	}
	return ""
}

// packOptions maps storage.dedup.packs to the pack store's options.
func packOptions(cfg *config.Config) pack.Options {
	p := cfg.Storage.Dedup.Packs
	size, _ := config.ParseBytes(p.Size) // validated on load
	return pack.Options{PackSize: size, Inflight: p.ReadAhead}
}

// dedupOptions maps storage.dedup to the engine's options.
func dedupOptions(cfg *config.Config) dedup.Options {
	c := cfg.Storage.Dedup
	pre, _ := config.ParseBytes(c.Cache.Preconstruct.Size) // validated on load
	mem, _ := config.ParseBytes(c.Cache.Prefetch.Size)
	opts := dedup.Options{
		Mode:             dedup.Mode(c.Mode),
		Workers:          c.Workers,
		HotPulls:         int64(c.Selective.Pulls),
		HotWindow:        c.Selective.Window,
		PreconstructDir:  preconstructDir(cfg),
		TempDir:          spoolDir(cfg),
		SharedStore:      c.Metadata.Redis != nil,
		PreconstructSize: pre,
		PrefetchSize:     mem,
		Predict:          c.Predictor.Enabled,
		RepullRatio:      c.Predictor.RepullRatio,
		PredictRebuilds:  c.Predictor.Rebuilds,
		Packs:            packOptions(cfg),
		Parses:           c.Packs.Parses,
	}
	for pattern, m := range c.Repositories {
		opts.RepoModes = append(opts.RepoModes, dedup.RepoMode{Pattern: pattern, Mode: dedup.Mode(m)})
	}
	// Exact names first, then longer (more specific) patterns.
	sort.Slice(opts.RepoModes, func(i, j int) bool {
		a, b := opts.RepoModes[i].Pattern, opts.RepoModes[j].Pattern
		ga, gb := strings.ContainsAny(a, "*?["), strings.ContainsAny(b, "*?[")
		if ga != gb {
			return !ga
		}
		if len(a) != len(b) {
			return len(a) > len(b)
		}
		return a < b
	})
	return opts
}

// openMeta opens the metadata store: Redis when configured; else the bolt
// file when dedup is on or was used before (its file exists: GC must
// release what deduplicated layers hold). It returns nil, nil when neither.
// A corrupt bolt file is moved aside and a fresh one opened (its StoreID is
// "", so the metadata is rebuilt from storage); log says so.
func openMeta(ctx context.Context, cfg *config.Config, lockTimeout time.Duration, log *slog.Logger) (meta.Store, error) {
	if r := cfg.Storage.Dedup.Metadata.Redis; r != nil {
		o := metaredis.Options{Addr: r.Addr, Username: r.Username, Password: r.Password, DB: r.DB, Prefix: r.Prefix, Log: log}
		if r.Addr == "" {
			// The redis section's server (validation made sure there is one).
			c, err := redisconn.Open(ctx, cfg.Redis.Options())
			if err != nil {
				return nil, fmt.Errorf("dedup: metadata store: %w", err)
			}
			o.Client, o.OwnClient = c, true
		}
		s, err := metaredis.Open(ctx, o)
		if err != nil {
			if o.Client != nil {
				o.Client.Close()
			}
			return nil, fmt.Errorf("dedup: %w", err)
		}
		return s, nil
	}
	p, err := metaPath(cfg)
	if err != nil {
		if cfg.Storage.Dedup.Active() {
			return nil, fmt.Errorf("dedup: %w", err)
		}
		return nil, nil
	}
	if !cfg.Storage.Dedup.Active() {
		if _, err := os.Stat(p); errors.Is(err, os.ErrNotExist) {
			return nil, nil
		}
	}
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		return nil, fmt.Errorf("dedup: metadata store: %w", err)
	}
	s, aside, err := bolt.OpenRecovering(p, bolt.Options{LockTimeout: lockTimeout})
	if aside != "" {
		log.Error("dedup: the metadata file is corrupt: moved it aside and started a fresh one; the metadata will be rebuilt from storage (recipes and packs)", "path", p, "moved_to", aside)
	}
	if err != nil {
		return nil, fmt.Errorf("dedup: %w", err)
	}
	return s, nil
}

func runDedup(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	f, done, err := parseDedupFlags(args, stdout)
	if done || err != nil {
		return err
	}
	cfg, err := f.load()
	if err != nil {
		return err
	}
	store, err := openMeta(ctx, cfg, time.Second, newLogger(stderr, cfg.Log))
	if errors.Is(err, meta.ErrLocked) {
		if f.sub == "stats" && cfg.HTTP.Debug.Addr != "" {
			return remoteStats(ctx, cfg.HTTP.Debug.Addr, f.asJSON, stdout)
		}
		return fmt.Errorf("dedup %s: the metadata store is in use by a running cairn serve (stop it, or set http.debug.addr to query it)", f.sub)
	}
	if err != nil {
		return err
	}
	if store == nil {
		return fmt.Errorf("dedup %s: dedup has never run on this storage (no metadata store)", f.sub)
	}
	defer store.Close()
	d, err := newDriver(ctx, cfg)
	if err != nil {
		return err
	}
	opts := dedupOptions(cfg)
	opts.PreconstructDir = "" // the CLI serves nothing
	e, err := dedup.New(d, store, opts, newLogger(stderr, cfg.Log), nil)
	if err != nil {
		return err
	}
	defer e.Close()
	if f.sub == "run" || f.sub == "repack" {
		// Both add to the index: over an incomplete one they would store
		// again files that packs hold already, and over another storage's
		// they would name packs it does not have. A run on fresh storage
		// records the identity here, so that serve, gc and scrub find a
		// complete index after it instead of rebuilding one.
		if err := ensureIndexed(ctx, "dedup "+f.sub, d, store, true, f.quiet, stderr); err != nil {
			return err
		}
	}
	switch f.sub {
	case "stats":
		st, err := e.Stats(ctx)
		if err != nil {
			return fmt.Errorf("dedup stats: %w", err)
		}
		return printStats(stdout, st, f.asJSON)
	case "repack":
		return repack(ctx, e, f.asJSON, stdout)
	case "reindex":
		metaFile := ""
		if cfg.Storage.Dedup.Metadata.Redis == nil {
			metaFile, _ = metaPath(cfg)
		}
		return reindex(ctx, d, store, metaFile, f.force, f.asJSON, f.quiet, stdout, stderr)
	}
	return f.runAll(ctx, e, stdout, stderr)
}

// dedupFlags is what a `cairn dedup` command line says: the subcommand
// (sub) and its flags.
type dedupFlags struct {
	sub, configPath, root string
	asJSON, quiet, force  bool
	forceMode             dedup.Mode // run --mode; "" : each repository's
}

// parseDedupFlags parses a `cairn dedup` command line; done after help.
func parseDedupFlags(args []string, stdout io.Writer) (f dedupFlags, done bool, err error) {
	if len(args) == 0 {
		return f, true, fmt.Errorf("%w: dedup: missing subcommand (want: run, stats, repack, reindex)", errUsage)
	}
	if args[0] == "rebuild" {
		args = append([]string{"reindex"}, args[1:]...)
	}
	switch args[0] {
	case "run", "stats", "repack", "reindex":
	case "-h", "-help", "--help", "help":
		fmt.Fprintln(stdout, dedupUsage)
		return f, true, nil
	default:
		return f, true, fmt.Errorf("%w: dedup: unknown subcommand %q (want: run, stats, repack, reindex)", errUsage, args[0])
	}
	f.sub = args[0]
	fs := flag.NewFlagSet("cairn dedup "+f.sub, flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	fs.StringVar(&f.configPath, "config", "", "configuration `file` (distribution's config.yml keys)")
	fs.StringVar(&f.root, "root", "", "filesystem storage root `directory` (overrides the storage section)")
	fs.BoolVar(&f.asJSON, "json", false, "print one JSON object")
	var mode string
	switch f.sub {
	case "run":
		fs.StringVar(&mode, "mode", "", "process every repository in this `mode` (index, full, selective)")
		fs.BoolVar(&f.quiet, "quiet", false, "print no progress")
	case "reindex":
		fs.BoolVar(&f.quiet, "quiet", false, "print no progress")
		fs.BoolVar(&f.force, "force", false, "take over a bolt metadata store that indexes another storage")
	}
	if done, err := parseFlags(fs, args[1:], "dedup "+f.sub, dedupUsage, stdout); done || err != nil {
		return f, true, err
	}
	if mode != "" {
		m, err := dedup.ParseMode(mode)
		if err != nil || m == dedup.ModeOff {
			return f, true, fmt.Errorf("%w: dedup run: --mode %q is not index, full or selective", errUsage, mode)
		}
		f.forceMode = m
	}
	return f, false, nil
}

// load reads and checks the configuration, with --mode applied, and
// refuses what the subcommand cannot work on.
func (f dedupFlags) load() (*config.Config, error) {
	cfg, _, err := loadConfig(f.configPath, f.root, func(c *config.Config) {
		if f.forceMode != "" {
			c.Storage.Dedup.Mode = string(f.forceMode)
		}
		if f.sub == "reindex" && !c.Storage.Dedup.Active() {
			// Layers deduplicated earlier stay served with dedup off:
			// their metadata is rebuilt all the same (the mode only
			// decides that a missing bolt file is created).
			c.Storage.Dedup.Mode = string(dedup.ModeIndex)
		}
	})
	if err != nil {
		return nil, err
	}
	if cfg.Storage.InMemory != nil {
		return nil, fmt.Errorf("dedup %s: the inmemory driver keeps nothing between processes", f.sub)
	}
	if f.sub == "run" && !cfg.Storage.Dedup.Active() {
		return nil, fmt.Errorf("%w: dedup run: storage.dedup.mode is off; set it or pass --mode", errUsage)
	}
	if fsc := cfg.Storage.Filesystem; fsc != nil {
		if _, err := os.Stat(fsc.RootDirectory); err != nil {
			return nil, fmt.Errorf("dedup %s: storage root: %w", f.sub, err)
		}
	}
	return cfg, nil
}

// runAll runs `cairn dedup run` and prints what it did.
func (f dedupFlags) runAll(ctx context.Context, e *dedup.Engine, stdout, stderr io.Writer) error {
	start := time.Now()
	ro := dedup.RunOptions{Force: f.forceMode}
	if !f.quiet {
		p := &dedupProgress{newProgressLine(stderr)}
		ro.Progress, ro.ProgressInterval = p.print, p.interval
		defer p.finish()
	}
	rs, err := e.RunAll(ctx, ro)
	if err != nil {
		return fmt.Errorf("dedup run: %w", err)
	}
	if f.asJSON {
		return json.NewEncoder(stdout).Encode(rs)
	}
	fmt.Fprintf(stdout, "dedup run: %d manifests, %d layers in %s\n", rs.Manifests, rs.Layers, time.Since(start).Round(time.Millisecond))
	keys := slices.Sorted(maps.Keys(rs.Outcomes))
	for _, k := range keys {
		fmt.Fprintf(stdout, "  %-15s %d\n", k, rs.Outcomes[k])
	}
	if rs.Errors > 0 {
		return fmt.Errorf("dedup run: %d layers failed (see the log); they stay pending", rs.Errors)
	}
	return nil
}

// dedupProgress shows a dedup run's progress: a bar on a terminal, a line
// every 10 seconds otherwise.
type dedupProgress struct{ progressLine }

func (p *dedupProgress) print(pr dedup.RunProgress) {
	if !p.tty {
		if pr.Final {
			return // the summary follows
		}
		fmt.Fprintf(p.w, "dedup run: %d manifests read, %d of %d layers done, %d failed, %s\n",
			pr.Manifests, pr.Done, pr.Layers, pr.Errors, pr.Elapsed.Round(time.Second))
		return
	}
	p.draw("dedup run [%s] %d/%d layers  %d manifests  %d failed  %s",
		bar(pr.Done, pr.Layers), pr.Done, pr.Layers, pr.Manifests, pr.Errors, pr.Elapsed.Round(100*time.Millisecond))
}

// repack runs `cairn dedup repack`.
func repack(ctx context.Context, e *dedup.Engine, asJSON bool, stdout io.Writer) error {
	start := time.Now()
	rs, err := e.Repack(ctx)
	if err != nil {
		return fmt.Errorf("dedup repack: %s", oneLine(err.Error()))
	}
	if asJSON {
		if err := json.NewEncoder(stdout).Encode(rs); err != nil {
			return err
		}
	} else {
		fmt.Fprintf(stdout, "dedup repack: %d layers, %d with files moved: %d files, %d bytes into packs in %s\n",
			rs.Layers, rs.Moved, rs.Files, rs.Bytes, time.Since(start).Round(time.Millisecond))
	}
	if rs.Errors > 0 {
		return fmt.Errorf("dedup repack: %d layers failed (see the log); rerun to resume", rs.Errors)
	}
	return nil
}

// remoteStats asks a running server's debug listener.
func remoteStats(ctx context.Context, addr string, asJSON bool, stdout io.Writer) error {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Minute)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+addr+"/dedup/stats", nil)
	if err != nil {
		return fmt.Errorf("dedup stats: %w", err)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return fmt.Errorf("dedup stats: asking the running server: %w", err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(io.LimitReader(resp.Body, 512))
		return fmt.Errorf("dedup stats: the running server answered %s: %s", resp.Status, oneLine(string(b)))
	}
	var st dedup.Stats
	if err := json.NewDecoder(resp.Body).Decode(&st); err != nil {
		return fmt.Errorf("dedup stats: %w", err)
	}
	return printStats(stdout, &st, asJSON)
}

// statsHandler serves the engine's statistics on the debug listener.
func statsHandler(e *dedup.Engine) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		st, err := e.Stats(r.Context())
		if err != nil {
			http.Error(w, err.Error(), http.StatusInternalServerError)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		json.NewEncoder(w).Encode(st)
	})
}

func printStats(w io.Writer, st *dedup.Stats, asJSON bool) error {
	if asJSON {
		return json.NewEncoder(w).Encode(st)
	}
	fmt.Fprintf(w, "logical bytes      %d (%s)\n", st.LogicalBytes, webui.HumanBytes(st.LogicalBytes))
	fmt.Fprintf(w, "stored bytes       %d (%s): intact %s, files %s, recipes %s\n", st.StoredBytes.Total, webui.HumanBytes(st.StoredBytes.Total),
		webui.HumanBytes(st.StoredBytes.Intact), webui.HumanBytes(st.StoredBytes.Files), webui.HumanBytes(st.StoredBytes.Recipes))
	fmt.Fprintf(w, "ratio              %.2fx (file level alone %.2fx)\n", st.Ratio, st.FileLevelRatio)
	fmt.Fprintf(w, "layers             intact %d, deduplicated %d, irreproducible %d, pending %d\n",
		st.Layers["intact"], st.Layers["deduplicated"], st.Layers["irreproducible"], st.Layers["pending"])
	if st.DeferredImages > 0 {
		fmt.Fprintf(w, "deferred           %d pushed images wait to be recorded (the metadata store was down)\n", st.DeferredImages)
	}
	for _, why := range slices.Sorted(maps.Keys(st.IntactWhy)) {
		lb := st.IntactWhy[why]
		fmt.Fprintf(w, "  intact: %-10s %d layers, %s\n", why, lb.Layers, webui.HumanBytes(lb.Bytes))
	}
	fmt.Fprintf(w, "files              %d unique (%s, stored %s), %d shared\n", st.Files.Unique, webui.HumanBytes(st.Files.Bytes),
		webui.HumanBytes(st.Files.StoredBytes), st.Files.Shared)
	fmt.Fprintf(w, "packs              %d: live frames %s, dead frames %s, indexes %s; %d files stored one object each\n",
		st.Files.Packs, webui.HumanBytes(st.Files.LiveBytes), webui.HumanBytes(st.Files.DeadBytes), webui.HumanBytes(st.Files.IndexBytes), st.Files.Objects)
	if st.MetadataBytes >= 0 {
		per := ""
		if st.Files.Unique > 0 {
			per = fmt.Sprintf(" (%d bytes per unique file)", st.MetadataBytes/st.Files.Unique)
		}
		fmt.Fprintf(w, "metadata           %s%s\n", webui.HumanBytes(st.MetadataBytes), per)
	}
	encs := slices.Sorted(maps.Keys(st.Encoders))
	for _, k := range encs {
		fmt.Fprintf(w, "encoder            %-22s %d\n", k, st.Encoders[k])
	}
	return nil
}

// openDedup builds the engine serve uses: restores always (layers
// deduplicated earlier must stay pullable whatever the mode), background
// work (Schedule) when a metadata store is open.
func openDedup(ctx context.Context, cfg *config.Config, d driver.Driver, log *slog.Logger, m dedup.Metrics, tracer trace.Tracer, events dedup.LayerEvents) (*dedup.Engine, meta.Store, error) {
	store, err := openMeta(ctx, cfg, 5*time.Second, log)
	if errors.Is(err, meta.ErrLocked) {
		return nil, nil, errors.New("dedup: the metadata store is in use by another cairn process (cairn dedup run, or a second serve on the same root)")
	}
	if err != nil {
		return nil, nil, err
	}
	if store == nil && !cfg.Storage.Dedup.Active() {
		// Dedup is off, and its bolt file is gone: if dedup ever ran on
		// this storage, the layers it deduplicated are still served, and
		// their files are located through a metadata store rebuilt from
		// storage.
		if id, err := dedup.StoreID(ctx, d, false); err == nil && id != "" {
			withMeta := *cfg
			withMeta.Storage.Dedup.Mode = string(dedup.ModeIndex)
			if store, err = openMeta(ctx, &withMeta, 5*time.Second, log); err != nil {
				return nil, nil, err
			}
		}
	}
	opts := dedupOptions(cfg)
	opts.Tracer = tracer
	opts.Events = events
	if store == nil {
		// Dedup never ran here: nothing to rebuild or spool, so no cache
		// directories in the root (a recipe found anyway is still served).
		opts.PreconstructDir, opts.TempDir = "", ""
	}
	e, err := dedup.New(d, store, opts, log, m)
	if err != nil {
		if store != nil {
			store.Close()
		}
		return nil, nil, err
	}
	return e, store, nil
}

// reindexTarget is what `cairn dedup reindex` needs of the metadata store:
// what a reindex writes, and Close to move a foreign bolt file aside.
type reindexTarget interface {
	dedup.ReindexStore
	io.Closer
}

// ensureIndexed rebuilds the dedup metadata from storage when it is not a
// complete index of it, before a command (cmd, in messages) that trusts
// it. One of another storage is left for the operator: a command that
// would write to it (writes) fails, GC and scrub go on (GC then keeps
// every pack and file). On storage dedup never recorded an identity for
// (its first use, or one by `cairn dedup run` alone before this check) the
// rebuild is the identity being recorded: nothing is reported lost.
func ensureIndexed(ctx context.Context, cmd string, d driver.Driver, store dedup.ReindexStore, writes, quiet bool, stderr io.Writer) error {
	st, err := dedup.CheckIndex(ctx, d, store)
	if err != nil {
		return fmt.Errorf("%s: dedup metadata: %s", cmd, oneLine(err.Error()))
	}
	if st.Foreign() && writes {
		return fmt.Errorf("%s: %w: check storage.dedup.metadata and the storage section of the configuration, or take it over with cairn dedup reindex --force", cmd, st.ForeignError())
	}
	if st.Complete() || st.Foreign() {
		return nil
	}
	report := !quiet && st.StoreID != ""
	var opts dedup.ReindexOptions
	finish := func() {}
	if report {
		fmt.Fprintf(stderr, "%s: the dedup metadata is not a complete index of this storage: rebuilding it from recipes and packs first\n", cmd)
		finish = reindexProgress(cmd, stderr, &opts)
	}
	rs, err := dedup.Reindex(ctx, d, store, opts)
	finish()
	if err != nil {
		return fmt.Errorf("%s: rebuilding the dedup metadata: %s", cmd, oneLine(err.Error()))
	}
	if report {
		fmt.Fprintf(stderr, "%s: dedup metadata rebuilt: %d recipes, %d packs, %d files located in %.2fs (complete: %v)\n", cmd, rs.Recipes, rs.Packs, rs.Placed, rs.Seconds, rs.Complete)
	}
	return nil
}

// reindexProgress shows the progress of the reindex opts is for on stderr
// as cmd's: a line redrawn on a terminal, one every 10 s otherwise. The
// func it returns ends the line.
func reindexProgress(cmd string, stderr io.Writer, opts *dedup.ReindexOptions) (finish func()) {
	p := newProgressLine(stderr)
	opts.ProgressInterval = p.interval
	opts.Progress = func(r dedup.ReindexStats) {
		if p.tty {
			p.draw("%s: %s  %d recipes  %d packs  %d files located  %d errors  %.0fs", cmd, r.Phase, r.Recipes, r.Packs, r.Placed, r.Errors, r.Seconds)
		} else if r.Phase != "done" {
			fmt.Fprintf(stderr, "%s: %s: %d recipes, %d packs read, %d files located, %d errors, %.0fs\n", cmd, r.Phase, r.Recipes, r.Packs, r.Placed, r.Errors, r.Seconds)
		}
	}
	return p.finish
}

// reindex runs `cairn dedup reindex`.
// metaFile is the bolt store's path ("" with Redis).
func reindex(ctx context.Context, d driver.Driver, store reindexTarget, metaFile string, force, asJSON, quiet bool, stdout, stderr io.Writer) error {
	st, err := dedup.CheckIndex(ctx, d, store)
	if err != nil {
		return fmt.Errorf("dedup reindex: %s", oneLine(err.Error()))
	}
	if st.Foreign() && !force {
		return fmt.Errorf("dedup reindex: %w: check the configuration, or pass --force", st.ForeignError())
	}
	if st.Foreign() {
		// Its locations name packs of the other storage: a reindex adds
		// to an index, so it must start from an empty one.
		if _, ok := store.(*bolt.Store); !ok || metaFile == "" {
			return errors.New("dedup reindex: --force on Redis: the keys of another storage must go first; use another storage.dedup.metadata.redis.prefix, or delete the old prefix's keys")
		}
		if err := store.Close(); err != nil {
			return fmt.Errorf("dedup reindex: %w", err)
		}
		moved := metaFile + ".foreign-" + time.Now().UTC().Format("20060102T150405Z")
		if err := os.Rename(metaFile, moved); err != nil {
			return fmt.Errorf("dedup reindex: moving the metadata store aside: %w", err)
		}
		fresh, err := bolt.OpenWith(metaFile, bolt.Options{})
		if err != nil {
			return fmt.Errorf("dedup reindex: %w", err)
		}
		defer fresh.Close()
		fmt.Fprintf(stderr, "dedup reindex: the old metadata store was moved to %s\n", moved)
		store = fresh
	}
	opts := dedup.ReindexOptions{}
	finish := func() {}
	if !quiet {
		finish = reindexProgress("dedup reindex", stderr, &opts)
	}
	rs, err := dedup.Reindex(ctx, d, store, opts)
	finish()
	if rs != nil {
		if asJSON {
			if jerr := json.NewEncoder(stdout).Encode(rs); jerr != nil {
				return jerr
			}
		} else {
			fmt.Fprintf(stdout, "dedup reindex: %d recipes (%d deduplicated, %d intact, %d known), %d packs (%d entries), %d files located (%s) in %.2fs\n",
				rs.Recipes, rs.Deduplicated, rs.Intact, rs.Known, rs.Packs, rs.PackFiles, rs.Placed, webui.HumanBytes(rs.PlacedBytes), rs.Seconds)
			if rs.Damaged > 0 {
				fmt.Fprintf(stdout, "  %d damaged recipes or packs skipped (cairn scrub tells more)\n", rs.Damaged)
			}
			for _, ex := range rs.Examples {
				fmt.Fprintf(stdout, "  %s\n", oneLine(ex))
			}
		}
	}
	if err != nil {
		return fmt.Errorf("dedup reindex: %s", oneLine(err.Error()))
	}
	if !rs.Complete {
		return fmt.Errorf("dedup reindex: %d recipes or packs could not be read; the index stays incomplete (GC keeps every pack and file): rerun", rs.Errors)
	}
	return nil
}
