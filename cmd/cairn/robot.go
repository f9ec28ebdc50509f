package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/cairn-registry/cairn/internal/auth"
	"github.com/cairn-registry/cairn/internal/config"
	"github.com/cairn-registry/cairn/internal/notify"
)

const robotUsage = `usage: cairn robot create NAME --scope PATTERN:ACTIONS [--scope ...] [--expires 90d|DURATION|never]
       cairn robot list
       cairn robot revoke NAME
  each with [--config FILE] [--root DIR] [--file PATH]

Robot accounts are API keys for machines: named, scoped to repository
patterns and actions, with an expiry. create prints the key once; use it
as the password of the user robot$NAME (docker login -u 'robot$NAME'),
with Basic auth or through cairn's token service. The file keeps only a
hash of each key. revoke removes the key: a running cairn serve refuses it,
and the tokens issued for it, from the next request on.

--scope gives ACTIONS (pull, push, delete, * for all three, comma-
separated) in the repositories PATTERN matches ("*" within a path segment,
"**" across): --scope 'team/**:pull,push'. The robot may also do what
access control lets anyone do.

The file is auth.robots.path, by default cairn-robots.json under the
filesystem root (--root, or storage.filesystem.rootdirectory); --file
names it directly. Creating and revoking write an audit line to stderr
and, with auth.audit.events, send events robot.create and robot.revoke.`

// runRobot runs `cairn robot <subcommand>`.
func runRobot(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	if len(args) == 0 {
		return fmt.Errorf("%w: robot: missing subcommand (want: create, list, revoke)", errUsage)
	}
	sub, args := args[0], args[1:]
	if sub == "-h" || sub == "--help" || sub == "help" {
		fmt.Fprintln(stdout, robotUsage)
		return nil
	}
	if sub != "create" && sub != "list" && sub != "revoke" {
		return fmt.Errorf("%w: robot: unknown subcommand %q (want: create, list, revoke)", errUsage, sub)
	}
	fs := flag.NewFlagSet("cairn robot "+sub, flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	configPath := fs.String("config", "", "configuration `file` (auth.robots.path, notifications)")
	root := fs.String("root", "", "filesystem storage root `directory` (the robot file's default place)")
	file := fs.String("file", "", "the robot `file` itself, whatever the configuration says")
	var scopes []string
	expires := "90d"
	if sub == "create" {
		fs.Func("scope", "`PATTERN:ACTIONS` the key may do (repeatable)", func(s string) error {
			scopes = append(scopes, s)
			return nil
		})
		fs.StringVar(&expires, "expires", expires, "lifetime: `90d`, a Go duration (720h) or never")
	}
	// NAME may come before or after the flags.
	var name string
	if len(args) > 0 && !strings.HasPrefix(args[0], "-") {
		name, args = args[0], args[1:]
	}
	if done, err := parseRobotFlags(fs, args, stdout); done || err != nil {
		return err
	}
	if fs.NArg() > 0 {
		if name != "" || fs.NArg() > 1 {
			return fmt.Errorf("%w: robot %s: unexpected argument %q", errUsage, sub, fs.Arg(fs.NArg()-1))
		}
		name = fs.Arg(0)
	}
	if (sub == "list") != (name == "") {
		if sub == "list" {
			return fmt.Errorf("%w: robot list: takes no NAME", errUsage)
		}
		return fmt.Errorf("%w: robot %s: NAME required", errUsage, sub)
	}
	cfg, _, err := loadConfig(*configPath, *root, nil)
	if err != nil {
		return err
	}
	path := *file
	if path == "" {
		if path, err = robotsPath(cfg); err != nil {
			return err
		}
	}
	log := newLogger(stderr, cfg.Log)
	switch sub {
	case "list":
		return listRobots(path, stdout)
	case "revoke":
		if err := revokeRobot(path, name); err != nil {
			return err
		}
		fmt.Fprintf(stdout, "revoked robot$%s\n", name)
		log.Info("audit", "action", auditRobotRevoke, "user", auth.RobotPrefix+name, "robot", true, "by", operator(), "file", path)
		if cfg.Auth.Audit.Events {
			deliverEvents(ctx, cfg, log, []notify.Event{{Action: auditRobotRevoke, Actor: notify.Actor{Name: auth.RobotPrefix + name}}})
		}
		return nil
	}
	if len(scopes) == 0 {
		return fmt.Errorf("%w: robot create: give at least one --scope PATTERN:ACTIONS", errUsage)
	}
	lifetime, err := parseLifetime(expires)
	if err != nil {
		return fmt.Errorf("%w: robot create: --expires: %w", errUsage, err)
	}
	rb, secret, err := createRobot(path, name, scopes, lifetime, time.Now())
	if err != nil {
		return err
	}
	exp := "never"
	if !rb.Expires.IsZero() {
		exp = rb.Expires.Format(time.RFC3339)
	}
	fmt.Fprintf(stdout, "user:    %s\nkey:     %s\nexpires: %s\nThe key is shown only now; cairn keeps only its hash.\n", rb.User(), secret, exp)
	log.Info("audit", "action", auditRobotCreate, "user", rb.User(), "robot", true, "by", operator(), "expires", exp, "scopes", scopeList(rb.Scopes), "file", path)
	if cfg.Auth.Audit.Events {
		deliverEvents(ctx, cfg, log, []notify.Event{{Action: auditRobotCreate, Actor: notify.Actor{Name: rb.User()}}})
	}
	return nil
}

func parseRobotFlags(fs *flag.FlagSet, args []string, stdout io.Writer) (bool, error) {
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			fmt.Fprintln(stdout, robotUsage)
			fs.SetOutput(stdout)
			fs.PrintDefaults()
			return true, nil
		}
		return false, fmt.Errorf("%w: %s: %s", errUsage, fs.Name(), oneLine(err.Error()))
	}
	return false, nil
}

