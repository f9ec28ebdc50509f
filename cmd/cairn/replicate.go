package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"strings"
	"time"

	"go.opentelemetry.io/otel/trace/noop"

	"github.com/cairn-registry/cairn/internal/config"
	"github.com/cairn-registry/cairn/internal/notify"
	"github.com/cairn-registry/cairn/internal/proxy"
	"github.com/cairn-registry/cairn/internal/registry"
	"github.com/cairn-registry/cairn/internal/replicate"
	"github.com/cairn-registry/cairn/internal/server"
)

const replicateUsage = `usage: cairn replicate run [--config FILE] [--root DIR] [--target NAME] [--json]

Runs one full pass of the replication targets (the replication section; every
enabled target, or the one --target names) and prints what each copied: a push
target sends this registry's selected repositories to its peer, a pull target
brings the peer's into this registry. What was already replicated (the record
kept in the store per target and repository) is not copied again, so a pass
after a crash or an outage copies only what is missing. cairn serve runs the
same passes on each target's interval, and on push events with onpush.

Exit status: 0 every target's pass succeeded, 1 some image or peer failed (the
summary names them), 2 bad usage or configuration.

Keys it reads (the whole file is loaded and checked as serve does): the
storage driver, replication.*, validation.manifests (what a pulled manifest
must satisfy), storage.dedup (to read deduplicated layers), log.*.`

