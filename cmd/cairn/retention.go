package main

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	"github.com/cairn-registry/cairn/internal/config"
	"github.com/cairn-registry/cairn/internal/registry"
	"github.com/cairn-registry/cairn/internal/retention"
)

// newRetention builds the retention policies of cfg over reg; nil when
// there are none.
func newRetention(cfg *config.Config, reg *registry.Registry, dryRun bool) (*retention.Retention, error) {
	c := cfg.Retention
	if len(c.Policies) == 0 {
		return nil, nil
	}
	opts := retention.Options{Delay: c.DelayOrDefault(), DryRun: dryRun || c.DryRun}
	for _, p := range c.Policies {
		rp := retention.Policy{Repositories: p.Repositories, DeleteUntagged: p.DeleteUntagged}
		for _, k := range p.KeepTags {
			rp.KeepTags = append(rp.KeepTags, retention.KeepRule{
				Patterns: k.Patterns, MostRecentlyPushedCount: k.MostRecentlyPushedCount, MostRecentlyPulledCount: k.MostRecentlyPulledCount,
				PushedWithin: k.PushedWithin, PulledWithin: k.PulledWithin,
			})
		}
		opts.Policies = append(opts.Policies, rp)
	}
	r, err := retention.New(reg, opts)
	if err != nil {
		return nil, fmt.Errorf("config: %w", err)
	}
	return r, nil
}

// applyRetention runs ret (nil: nothing) and logs what it deleted, or
// with a dry run what it would.
func applyRetention(ctx context.Context, log *slog.Logger, ret *retention.Retention) (*retention.Report, error) {
	if ret == nil {
		return nil, nil
	}
	start := time.Now()
	rep, err := ret.Run(ctx, start)
	if err != nil {
		return rep, err
	}
	verb := "deleted"
	if rep.DryRun {
		verb = "would delete"
	}
	for _, d := range rep.Tags {
		log.Info("retention: "+verb+" tag", "repository", d.Repository, "tag", d.Tag)
	}
	for _, d := range rep.Manifests {
		log.Info("retention: "+verb+" manifest", "repository", d.Repository, "digest", d.Digest)
	}
	log.Info("retention", "dry_run", rep.DryRun, "repositories", rep.Repositories, "tags", len(rep.Tags), "manifests", len(rep.Manifests), "duration", time.Since(start))
	return rep, nil
}
