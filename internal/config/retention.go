package config

import (
	"fmt"
	"time"
)

// Retention (cairn, in the spirit of zot's) deletes tags and untagged
// manifests by rules, before each scheduled GC and `cairn gc` (see package
// retention for how rules combine).
type Retention struct {
	// DryRun logs what would be deleted and deletes nothing.
	DryRun bool `yaml:"dryrun"`
	// Delay keeps whatever was pushed this recently (default 24h).
	Delay    *time.Duration    `yaml:"delay"`
	Policies []RetentionPolicy `yaml:"policies"`
}

// RetentionPolicy governs the repositories its patterns match; the first
// matching policy applies.
type RetentionPolicy struct {
	Repositories   []string        `yaml:"repositories"`
	DeleteUntagged bool            `yaml:"deleteuntagged"`
	KeepTags       []RetentionKeep `yaml:"keeptags"`
}

// RetentionKeep keeps the tags its patterns match that meet any of its
// criteria (all of them, without criteria).
type RetentionKeep struct {
	Patterns                []string      `yaml:"patterns"`
	MostRecentlyPushedCount int           `yaml:"mostrecentlypushedcount"`
	MostRecentlyPulledCount int           `yaml:"mostrecentlypulledcount"`
	PushedWithin            time.Duration `yaml:"pushedwithin"`
	PulledWithin            time.Duration `yaml:"pulledwithin"`
}

// defaultRetentionDelay keeps a day's pushes out of reach of retention.
const defaultRetentionDelay = 24 * time.Hour

// DelayOrDefault is Delay, or its default.
func (r *Retention) DelayOrDefault() time.Duration {
	if r.Delay == nil {
		return defaultRetentionDelay
	}
	return *r.Delay
}

func (r *Retention) validate() error {
	if r.Delay != nil && *r.Delay < 0 {
		return fmt.Errorf("config: retention.delay: must not be negative")
	}
	for i, p := range r.Policies {
		if len(p.Repositories) == 0 {
			return fmt.Errorf("config: retention.policies[%d].repositories: at least one pattern (\"**\" for all)", i)
		}
		for j, k := range p.KeepTags {
			if k.MostRecentlyPushedCount < 0 || k.MostRecentlyPulledCount < 0 || k.PushedWithin < 0 || k.PulledWithin < 0 {
				return fmt.Errorf("config: retention.policies[%d].keeptags[%d]: counts and durations must not be negative", i, j)
			}
		}
	}
	return nil
}
