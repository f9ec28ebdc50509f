// Command cairn-lab runs cairn's laboratory work that does not belong in the
// production binary: benchmarks over datasets it builds itself (running
// apt-get and dpkg-deb), such as dedup on images made of Debian packages.
//
//	go run ./cmd/cairn-lab dedup [--profile small|full] ...
//	go run ./cmd/cairn-lab parse [--profile small|full] ...
//	go run ./cmd/cairn-lab follow [--profile small|full] ...   (rebuild by following, issue 27)
//	go run ./cmd/cairn-lab image --oci DIR | --push REF   (cairn's OCI image)
package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"
)

const usage = `usage: cairn-lab dedup|parse|follow|image [flags]   (cairn-lab dedup -h, cairn-lab parse -h, cairn-lab follow -h, cairn-lab image -h)`

// errUsage marks errors in the command line itself (exit status 2).
var errUsage = errors.New("usage")

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	switch {
	case err == nil:
	case errors.Is(err, errUsage):
		fmt.Fprintln(os.Stderr, "cairn-lab:", err)
		os.Exit(2)
	default:
		fmt.Fprintln(os.Stderr, "cairn-lab:", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	if len(args) == 0 {
		return fmt.Errorf("%w: missing command (%s)", errUsage, usage)
	}
	switch args[0] {
	case "dedup":
		return runDedup(ctx, args[1:], stdout, stderr)
	case "parse":
		return runParse(ctx, args[1:], stdout, stderr)
	case "follow":
		return runFollow(ctx, args[1:], stdout, stderr)
	case "image":
		return runImage(ctx, args[1:], stdout, stderr)
	case "-h", "-help", "--help", "help":
		fmt.Fprintln(stdout, usage)
		return nil
	}
	return fmt.Errorf("%w: unknown command %q (%s)", errUsage, args[0], usage)
}
