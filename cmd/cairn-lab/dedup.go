package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"maps"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/cairn-registry/cairn/internal/bench/dataset"
	"github.com/cairn-registry/cairn/internal/bench/dedupbench"
)

const dedupUsage = `usage: cairn-lab dedup [--profile small|full] [--parts restore,storage,latency,prefetch[,restarts]]
                       [--cache DIR] [--work DIR] [--cairn-bin PATH] [--repeat N] [--procs 1,2]
                       [--pull-once N] [--repull N] [--rounds N] [--replays N] [--delay 50ms-200ms]
                       [--preconstruct-size SIZE] [--prefetch-size SIZE] [--parses] [--json]

Builds images from Debian packages (apt-get download; debs cached in --cache),
pushes them to a cairn it starts, runs cairn dedup and prints: (a) storage
ratios, (b) layers reproduced, (c) restore MB/s per producer against the
encoder alone and an intact read, under each GOMAXPROCS of --procs,
(d) layer GET latency intact / deduplicated cold / preconstruct hit, and
(e) cache hit ratios for pull-once and always-repull clients, in modes full
(preconstruct cache) and index (prefetch cache). Part restarts (research,
only when named) tries every block boundary of the compress/gzip layers as a
restart point for parallel restores.`

// runDedup runs `cairn-lab dedup [flags]`. Errors are one line;
// mistakes in the command line wrap errUsage.
func runDedup(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("cairn-lab dedup", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	profile := fs.String("profile", "small", "dataset size: small (5 images, a few MB of debs) or full (40 images, ~300 MB of debs)")
	parts := fs.String("parts", strings.Join(dedupbench.AllParts(), ","), "comma-separated parts to measure")
	cache := fs.String("cache", "", "deb cache `DIR` (default "+dataset.DefaultCacheDir()+")")
	work := fs.String("work", "", "work `DIR` for the built dataset and the registry (default <cache>/work-<profile>)")
	bin := fs.String("cairn-bin", "bin/cairn", "cairn binary to run (go build -o bin/cairn ./cmd/cairn)")
	repeat := fs.Int("repeat", 0, "timed restores per layer, best kept (0: 3 for small, 1 for full)")
	procs := fs.String("procs", "", "comma-separated GOMAXPROCS `VALUES` to measure the restore part under, one after the other (default 1 and the current GOMAXPROCS)")
	pullOnce := fs.Int("pull-once", 6, "pull-once clients in the (e) workload")
	repull := fs.Int("repull", 4, "always-repull clients in the (e) workload")
	rounds := fs.Int("rounds", 3, "rounds of the (e) workload")
	replays := fs.Int("replays", 1, "replays of the (e) workload per mode and predictor setting, off and on in turn")
	delay := fs.String("delay", "50ms-200ms", "`MIN-MAX` pause between a client's manifest GET and its layer GETs in (e)")
	preSize := fs.String("preconstruct-size", "2GiB", "preconstruct cache size")
	parses := fs.Bool("parses", false, "run the registry with storage.dedup.packs.parses on (restores follow stored parses)")
	preFetch := fs.String("prefetch-size", "256MiB", "prefetch cache size in (e)")
	asJSON := fs.Bool("json", false, "print one JSON object instead of tables")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			fmt.Fprintln(stdout, dedupUsage)
			fs.SetOutput(stdout)
			fs.PrintDefaults()
			return nil
		}
		return fmt.Errorf("%w: dedup: %s", errUsage, strings.Join(strings.Fields(err.Error()), " "))
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("%w: dedup: unexpected argument %q", errUsage, fs.Arg(0))
	}
	p := dataset.Profile(*profile)
	if p != dataset.ProfileSmall && p != dataset.ProfileFull {
		return fmt.Errorf("%w: dedup: --profile %q: want small or full", errUsage, *profile)
	}
	var sel []string
	for _, s := range strings.Split(*parts, ",") {
		s = strings.TrimSpace(s)
		if s == "" {
			continue
		}
		if known := append(dedupbench.AllParts(), dedupbench.PartRestarts); !slices.Contains(known, s) {
			return fmt.Errorf("%w: dedup: --parts: unknown part %q (want %s)", errUsage, s, strings.Join(known, ", "))
		}
		sel = append(sel, s)
	}
	if len(sel) == 0 {
		return fmt.Errorf("%w: dedup: --parts: no parts", errUsage)
	}
	if *repeat < 0 || *pullOnce < 1 || *repull < 1 || *rounds < 1 || *replays < 1 {
		return fmt.Errorf("%w: dedup: --repeat must be >= 0, --pull-once, --repull, --rounds and --replays >= 1", errUsage)
	}
	var procList []int
	for _, f := range strings.Split(*procs, ",") {
		if f = strings.TrimSpace(f); f == "" {
			continue
		}
		n, err := strconv.Atoi(f)
		if err != nil || n < 1 {
			return fmt.Errorf("%w: dedup: --procs %q: want GOMAXPROCS values >= 1 such as 1,2", errUsage, *procs)
		}
		procList = append(procList, n)
	}
	lo, hi, ok := strings.Cut(*delay, "-")
	dmin, err1 := time.ParseDuration(strings.TrimSpace(lo))
	dmax, err2 := time.ParseDuration(strings.TrimSpace(hi))
	if !ok || err1 != nil || err2 != nil || dmin <= 0 || dmax < dmin {
		return fmt.Errorf("%w: dedup: --delay %q: want MIN-MAX durations such as 50ms-200ms", errUsage, *delay)
	}
	needsBin := slices.ContainsFunc(sel, func(p string) bool { return p != dedupbench.PartRestore && p != dedupbench.PartRestarts })
	if _, err := os.Stat(*bin); needsBin && err != nil {
		return fmt.Errorf("%w: dedup: --cairn-bin %s: %v (build it: go build -o bin/cairn ./cmd/cairn)", errUsage, *bin, err)
	}
	unlock, err := lockWork(cache, work, p)
	if err != nil {
		return fmt.Errorf("dedup: %w", err)
	}
	defer unlock()
	res, err := dedupbench.Run(ctx, dedupbench.Options{
		Profile: p, CacheDir: *cache, WorkDir: *work, CairnBin: *bin, Parts: sel, Parses: *parses,
		Repeat: *repeat, Procs: procList, PullOnce: *pullOnce, Repull: *repull, Rounds: *rounds, Replays: *replays, DelayMin: dmin, DelayMax: dmax,
		PreconstructSize: *preSize, PrefetchSize: *preFetch, Log: stderr,
	})
	if err != nil {
		return err
	}
	if *asJSON {
		err = dedupbench.WriteJSON(stdout, res)
	} else {
		err = dedupbench.WriteTable(stdout, res)
	}
	if err != nil {
		return err
	}
	if len(res.Errors) > 0 {
		failed := slices.Sorted(maps.Keys(res.Errors))
		return fmt.Errorf("dedup: %d of %d parts not measured (%s)", len(failed), len(sel), strings.Join(failed, ", "))
	}
	return nil
}
