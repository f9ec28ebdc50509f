// Command cairn is the cairn container registry: `cairn serve` runs it,
// `cairn version` tells which build this is, `cairn bench` measures it.
// This file only wires the CLI to the internal packages.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"
)

const usage = `usage: cairn <command> [flags]

commands:
  serve     run the registry (default 127.0.0.1:5000, storage under ./cairn-data) (cairn serve -h)
  config    check a configuration file and print what cairn runs with (cairn config check -h)
  gc        delete what no manifest references (cairn gc -h)
  dedup     deduplicate stored layers, or show what dedup saves (cairn dedup -h)
  scrub     check every blob, dedup file, recipe and link; repair (cairn scrub -h)
  robot     create, list and revoke robot accounts (API keys) (cairn robot -h)
  replicate run one pass of the replication targets (cairn replicate -h)
  bench     run a benchmark (cairn bench registry -h)
  version   print the version (cairn version -h)

Every command that takes --config reads distribution's config.yml keys, then
the REGISTRY_* environment variables; an unknown key stops it.
`

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	code := run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}

// errUsage marks errors in the command line itself (exit status 2).
var errUsage = errors.New("usage")

// exitError is an error with its own exit status, for commands whose
// statuses mean more than failed or not (cairn scrub: 1 findings, 2 errors).
type exitError struct {
	code int
	err  error
}

func (e exitError) Error() string { return e.err.Error() }
func (e exitError) Unwrap() error { return e.err }

func run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		fmt.Fprint(stderr, usage)
		return 2
	}
	var err error
	switch args[0] {
	case "serve":
		err = runServe(ctx, args[1:], stdout, stderr)
	case "config":
		err = runConfig(ctx, args[1:], stdout, stderr)
	case "bench":
		err = runBench(ctx, args[1:], stdout, stderr)
	case "gc":
		err = runGC(ctx, args[1:], stdout, stderr)
	case "dedup":
		err = runDedup(ctx, args[1:], stdout, stderr)
	case "scrub":
		err = runScrub(ctx, args[1:], stdout, stderr)
	case "robot":
		err = runRobot(ctx, args[1:], stdout, stderr)
	case "replicate":
		err = runReplicate(ctx, args[1:], stdout, stderr)
	case "version", "--version", "-v":
		err = runVersion(args[1:], stdout)
	case "help", "-h", "--help":
		fmt.Fprint(stdout, usage)
	default:
		err = fmt.Errorf("%w: unknown command %q (see cairn help)", errUsage, args[0])
	}
	var ee exitError
	switch {
	case err == nil, errors.Is(err, flag.ErrHelp):
		return 0
	case errors.As(err, &ee):
		fmt.Fprintf(stderr, "cairn: %v\n", ee.err)
		return ee.code
	case errors.Is(err, errUsage):
		fmt.Fprintf(stderr, "cairn: %v\n", err)
		return 2
	default:
		fmt.Fprintf(stderr, "cairn: %v\n", err)
		return 1
	}
}

// parseFlags parses a command's flags. -h prints usage and the flags'
// defaults to stdout and reports done; a bad flag or a stray argument is a
// one-line error wrapping errUsage, naming the command.
func parseFlags(fs *flag.FlagSet, args []string, name, usage string, stdout io.Writer) (done bool, err error) {
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			fmt.Fprintln(stdout, usage)
			fs.SetOutput(stdout)
			fs.PrintDefaults()
			return true, nil
		}
		return false, fmt.Errorf("%w: %s: %s", errUsage, name, oneLine(err.Error()))
	}
	if fs.NArg() > 0 {
		return false, fmt.Errorf("%w: %s: unexpected argument %q", errUsage, name, fs.Arg(0))
	}
	return false, nil
}
