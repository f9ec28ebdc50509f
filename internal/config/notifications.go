package config

import (
	"fmt"
	"net/url"
	"slices"
	"strings"
	"time"

	"github.com/cairn-registry/cairn/internal/notify"
)

// Notifications is distribution's notifications section: events (push,
// pull, delete, mount, and cairn's gc and dedup) are POSTed to each enabled
// endpoint, through an on-disk queue (Queue, cairn's own key).
type Notifications struct {
	Events    NotificationEvents     `yaml:"events"`
	Endpoints []NotificationEndpoint `yaml:"endpoints"`
	// Queue is where events wait for delivery (cairn).
	Queue NotificationQueue `yaml:"queue"`
}

// NotificationEvents configures what events hold.
type NotificationEvents struct {
	// IncludeReferences adds a manifest's descriptors to its events.
	IncludeReferences bool `yaml:"includereferences"`
}

// NotificationEndpoint is one listener. Zero Timeout, Threshold and
// Backoff take distribution's defaults: 1s, 10 and 1s.
type NotificationEndpoint struct {
	Name     string              `yaml:"name"`
	Disabled bool                `yaml:"disabled"`
	URL      string              `yaml:"url"`
	Headers  map[string][]string `yaml:"headers"`
	// Timeout bounds one POST.
	Timeout time.Duration `yaml:"timeout"`
	// Threshold failed tries in a row make the sender wait Backoff before
	// each further try.
	Threshold int           `yaml:"threshold"`
	Backoff   time.Duration `yaml:"backoff"`
	// IgnoredMediaTypes is the older spelling of Ignore.MediaTypes; both
	// apply.
	IgnoredMediaTypes []string           `yaml:"ignoredmediatypes"`
	Ignore            NotificationIgnore `yaml:"ignore"`
}

// NotificationIgnore drops events whose target has one of MediaTypes, or
// whose action is one of Actions.
type NotificationIgnore struct {
	MediaTypes []string `yaml:"mediatypes"`
	Actions    []string `yaml:"actions"`
}

// NotificationQueue (cairn) is the bbolt file holding each endpoint's
// undelivered events, so that a restart delivers them.
type NotificationQueue struct {
	// Path defaults to <rootdirectory>/cairn-notifications.db with the
	// filesystem driver; an object-store driver needs it set.
	Path string `yaml:"path"`
	// MaxEvents bounds each endpoint's queue (default 10000); beyond it the
	// oldest events are dropped, and counted.
	MaxEvents int `yaml:"maxevents"`
}

// Enabled returns the endpoints that are not disabled.
func (n *Notifications) Enabled() []NotificationEndpoint {
	var out []NotificationEndpoint
	for _, e := range n.Endpoints {
		if !e.Disabled {
			out = append(out, e)
		}
	}
	return out
}

func (n *Notifications) validate() error {
	names := make(map[string]bool)
	for i, e := range n.Endpoints {
		key := fmt.Sprintf("config: notifications.endpoints[%d]", i)
		if e.Name == "" {
			return fmt.Errorf("%s.name: required", key)
		}
		if names[e.Name] {
			// Each endpoint has its own queue, found by name.
			return fmt.Errorf("%s.name: %q names two endpoints", key, e.Name)
		}
		names[e.Name] = true
		if u, err := url.Parse(e.URL); err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			return fmt.Errorf("%s.url: %q is not an http or https URL", key, e.URL)
		}
		switch {
		case e.Timeout < 0:
			return fmt.Errorf("%s.timeout: must not be negative, not %s", key, e.Timeout)
		case e.Backoff < 0:
			return fmt.Errorf("%s.backoff: must not be negative, not %s", key, e.Backoff)
		case e.Threshold < 0:
			return fmt.Errorf("%s.threshold: must not be negative, not %d", key, e.Threshold)
		}
		for _, a := range e.Ignore.Actions {
			if !slices.Contains(notify.Actions(), a) {
				return fmt.Errorf("%s.ignore.actions: %q is not one of %s", key, a, strings.Join(notify.Actions(), ", "))
			}
		}
	}
	if n.Queue.MaxEvents < 0 {
		return fmt.Errorf("config: notifications.queue.maxevents: must not be negative, not %d", n.Queue.MaxEvents)
	}
	return nil
}
