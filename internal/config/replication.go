package config

import (
	"fmt"
	"net/url"
	"regexp"
	"time"

	"github.com/cairn-registry/cairn/internal/layout"
)

// Replication (cairn; zot's sync, Harbor's replication) copies images to
// and from other registries: each target pushes this registry's
// repositories to a peer, or pulls the peer's into this one, on a schedule
// and, for push, as images are pushed (see package replicate).
type Replication struct {
	Targets []ReplicationTarget `yaml:"targets"`
}

// ReplicationTarget is one peer registry and what travels to or from it.
type ReplicationTarget struct {
	// Name identifies the target in logs, metrics, `cairn replicate run
	// --target` and the store's record of what was replicated (so it
	// must not change once the target has run).
	Name string `yaml:"name"`
	// Disabled keeps the target configured but idle.
	Disabled bool `yaml:"disabled"`
	// URL is the peer's base URL (http or https).
	URL string `yaml:"url"`
	// Username and Password authenticate to the peer (Basic, or to its
	// token server), as for proxy upstreams; PasswordFile reads the
	// password from a file instead, PasswordEnv from an environment
	// variable, and Exec from a Docker credential helper.
	Username     string     `yaml:"username"`
	Password     string     `yaml:"password"`
	PasswordFile string     `yaml:"passwordfile"`
	PasswordEnv  string     `yaml:"passwordenv"`
	Exec         *ProxyExec `yaml:"exec"`
	// Direction is push (this registry's images go to the peer) or pull
	// (the peer's come here).
	Direction string `yaml:"direction"`
	// Repositories and Tags select what travels: a repository (a tag)
	// travels when it matches an include pattern (or there are none) and
	// no exclude pattern. Repository patterns are access control's ("**"
	// anything, "*" anything but "/", "?" one character); tag patterns
	// take "*" and "?".
	Repositories ReplicationFilter `yaml:"repositories"`
	Tags         ReplicationFilter `yaml:"tags"`
	// Interval runs a full pass this often (0: only at start and, for
	// push, on push events).
	Interval time.Duration `yaml:"interval"`
	// OnPush replicates a repository as soon as an image is pushed to it
	// (push targets only).
	OnPush bool `yaml:"onpush"`
}

// ReplicationFilter includes and excludes names by pattern.
type ReplicationFilter struct {
	Include []string `yaml:"include"`
	Exclude []string `yaml:"exclude"`
}

// Enabled returns the targets that are not disabled.
func (r *Replication) Enabled() []ReplicationTarget {
	var out []ReplicationTarget
	for _, t := range r.Targets {
		if !t.Disabled {
			out = append(out, t)
		}
	}
	return out
}

// replicationName is what a target's name may be: it names a directory of
// the store.
var replicationName = regexp.MustCompile(`^[a-z0-9][a-z0-9._-]{0,63}$`)

// replicationTagPattern is what a tag pattern may hold: a tag's characters
// and the two wildcards.
var replicationTagPattern = regexp.MustCompile(`^[A-Za-z0-9_.*?-]{1,128}$`)

func (r *Replication) validate() error {
	names := map[string]bool{}
	for i, t := range r.Targets {
		key := fmt.Sprintf("config: replication.targets[%d]", i)
		if !replicationName.MatchString(t.Name) {
			return fmt.Errorf("%s.name: %q must be lower-case letters, digits, '.', '_' or '-' (at most 64), starting with a letter or digit", key, t.Name)
		}
		if names[t.Name] {
			return fmt.Errorf("%s.name: %q names two targets", key, t.Name)
		}
		names[t.Name] = true
		if u, err := url.Parse(t.URL); err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			return fmt.Errorf("%s.url: %q is not an http or https URL", key, t.URL)
		}
		switch t.Direction {
		case "push", "pull":
		default:
			return fmt.Errorf("%s.direction: %q is not push or pull", key, t.Direction)
		}
		if t.OnPush && t.Direction != "push" {
			return fmt.Errorf("%s.onpush: only push targets replicate on push events", key)
		}
		given := 0
		for _, s := range []string{t.Password, t.PasswordFile, t.PasswordEnv} {
			if s != "" {
				given++
			}
		}
		if given > 1 || given > 0 && t.Exec != nil {
			return fmt.Errorf("%s: give one of password, passwordfile, passwordenv and exec", key)
		}
		if t.Exec != nil && t.Exec.Command == "" {
			return fmt.Errorf("%s.exec.command: required (a Docker credential helper)", key)
		}
		if t.Interval < 0 {
			return fmt.Errorf("%s.interval: must not be negative, not %s", key, t.Interval)
		}
		if t.Interval == 0 && !t.OnPush {
			return fmt.Errorf("%s.interval: required unless onpush is set (a pull target runs on its interval)", key)
		}
		for _, p := range append(append([]string{}, t.Repositories.Include...), t.Repositories.Exclude...) {
			if _, err := layout.RepoPattern(p); err != nil {
				return fmt.Errorf("%s.repositories: %w", key, err)
			}
		}
		for _, p := range append(append([]string{}, t.Tags.Include...), t.Tags.Exclude...) {
			if !replicationTagPattern.MatchString(p) {
				return fmt.Errorf("%s.tags: %q is not a tag pattern (a tag's characters, '*' and '?')", key, p)
			}
		}
	}
	return nil
}
