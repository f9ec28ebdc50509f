package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"os"

	"github.com/cairn-registry/cairn/internal/bench"
)

const benchUsage = `usage: cairn bench registry [--url URL] [--sizes 1MiB,64MiB,512MiB] [--repeat N] [--chunk-size 8MiB] [--flush=false]
                            [--manifest-requests N] [--concurrency C] [--json]
(dedup on images built from Debian packages: go run ./cmd/cairn-lab dedup)

Measures the registry at --url (without it, starts this binary's cairn serve
on a free port over a temporary directory, removed after): blob push and
pull MB/s for each size, manifest GET requests/s. Reads no configuration
file (the local server runs with the defaults).`

// runBench runs `cairn bench <what> [flags]`. Errors are one line; mistakes
// in the command line wrap errUsage.
func runBench(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	if len(args) == 0 {
		return fmt.Errorf("%w: bench: missing subcommand (want: registry)", errUsage)
	}
	switch args[0] {
	case "registry":
		return runBenchRegistry(ctx, args[1:], stdout, stderr)
	case "dedup":
		return fmt.Errorf("%w: bench dedup moved out of the production binary: go run ./cmd/cairn-lab dedup", errUsage)
	case "-h", "-help", "--help", "help":
		fmt.Fprintln(stdout, benchUsage)
		return nil
	default:
		return fmt.Errorf("%w: bench: unknown subcommand %q (want: registry)", errUsage, args[0])
	}
}

func runBenchRegistry(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("cairn bench registry", flag.ContinueOnError)
	// Errors are returned as one line; usage is printed only on -h.
	fs.SetOutput(io.Discard)
	url := fs.String("url", "", "registry base `URL`; empty starts a local cairn serve on a free port")
	sizes := fs.String("sizes", "1MiB,64MiB,512MiB", "comma-separated blob sizes")
	repeat := fs.Int("repeat", 0, "timed runs per blob size and operation (0: 3, or 1 for sizes >= 256MiB)")
	chunk := fs.String("chunk-size", "8MiB", "PATCH size of the chunked-PATCH push")
	flush := fs.Bool("flush", true, "sync(2) before each timed push (for a registry on this machine)")
	requests := fs.Int("manifest-requests", 20000, "manifest GETs (and HEADs) in total")
	conc := fs.Int("concurrency", 8, "concurrent manifest clients")
	asJSON := fs.Bool("json", false, "print one JSON object instead of tables")
	if done, err := parseFlags(fs, args, "bench registry", benchUsage, stdout); done || err != nil {
		return err
	}
	sz, err := bench.ParseSizes(*sizes)
	if err != nil {
		return fmt.Errorf("%w: bench registry: --sizes: %v", errUsage, err)
	}
	chunkSize, err := bench.ParseSize(*chunk)
	if err != nil || chunkSize <= 0 {
		return fmt.Errorf("%w: bench registry: --chunk-size: want a size such as 8MiB", errUsage)
	}
	if *repeat < 0 || *requests < 1 || *conc < 1 {
		return fmt.Errorf("%w: bench registry: --repeat must be >= 0, --manifest-requests and --concurrency >= 1", errUsage)
	}

	opts := bench.Options{URL: *url, Sizes: sz, Repeat: *repeat, ChunkSize: chunkSize, Flush: *flush, ManifestRequests: *requests, Concurrency: *conc}
	var local *bench.LocalServer
	if opts.URL == "" {
		bin, err := os.Executable()
		if err != nil {
			return fmt.Errorf("bench registry: find own binary: %w", err)
		}
		if local, err = bench.StartServer(ctx, bin); err != nil {
			return err
		}
		opts.URL = local.URL
		fmt.Fprintf(stderr, "started %s serve at %s\n", bin, local.URL)
	}
	res, runErr := bench.RunRegistry(ctx, opts, stderr)
	if local != nil {
		res.LocalServer = true
		if err := local.Stop(); err != nil && runErr == nil {
			runErr = err
		}
	}
	if runErr != nil {
		return runErr
	}
	if *asJSON {
		return bench.WriteJSON(stdout, res)
	}
	return bench.WriteTable(stdout, res)
}