// robotsPath is the robot file of cfg: auth.robots.path, else beside the
// registry's files with the filesystem driver.
func robotsPath(cfg *config.Config) (string, error) {
	if p := cfg.Auth.Robots.Path; p != "" {
		return p, nil
	}
	if fs := cfg.Storage.Filesystem; fs != nil {
		return filepath.Join(fs.RootDirectory, "cairn-robots.json"), nil
	}
	return "", errors.New("auth.robots.path must be set with an object-store driver (or give --file)")
}

// parseLifetime reads "never", "<n>d" or a Go duration; 0 means never.
func parseLifetime(s string) (time.Duration, error) {
	if s == "never" {
		return 0, nil
	}
	if n, ok := strings.CutSuffix(s, "d"); ok {
		days, err := strconv.Atoi(n)
		if err != nil || days <= 0 {
			return 0, fmt.Errorf("%q: want a positive number of days", s)
		}
		return time.Duration(days) * 24 * time.Hour, nil
	}
	d, err := time.ParseDuration(s)
	if err != nil || d <= 0 {
		return 0, fmt.Errorf("%q: want 90d, a positive Go duration or never", s)
	}
	return d, nil
}

// createRobot adds robot name to the file at path and returns it with its
// secret. A name in use is refused: revoke it first, so that replacing a
// key is always a visible step.
func createRobot(path, name string, scopeArgs []string, lifetime time.Duration, now time.Time) (auth.Robot, string, error) {
	if err := auth.CheckRobotName(name); err != nil {
		return auth.Robot{}, "", fmt.Errorf("%w: robot create: %w", errUsage, err)
	}
	var scopes []auth.RobotScope
	for _, s := range scopeArgs {
		sc, err := auth.ParseRobotScope(s)
		if err != nil {
			return auth.Robot{}, "", fmt.Errorf("%w: robot create: --scope: %w", errUsage, err)
		}
		scopes = append(scopes, sc)
	}
	secret, hash := auth.NewRobotSecret()
	rb := auth.Robot{Name: name, ID: auth.NewRobotID(), Hash: hash, Scopes: scopes, Created: now.UTC().Truncate(time.Second)}
	if lifetime > 0 {
		rb.Expires = now.Add(lifetime).UTC().Truncate(time.Second)
	}
	err := auth.UpdateRobots(path, func(robots []auth.Robot) ([]auth.Robot, error) {
		if slices.ContainsFunc(robots, func(r auth.Robot) bool { return r.Name == name }) {
			return nil, fmt.Errorf("robot %q exists (cairn robot revoke %s first)", name, name)
		}
		return append(robots, rb), nil
	})
	if err != nil {
		return auth.Robot{}, "", fmt.Errorf("robot create: %s: %w", path, err)
	}
	return rb, secret, nil
}

func revokeRobot(path, name string) error {
	err := auth.UpdateRobots(path, func(robots []auth.Robot) ([]auth.Robot, error) {
		i := slices.IndexFunc(robots, func(r auth.Robot) bool { return r.Name == name })
		if i < 0 {
			return nil, fmt.Errorf("no robot %q", name)
		}
		return slices.Delete(robots, i, i+1), nil
	})
	if err != nil {
		return fmt.Errorf("robot revoke: %s: %w", path, err)
	}
	return nil
}

func listRobots(path string, stdout io.Writer) error {
	robots, err := auth.ReadRobots(path)
	if err != nil {
		return fmt.Errorf("robot list: %w", err)
	}
	auth.SortRobots(robots)
	tw := tabwriter.NewWriter(stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "USER\tCREATED\tEXPIRES\tSCOPES")
	now := time.Now()
	for _, rb := range robots {
		exp := "never"
		if !rb.Expires.IsZero() {
			exp = rb.Expires.Format(time.RFC3339)
			if rb.Expired(now) {
				exp += " (expired)"
			}
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\n", rb.User(), rb.Created.Format(time.RFC3339), exp, scopeList(rb.Scopes))
	}
	return tw.Flush()
}

func scopeList(scopes []auth.RobotScope) string {
	parts := make([]string, len(scopes))
	for i, s := range scopes {
		parts[i] = s.String()
	}
	return strings.Join(parts, " ")
}

// operator names who ran the command, for the audit line.
func operator() string {
	if u := os.Getenv("SUDO_USER"); u != "" {
		return u
	}
	return os.Getenv("USER")
}
