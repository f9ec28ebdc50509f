package main

import (
	"compress/flate"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"runtime"
	"runtime/pprof"
	"strings"

	kflate "github.com/klauspost/compress/flate"

	"github.com/cairn-registry/cairn/internal/bench/dataset"
	"github.com/cairn-registry/cairn/internal/bench/parsebench"
)

const parseUsage = `usage: cairn-lab parse [--profile small|full] [--cache DIR] [--work DIR] [--procs N] [--json]

Builds the Debian dataset (as cairn-lab dedup does, sharing its work dir)
and measures, for every gzip layer grouped by producer and level, whether
the DEFLATE parse (literals and matches) covering a file is a property of
the file: (a) agreement between layers sharing the file, (b) agreement with
the file compressed on its own at the producer's settings, with the size of
the exception list a layer would need, and (c) block boundaries and the
size of dynamic block headers.`

// runParse runs `cairn-lab parse [flags]`.
func runParse(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("cairn-lab parse", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	profile := fs.String("profile", "small", "dataset size: small or full")
	cache := fs.String("cache", "", "deb cache `DIR` (default "+dataset.DefaultCacheDir()+")")
	work := fs.String("work", "", "work `DIR`; the dataset is built in DIR/dataset (default <cache>/work-<profile>)")
	procs := fs.Int("procs", 1, "GOMAXPROCS while measuring (the dataset build uses every core)")
	asJSON := fs.Bool("json", false, "print one JSON object instead of tables")
	plan := fs.Bool("plan", false, "instead, plan each compress/flate level-6 layer's rebuild from its files' own parses and searched stretches, prove it and time it")
	cross := fs.Bool("cross", false, "with --plan, also copy the tokens an earlier layer had for the same tar entry or file")
	cpuProfile := fs.String("cpuprofile", "", "write a CPU profile of the measurement to `FILE`")
	storage := fs.Bool("storage", false, "instead, price keeping each unique file of the level-6 layers as its own raw DEFLATE against its zstd frame")
	minCopy := fs.Int64("min-copy", 4<<10, "with --plan, the least `BYTES` a copied stretch covers")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			fmt.Fprintln(stdout, parseUsage)
			fs.SetOutput(stdout)
			fs.PrintDefaults()
			return nil
		}
		return fmt.Errorf("%w: parse: %s", errUsage, strings.Join(strings.Fields(err.Error()), " "))
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("%w: parse: unexpected argument %q", errUsage, fs.Arg(0))
	}
	p := dataset.Profile(*profile)
	if p != dataset.ProfileSmall && p != dataset.ProfileFull {
		return fmt.Errorf("%w: parse: --profile %q: want small or full", errUsage, *profile)
	}
	if *procs < 1 {
		return fmt.Errorf("%w: parse: --procs must be >= 1", errUsage)
	}
	unlock, err := lockWork(cache, work, p)
	if err != nil {
		return fmt.Errorf("parse: %w", err)
	}
	defer unlock()
	ds, err := dataset.Build(ctx, dataset.Options{Profile: p, CacheDir: *cache, WorkDir: filepath.Join(*work, "dataset"), Log: stderr})
	if err != nil {
		return fmt.Errorf("parse: %w", err)
	}
	var layers []parsebench.Layer
	for _, l := range ds.Layers {
		group, enc, ok := producer(l.Compression)
		if !ok {
			continue
		}
		layers = append(layers, parsebench.Layer{
			Name: l.Description, Group: group, Encoder: enc,
			Open: func() (io.ReadCloser, error) { return l.Open() },
		})
	}
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(*procs))
	stop, err := startCPUProfile(*cpuProfile)
	if err != nil {
		return fmt.Errorf("parse: %w", err)
	}
	defer stop()
	if *storage {
		r, err := parsebench.MeasureStorage(ctx, level6(layers), stderr)
		if err != nil {
			return fmt.Errorf("parse: %w", err)
		}
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		return enc.Encode(r)
	}
	if *plan {
		return runPlan(ctx, layers, parsebench.PlanOptions{Log: stderr, MinCopy: *minCopy, CrossLayer: *cross}, stdout)
	}
	res, err := parsebench.Measure(ctx, layers, parsebench.Options{Log: stderr})
	if err != nil {
		return fmt.Errorf("parse: %w", err)
	}
	if *asJSON {
		return parsebench.WriteJSON(stdout, res)
	}
	return parsebench.WriteText(stdout, res)
}

// runPlan measures rebuild plans of the level-6 layers (parsebench.MeasurePlan).
func runPlan(ctx context.Context, layers []parsebench.Layer, opts parsebench.PlanOptions, stdout io.Writer) error {
	r, err := parsebench.MeasurePlan(ctx, level6(layers), opts)
	if err != nil {
		return fmt.Errorf("parse: %w", err)
	}
	enc := json.NewEncoder(stdout)
	enc.SetIndent("", "  ")
	return enc.Encode(r)
}

// level6 returns the layers compress/flate wrote at level 6.
func level6(layers []parsebench.Layer) []parsebench.Layer {
	var out []parsebench.Layer
	for _, l := range layers {
		if l.Group == groupStdlib6 {
			out = append(out, l)
		}
	}
	return out
}

// groupStdlib6 is the group of layers compress/flate wrote at level 6.
const groupStdlib6 = "compress/flate 6"

// producer names the group of a gzip layer and the raw DEFLATE encoder
// its producer compresses with; ok is false for layers that are not gzip.
func producer(c dataset.Compression) (group string, enc parsebench.Encoder, ok bool) {
	stdlib := func(level int) parsebench.Encoder {
		return func(w io.Writer) (io.WriteCloser, error) { return flate.NewWriter(w, level) }
	}
	switch c {
	case dataset.GzipStdlib:
		return groupStdlib6, stdlib(flate.DefaultCompression), true
	case dataset.GzipStdlibBestSpeed:
		return "compress/flate 1", stdlib(flate.BestSpeed), true
	case dataset.GzipPgzip:
		// pgzip compresses 1 MiB blocks with klauspost's flate at its
		// default level (5), each primed with the previous block's last
		// 16 KiB.
		return "pgzip (klauspost 5)", func(w io.Writer) (io.WriteCloser, error) { return kflate.NewWriter(w, 5) }, true
	case dataset.GzipGNU:
		// No Go encoder reproduces GNU gzip: no stored parses.
		return "GNU gzip 6", nil, true
	}
	return "", nil, false
}

// startCPUProfile profiles the process's CPU into a new file at path until
// stop is called; with path empty it does nothing.
func startCPUProfile(path string) (stop func(), err error) {
	if path == "" {
		return func() {}, nil
	}
	f, err := os.Create(path)
	if err != nil {
		return nil, err
	}
	if err := pprof.StartCPUProfile(f); err != nil {
		f.Close()
		return nil, err
	}
	return func() {
		pprof.StopCPUProfile()
		f.Close()
	}, nil
}
