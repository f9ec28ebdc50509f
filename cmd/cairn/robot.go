package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
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
and, with auth.audit.events, send events robot.create and robot.revoke.
Admins can do the same on the web page, /ui/robots/.`

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
	expires := auth.DefaultRobotLifetime
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
	var change auth.RobotChange
	switch sub {
	case "list":
		return listRobots(path, stdout)
	case "revoke":
		rb, err := auth.RevokeRobot(path, name)
		if err != nil {
			return robotError(err)
		}
		fmt.Fprintf(stdout, "revoked %s\n", rb.User())
		change = auth.RobotChange{Action: auditRobotRevoke, Robot: rb}
	default:
		rb, secret, err := auth.CreateRobot(path, auth.RobotRequest{Name: name, Scopes: scopes, Expires: expires}, time.Now())
		if err != nil {
			return robotError(err)
		}
		fmt.Fprintf(stdout, "user:    %s\nkey:     %s\nexpires: %s\nThe key is shown only now; cairn keeps only its hash.\n", rb.User(), secret, rb.ExpiryString())
		change = auth.RobotChange{Action: auditRobotCreate, Robot: rb}
	}
	change.By, change.Via, change.File = operator(), "cli", path
	change.Audit(log)
	if cfg.Auth.Audit.Events {
		deliverEvents(ctx, cfg, log, []notify.Event{change.Event()})
	}
	return nil
}

// robotError marks a refused request as a usage error (exit status 2).
func robotError(err error) error {
	if errors.Is(err, auth.ErrRobotRequest) {
		return fmt.Errorf("%w: %w", errUsage, err)
	}
	return err
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
		exp := rb.ExpiryString()
		if rb.Expired(now) {
			exp += " (expired)"
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\n", rb.User(), rb.Created.Format(time.RFC3339), exp, auth.ScopeList(rb.Scopes))
	}
	return tw.Flush()
}

// operator names who ran the command, for the audit line.
func operator() string {
	if u := os.Getenv("SUDO_USER"); u != "" {
		return u
	}
	return os.Getenv("USER")
}
