package retention

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"sync"
	"time"

	"github.com/cairn-registry/cairn/internal/layout"
	"github.com/cairn-registry/cairn/internal/storage/driver"
)

// Pull records: when each tag was last pulled (a manifest GET by tag),
// for the pulledwithin and mostrecentlypulledcount rules. A node keeps the
// times it saw in memory and, every flush, merges them (the later time
// wins) into one small file per repository, pullsPath. Nodes sharing a
// store may overwrite each other's flush; each writes again what it knows
// at its next flush, so a time is lost only with the node that saw it.
// Memory is bounded: times older than keepPulls are dropped after a flush.

// keepPulls is how long a node remembers a pull it flushed.
const keepPulls = 24 * time.Hour

// pullsPath is the pull-record file of repo.
func pullsPath(repo string) string { return layout.RepoPulls(repo) }

// Pulls records tag pulls and writes them to storage.
type Pulls struct {
	d driver.Driver

	mu    sync.Mutex
	seen  map[string]map[string]time.Time // repo → tag → last pull seen here
	dirty map[string]bool                 // repos with pulls not yet flushed
}

// NewPulls returns an empty recorder writing through d.
func NewPulls(d driver.Driver) *Pulls {
	return &Pulls{d: d, seen: make(map[string]map[string]time.Time), dirty: make(map[string]bool)}
}

// Pulled records a pull of repo:tag now. It is cheap: memory only.
func (p *Pulls) Pulled(repo, tag string) {
	now := time.Now().UTC()
	p.mu.Lock()
	defer p.mu.Unlock()
	tags := p.seen[repo]
	if tags == nil {
		tags = make(map[string]time.Time)
		p.seen[repo] = tags
	}
	tags[tag] = now
	p.dirty[repo] = true
}

// Flush writes the pulls seen since the last flush, merged with what the
// store holds, and forgets what is older than keepPulls.
func (p *Pulls) Flush(ctx context.Context) error {
	p.mu.Lock()
	todo := make(map[string]map[string]time.Time, len(p.dirty))
	for repo := range p.dirty {
		todo[repo] = maps.Clone(p.seen[repo])
	}
	clear(p.dirty)
	p.mu.Unlock()
	var errs []error
	for repo, tags := range todo {
		stored, err := ReadPulls(ctx, p.d, repo)
		if err == nil {
			for tag, at := range tags {
				if at.After(stored[tag]) {
					stored[tag] = at
				}
			}
			err = writePulls(ctx, p.d, repo, stored)
		}
		if err != nil {
			errs = append(errs, fmt.Errorf("retention: recording pulls of %s: %w", repo, err))
			p.mu.Lock()
			p.dirty[repo] = true
			p.mu.Unlock()
		}
	}
	p.mu.Lock()
	cut := time.Now().Add(-keepPulls)
	for repo, tags := range p.seen {
		if p.dirty[repo] {
			continue
		}
		maps.DeleteFunc(tags, func(_ string, at time.Time) bool { return at.Before(cut) })
		if len(tags) == 0 {
			delete(p.seen, repo)
		}
	}
	p.mu.Unlock()
	return errors.Join(errs...)
}

// ReadPulls reads repo's pull records: tag → last pull (none: empty).
func ReadPulls(ctx context.Context, d driver.Driver, repo string) (map[string]time.Time, error) {
	b, err := d.GetContent(ctx, pullsPath(repo))
	if errors.Is(err, driver.ErrNotFound) {
		return make(map[string]time.Time), nil
	}
	if err != nil {
		return nil, err
	}
	out := make(map[string]time.Time)
	if err := json.Unmarshal(b, &out); err != nil {
		// A damaged record only loses pull times: start afresh.
		return make(map[string]time.Time), nil
	}
	return out, nil
}

func writePulls(ctx context.Context, d driver.Driver, repo string, tags map[string]time.Time) error {
	b, err := json.Marshal(tags)
	if err != nil {
		return err
	}
	return d.PutContent(ctx, pullsPath(repo), b)
}
