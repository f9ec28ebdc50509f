// Package retention applies retention policies: which tags and untagged
// manifests of a repository to delete, by rules on tag names, push times
// and pull times, in the spirit of zot's retention.
//
// A run, for each repository the first matching policy governs:
//
//  1. Its tags, their push times (when the tag's link was last written)
//     and pull times (pulls.go) are read.
//  2. A tag is kept when a keep rule keeps it: the rule's patterns match
//     it (no patterns: every tag) and the rule has no criteria, or the tag
//     meets one of them (among the most recently pushed or pulled N of the
//     tags the patterns match; pushed or pulled within a duration). A tag
//     pushed within the delay is kept whatever the rules say, and a policy
//     without keep rules keeps every tag.
//  3. The other tags are deleted, as an API DELETE of the tag would.
//  4. With deleteuntagged, every manifest no remaining tag reaches
//     (through indexes, or as a referrer of a reached manifest) and not
//     itself pushed within the delay is deleted.
//
// A dry run reports the same without deleting (over a Preview it evicts
// into the preview, for the GC dry run after it). Blobs are left to the
// garbage collector, which frees what no manifest names; the scheduled GC
// and `cairn gc` run retention first.
package retention

import (
	"context"
	"errors"
	"fmt"
	"regexp"
	"slices"
	"strings"
	"time"

	"github.com/opencontainers/go-digest"

	"github.com/cairn-registry/cairn/internal/layout"
	"github.com/cairn-registry/cairn/internal/manifest"
	"github.com/cairn-registry/cairn/internal/registry"
	"github.com/cairn-registry/cairn/internal/storage/driver"
)

// Policy governs the repositories its patterns match.
type Policy struct {
	// Repositories are patterns: "*" within a path segment, "**" across.
	Repositories []string
	// KeepTags are the rules that keep tags; none keeps every tag.
	KeepTags []KeepRule
	// DeleteUntagged deletes manifests no kept tag reaches.
	DeleteUntagged bool
}

// KeepRule keeps the tags its Patterns match (regular expressions, whole
// tag; none: every tag) that meet any of its criteria, or all of them when
// it has none.
type KeepRule struct {
	Patterns                []string
	MostRecentlyPushedCount int
	MostRecentlyPulledCount int
	PushedWithin            time.Duration
	PulledWithin            time.Duration
}

// Options configure a Retention.
type Options struct {
	Policies []Policy
	// Delay keeps whatever was pushed this recently.
	Delay time.Duration
	// DryRun reports and deletes nothing. Over a Preview (the store's
	// Driver is one), a dry run evicts into the preview, which deletes
	// nothing either, so that a GC dry run reading it after counts what the
	// real run would.
	DryRun bool
}

// Store is what retention needs of the registry.
type Store interface {
	Repositories(ctx context.Context, n int, last string) ([]string, bool, error)
	ManifestLinks(ctx context.Context, repo string) (tags, revisions []registry.LinkTime, err error)
	TagDigest(ctx context.Context, repo, tag string) (digest.Digest, error)
	GetManifest(ctx context.Context, repo, ref string) (*manifest.Manifest, error)
	Evict(ctx context.Context, repo, ref string) error
	Reach(ctx context.Context, repo string, d digest.Digest, keep map[digest.Digest]bool) error
	Driver() driver.Driver
}

// Retention applies policies to a registry.
type Retention struct {
	store    Store
	opts     Options
	policies []compiled
	// evict: deletions go to the store (a real run, or a dry run over a
	// Preview).
	evict bool
}

type compiled struct {
	repos []*regexp.Regexp
	keep  []compiledRule
	Policy
}

type compiledRule struct {
	patterns []*regexp.Regexp
	KeepRule
}

