package config

import (
	"fmt"
	"net/url"
	"time"
)

// Notifications is distribution's event notifications section: every push,
// pull, mount and delete is POSTed to each enabled endpoint.
type Notifications struct {
	Events    NotificationEvents     `yaml:"events"`
	Endpoints []NotificationEndpoint `yaml:"endpoints"`
}

// NotificationEvents configures what events hold.
type NotificationEvents struct {
	// IncludeReferences adds a manifest's descriptors to its events.
	IncludeReferences bool `yaml:"includereferences"`
}

// NotificationEndpoint is one listener.
type NotificationEndpoint struct {
	Name     string              `yaml:"name"`
	URL      string              `yaml:"url"`
	Disabled bool                `yaml:"disabled"`
	Headers  map[string][]string `yaml:"headers"`
	// Timeout bounds one POST (default 1s).
	Timeout time.Duration `yaml:"timeout"`
	// Threshold failed tries in a row make the sender wait Backoff between
	// tries (defaults 10 and 1s).
	Threshold int           `yaml:"threshold"`
	Backoff   time.Duration `yaml:"backoff"`
	// IgnoredMediaTypes is the older spelling of Ignore.MediaTypes.
	IgnoredMediaTypes []string           `yaml:"ignoredmediatypes"`
	Ignore            NotificationIgnore `yaml:"ignore"`
}

// NotificationIgnore drops events by their target's media type or their
// action.
type NotificationIgnore struct {
	MediaTypes []string `yaml:"mediatypes"`
	Actions    []string `yaml:"actions"`
}

func (n *Notifications) validate() error {
	for i, e := range n.Endpoints {
		key := fmt.Sprintf("config: notifications.endpoints[%d]", i)
		if e.Name == "" {
			return fmt.Errorf("%s.name: required", key)
		}
		if u, err := url.Parse(e.URL); err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			return fmt.Errorf("%s.url: %q is not an http or https URL", key, e.URL)
		}
		if e.Timeout < 0 || e.Backoff < 0 || e.Threshold < 0 {
			return fmt.Errorf("%s: timeout, threshold and backoff must not be negative", key)
		}
		for _, a := range e.Ignore.Actions {
			switch a {
			case "pull", "push", "mount", "delete":
			default:
				return fmt.Errorf("%s.ignore.actions: %q is not one of pull, push, mount, delete", key, a)
			}
		}
	}
	return nil
}
