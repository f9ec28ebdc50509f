package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"

	"github.com/cairn-registry/cairn/internal/config"
)

const configUsage = `usage: cairn config check [--root DIR] [FILE]

Loads the configuration as cairn serve would (FILE, then the REGISTRY_*
environment variables, then --root), checks it, and prints the effective
configuration: every key with the value cairn runs with, defaults included,
secrets masked (passwords, secret and account keys, tokens, inline
credentials, Authorization headers, passwords in URLs). Warnings go to
stderr. The files it names are read as serve reads them at start-up:
auth.htpasswd.path, auth.token.rootcertbundle and jwks, auth.ldap.ca and
bindpasswordfile, auth.oidc.clientsecretfile, auth.robots.path, http.tls
certificate, key and clientcas. Storage, Redis, LDAP servers, the OIDC
provider and upstreams are not contacted.

Exit status: 0 the configuration is good; 1 it is not (one line naming the
key and FILE:LINE); 2 bad usage.

Keys: all of them (see README, Configuration).`

// runConfig runs `cairn config <subcommand>`.
func runConfig(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	if len(args) == 0 {
		return fmt.Errorf("%w: config: missing subcommand (want: check)", errUsage)
	}
	switch args[0] {
	case "check":
		return runConfigCheck(ctx, args[1:], stdout, stderr)
	case "-h", "--help", "help":
		fmt.Fprintln(stdout, configUsage)
		return nil
	default:
		return fmt.Errorf("%w: config: unknown subcommand %q (want: check)", errUsage, args[0])
	}
}

// runConfigCheck runs `cairn config check [FILE]`.
func runConfigCheck(_ context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("cairn config check", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	root := fs.String("root", "", "filesystem storage root `directory` (overrides the storage section, as in serve)")
	// FILE may come before or after the flags.
	var file string
	if len(args) > 0 && len(args[0]) > 0 && args[0][0] != '-' {
		file, args = args[0], args[1:]
	}
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			fmt.Fprintln(stdout, configUsage)
			fs.SetOutput(stdout)
			fs.PrintDefaults()
			return nil
		}
		return fmt.Errorf("%w: config check: %s", errUsage, oneLine(err.Error()))
	}
	if fs.NArg() > 0 {
		if file != "" || fs.NArg() > 1 {
			return fmt.Errorf("%w: config check: unexpected argument %q", errUsage, fs.Arg(fs.NArg()-1))
		}
		file = fs.Arg(0)
	}
	return checkConfig(file, *root, nil, stdout, stderr)
}

// checkConfig loads and checks the configuration as serve does before it
// opens anything (cairn config check, cairn serve --check) and prints the
// effective configuration to stdout, warnings to stderr.
func checkConfig(path, root string, edit func(*config.Config), stdout, stderr io.Writer) error {
	cfg, warnings, err := loadConfig(path, root, edit)
	for _, w := range warnings {
		fmt.Fprintf(stderr, "cairn: warning: config: %s\n", w)
	}
	if err != nil {
		return err
	}
	// The files serve reads before it listens: a missing htpasswd file or
	// a key that does not match its certificate fails here, not at 3 a.m.
	if _, err := newAuthorizer(cfg.Auth); err != nil {
		return err
	}
	if _, err := newTLSConfig(cfg.HTTP.TLS); err != nil {
		return err
	}
	out, err := cfg.Effective()
	if err != nil {
		return err
	}
	if path != "" {
		fmt.Fprintf(stdout, "# %s: good; the configuration cairn runs with (secrets masked)\n", path)
	} else {
		fmt.Fprintln(stdout, "# no file: the configuration cairn runs with (secrets masked)")
	}
	_, err = stdout.Write(out)
	return err
}