// New checks and compiles opts.
func New(store Store, opts Options) (*Retention, error) {
	r := &Retention{store: store, opts: opts, evict: !opts.DryRun}
	if store != nil {
		if _, ok := store.Driver().(*Preview); ok {
			r.evict = true
		}
	}
	for i, p := range opts.Policies {
		c := compiled{Policy: p}
		if len(p.Repositories) == 0 {
			return nil, fmt.Errorf("retention: policies[%d]: repositories: at least one pattern", i)
		}
		for _, pat := range p.Repositories {
			re, err := layout.RepoPattern(pat)
			if err != nil {
				return nil, fmt.Errorf("retention: policies[%d]: %w", i, err)
			}
			c.repos = append(c.repos, re)
		}
		for j, k := range p.KeepTags {
			cr := compiledRule{KeepRule: k}
			if k.MostRecentlyPushedCount < 0 || k.MostRecentlyPulledCount < 0 || k.PushedWithin < 0 || k.PulledWithin < 0 {
				return nil, fmt.Errorf("retention: policies[%d].keeptags[%d]: counts and durations must not be negative", i, j)
			}
			for _, pat := range k.Patterns {
				re, err := regexp.Compile("^(?:" + pat + ")$")
				if err != nil {
					return nil, fmt.Errorf("retention: policies[%d].keeptags[%d].patterns: %w", i, j, err)
				}
				cr.patterns = append(cr.patterns, re)
			}
			c.keep = append(c.keep, cr)
		}
		r.policies = append(r.policies, c)
	}
	return r, nil
}

// policyFor returns the first policy whose patterns match repo.
func (r *Retention) policyFor(repo string) (*compiled, bool) {
	for i := range r.policies {
		for _, re := range r.policies[i].repos {
			if re.MatchString(repo) {
				return &r.policies[i], true
			}
		}
	}
	return nil, false
}

// Deletion is one tag or manifest a run deletes (or would).
type Deletion struct {
	Repository string        `json:"repository"`
	Tag        string        `json:"tag,omitempty"`
	Digest     digest.Digest `json:"digest,omitempty"`
}

// Report is what a run did.
type Report struct {
	DryRun       bool       `json:"dry_run"`
	Repositories int        `json:"repositories"` // governed by a policy
	Tags         []Deletion `json:"tags"`
	Manifests    []Deletion `json:"manifests"`
}

// Run applies the policies as of now.
func (r *Retention) Run(ctx context.Context, now time.Time) (*Report, error) {
	rep := &Report{DryRun: r.opts.DryRun, Tags: []Deletion{}, Manifests: []Deletion{}}
	if len(r.policies) == 0 {
		return rep, nil
	}
	repos, _, err := r.store.Repositories(ctx, -1, "")
	if err != nil {
		return rep, err
	}
	for _, repo := range repos {
		p, ok := r.policyFor(repo)
		if !ok {
			continue
		}
		rep.Repositories++
		if err := r.runRepo(ctx, repo, p, now, rep); err != nil {
			return rep, fmt.Errorf("retention: %s: %w", repo, err)
		}
	}
	return rep, nil
}

type tagInfo struct {
	name   string
	pushed time.Time
	pulled time.Time // zero: never recorded
}

func (r *Retention) runRepo(ctx context.Context, repo string, p *compiled, now time.Time, rep *Report) error {
	links, revisions, err := r.store.ManifestLinks(ctx, repo)
	if err != nil {
		return err
	}
	pulls, err := ReadPulls(ctx, r.store.Driver(), repo)
	if err != nil {
		return err
	}
	tags := make([]tagInfo, len(links))
	for i, l := range links {
		tags[i] = tagInfo{name: l.Tag, pushed: l.Written, pulled: pulls[l.Tag]}
	}
	kept := keepTags(tags, p.keep, now, r.opts.Delay)
	reach := make(map[digest.Digest]bool)
	for _, t := range tags {
		if kept[t.name] {
			d, err := r.store.TagDigest(ctx, repo, t.name)
			if errors.Is(err, registry.ErrManifestUnknown) {
				continue
			}
			if err != nil {
				return err
			}
			if err := r.store.Reach(ctx, repo, d, reach); err != nil {
				return err
			}
			continue
		}
		rep.Tags = append(rep.Tags, Deletion{Repository: repo, Tag: t.name})
		if r.evict {
			if err := r.store.Evict(ctx, repo, t.name); err != nil && !errors.Is(err, registry.ErrManifestUnknown) {
				return err
			}
		}
	}
	if !p.DeleteUntagged {
		return nil
	}
	if err := r.reachReferrers(ctx, repo, revisions, reach); err != nil {
		return err
	}
	for _, rv := range revisions {
		if reach[rv.Digest] || now.Sub(rv.Written) < r.opts.Delay {
			continue
		}
		rep.Manifests = append(rep.Manifests, Deletion{Repository: repo, Digest: rv.Digest})
		if r.evict {
			if err := r.store.Evict(ctx, repo, rv.Digest.String()); err != nil && !errors.Is(err, registry.ErrManifestUnknown) {
				return err
			}
		}
	}
	return nil
}