// runReplicate is `cairn replicate`: run is its one subcommand.
func runReplicate(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	if len(args) == 0 || args[0] != "run" {
		if len(args) > 0 && (args[0] == "-h" || args[0] == "--help" || args[0] == "help") {
			fmt.Fprintln(stdout, replicateUsage)
			return nil
		}
		return fmt.Errorf("%w: replicate: expected the subcommand run (cairn replicate -h)", errUsage)
	}
	fs := flag.NewFlagSet("cairn replicate run", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	configPath := fs.String("config", "", "configuration `file` (distribution's config.yml keys)")
	root := fs.String("root", "", "filesystem storage root `directory` (overrides the storage section)")
	name := fs.String("target", "", "run only the target with this `name`")
	asJSON := fs.Bool("json", false, "print the summaries as JSON")
	if done, err := parseFlags(fs, args[1:], "replicate run", replicateUsage, stdout); done || err != nil {
		return err
	}
	cfg, _, err := loadConfig(*configPath, *root, nil)
	if err != nil {
		return exitError{2, err}
	}
	if err := checkStored(cfg, "replicate", ""); err != nil {
		return exitError{2, err}
	}
	if len(cfg.Replication.Enabled()) == 0 {
		return exitError{2, errors.New("replicate: no replication targets are configured (replication.targets)")}
	}
	log := newLogger(stderr, cfg.Log)
	d, err := newDriver(ctx, cfg)
	if err != nil {
		return exitError{2, err}
	}
	regOpts := registryOptions(cfg)
	// Deduplicated layers are read through dedup's restore; a bolt
	// metadata store held by a running serve leaves them unreadable here
	// (those images fail, and the serve's own passes copy them).
	engine, store, err := openDedup(ctx, cfg, d, log, nil, noop.NewTracerProvider().Tracer(""), nil)
	if err != nil {
		log.Warn("replicate: deduplicated layers cannot be read by this process", "err", err)
	} else {
		defer func() {
			engine.Close()
			if store != nil {
				store.Close()
			}
		}()
		regOpts.Dedup = engine.Source
	}
	links, closeLinks, err := newLinkVersions(cfg)
	if err != nil {
		return exitError{2, err}
	}
	defer closeLinks()
	regOpts.LinkVersions = links
	reg := registry.New(d, regOpts)
	r, err := newReplicator(cfg, reg, nil, log, cfg.Storage.Maintenance.ReadOnly.Enabled)
	if err != nil {
		return exitError{2, err}
	}
	sums, err := r.RunOnce(ctx, *name)
	if err != nil {
		return exitError{2, err}
	}
	failed := 0
	for _, s := range sums {
		if s.Failed > 0 {
			failed++
		}
	}
	if *asJSON {
		type summaryJSON struct {
			replicate.Summary
			Errors   []string `json:"errors,omitempty"`
			Duration string   `json:"duration"`
		}
		out := make([]summaryJSON, len(sums))
		for i, s := range sums {
			out[i] = summaryJSON{Summary: s, Duration: s.Duration.String()}
			for _, e := range s.Errors {
				out[i].Errors = append(out[i].Errors, e.Error())
			}
		}
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		if err := enc.Encode(out); err != nil {
			return err
		}
	} else {
		for _, s := range sums {
			fmt.Fprintf(stdout, "%s (%s): %d repositories, %d tags, %d manifests (%d referrers), %d blobs (%d bytes), %d mounted, %d failed, in %s\n",
				s.Target, s.Direction, s.Repositories, s.Tags, s.Manifests, s.Referrers, s.Blobs, s.Bytes, s.Mounted, s.Failed, s.Duration.Round(time.Millisecond))
			for _, e := range s.Errors {
				fmt.Fprintf(stdout, "  error: %s\n", oneLine(e.Error()))
			}
		}
	}
	if failed > 0 {
		return exitError{1, fmt.Errorf("replicate: %d of %d targets had failures", failed, len(sums))}
	}
	return nil
}

// newReplicator builds the replication section's targets over reg; a
// read-only registry runs no pull target (it would write).
func newReplicator(cfg *config.Config, reg *registry.Registry, m replicate.Metrics, log *slog.Logger, readOnly bool) (*replicate.Replicator, error) {
	var targets []replicate.Target
	for _, c := range cfg.Replication.Enabled() {
		if readOnly && c.Direction == replicate.Pull {
			log.Warn("replication: the registry is read-only; pull target not run", "target", c.Name)
			continue
		}
		t := replicate.Target{Name: c.Name, Direction: c.Direction, Interval: c.Interval, OnPush: c.OnPush,
			Remote: proxy.Remote{URL: c.URL, Username: c.Username, Password: c.Password}}
		switch {
		case c.PasswordFile != "":
			b, err := os.ReadFile(c.PasswordFile)
			if err != nil {
				return nil, fmt.Errorf("config: replication target %s: passwordfile: %w", c.Name, err)
			}
			t.Remote.Password = strings.TrimRight(string(b), "\r\n")
		case c.PasswordEnv != "":
			v, ok := os.LookupEnv(c.PasswordEnv)
			if !ok {
				return nil, fmt.Errorf("config: replication target %s: passwordenv: %s is not set", c.Name, c.PasswordEnv)
			}
			t.Remote.Password = v
		case c.Exec != nil:
			// As proxy.exec: unset keeps the answer, 0 asks every time.
			t.Remote.CredentialHelper, t.Remote.HelperLifetime = c.Exec.Command, -1
			if c.Exec.Lifetime == nil {
				t.Remote.HelperLifetime = 0
			} else if *c.Exec.Lifetime > 0 {
				t.Remote.HelperLifetime = *c.Exec.Lifetime
			}
		}
		var err error
		if t.Repositories, err = replicate.NewRepoFilter(c.Repositories.Include, c.Repositories.Exclude); err != nil {
			return nil, fmt.Errorf("config: replication target %s: repositories: %w", c.Name, err)
		}
		if t.Tags, err = replicate.NewTagFilter(c.Tags.Include, c.Tags.Exclude); err != nil {
			return nil, fmt.Errorf("config: replication target %s: tags: %w", c.Name, err)
		}
		targets = append(targets, t)
		log.Info("replication target", "name", c.Name, "direction", c.Direction, "url", c.URL, "interval", c.Interval, "onpush", c.OnPush)
	}
	return replicate.New(replicate.Options{Targets: targets, Local: reg, Records: reg.Driver(), Metrics: m, Log: log})
}

// startReplication runs the replication targets' loops until exit, and
// with onpush targets hands them the API's events beside the notifier's:
// in process, since an event only says which repository to look at (the
// record in the store says what to copy, so none needs a queue of its
// own).
func (s *serving) startReplication(ctx context.Context, opts *server.Options, stack *cleanups) error {
	if len(s.cfg.Replication.Enabled()) == 0 {
		return nil
	}
	r, err := newReplicator(s.cfg, s.reg, s.m.Replication(), s.log, s.cfg.Storage.Maintenance.ReadOnly.Enabled)
	if err != nil {
		return err
	}
	runCtx, stop := context.WithCancel(context.WithoutCancel(ctx))
	stack.spawn(stop, func() { r.Run(runCtx) })
	if r.OnPush() {
		opts.Events = eventsTee{opts.Events, r}
	}
	return nil
}

// eventsTee hands each event to the notifier (when there is one) and to
// replication.
type eventsTee struct {
	next server.Events // nil: no notifier
	repl *replicate.Replicator
}

func (t eventsTee) Notify(ev notify.Event) {
	if t.next != nil {
		t.next.Notify(ev)
	}
	t.repl.Notify(ev)
}