// keepTags decides which tags the rules keep, as of now; a tag pushed within
// delay is always kept, and with no rules every tag is.
func keepTags(tags []tagInfo, rules []compiledRule, now time.Time, delay time.Duration) map[string]bool {
	kept := make(map[string]bool, len(tags))
	for _, t := range tags {
		if len(rules) == 0 || now.Sub(t.pushed) < delay {
			kept[t.name] = true
		}
	}
	for _, rule := range rules {
		var matched []tagInfo
		for _, t := range tags {
			if rule.matches(t.name) {
				matched = append(matched, t)
			}
		}
		criteria := rule.MostRecentlyPushedCount > 0 || rule.MostRecentlyPulledCount > 0 || rule.PushedWithin > 0 || rule.PulledWithin > 0
		for _, t := range matched {
			if !criteria ||
				rule.PushedWithin > 0 && now.Sub(t.pushed) < rule.PushedWithin ||
				rule.PulledWithin > 0 && !t.pulled.IsZero() && now.Sub(t.pulled) < rule.PulledWithin {
				kept[t.name] = true
			}
		}
		// The most recent N: latest first, ties by name.
		byPush := slices.Clone(matched)
		slices.SortFunc(byPush, func(a, b tagInfo) int {
			return cmpTime(b.pushed, a.pushed, a.name, b.name)
		})
		for _, t := range byPush[:min(rule.MostRecentlyPushedCount, len(byPush))] {
			kept[t.name] = true
		}
		var pulled []tagInfo
		for _, t := range matched {
			if !t.pulled.IsZero() {
				pulled = append(pulled, t)
			}
		}
		slices.SortFunc(pulled, func(a, b tagInfo) int {
			return cmpTime(b.pulled, a.pulled, a.name, b.name)
		})
		for _, t := range pulled[:min(rule.MostRecentlyPulledCount, len(pulled))] {
			kept[t.name] = true
		}
	}
	return kept
}

func cmpTime(x, y time.Time, a, b string) int {
	if c := x.Compare(y); c != 0 {
		return c
	}
	return strings.Compare(a, b)
}

func (rule compiledRule) matches(tag string) bool {
	if len(rule.patterns) == 0 {
		return true
	}
	for _, re := range rule.patterns {
		if re.MatchString(tag) {
			return true
		}
	}
	return false
}

// reachReferrers keeps the referrers (signatures, SBOMs) of kept
// manifests, and theirs, until nothing changes.
func (r *Retention) reachReferrers(ctx context.Context, repo string, revisions []registry.LinkTime, keep map[digest.Digest]bool) error {
	subjects := make(map[digest.Digest]digest.Digest) // referrer → subject
	for _, rv := range revisions {
		if keep[rv.Digest] {
			continue
		}
		m, err := r.store.GetManifest(ctx, repo, rv.Digest.String())
		if errors.Is(err, registry.ErrManifestUnknown) {
			continue
		}
		if err != nil {
			return err
		}
		if m.Subject != nil {
			subjects[rv.Digest] = m.Subject.Digest
		}
	}
	for changed := true; changed; {
		changed = false
		for ref, subject := range subjects {
			if keep[subject] && !keep[ref] {
				if err := r.store.Reach(ctx, repo, ref, keep); err != nil {
					return err
				}
				changed = true
			}
		}
	}
	return nil
}
