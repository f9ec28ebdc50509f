package config

import (
	"strings"
	"testing"
	"time"
)

// distribution's notifications section, as its configuration reference
// shows it, plus cairn's queue keys.
const notificationsConfig = `
notifications:
  events:
    includereferences: true
  endpoints:
    - name: alistener
      disabled: false
      url: https://my.listener.com/event
      headers:
        Authorization: [Bearer abc]
      timeout: 500ms
      threshold: 5
      backoff: 2s
      ignoredmediatypes:
        - application/octet-stream
      ignore:
        mediatypes:
           - text/plain
        actions:
           - pull
           - gc
    - name: off
      disabled: true
      url: http://other.example/
  queue:
    path: /var/lib/cairn/events.db
    maxevents: 50
`

func TestNotificationsLoad(t *testing.T) {
	c, warnings, err := Parse([]byte(notificationsConfig))
	if err != nil {
		t.Fatal(err)
	}
	if len(warnings) != 0 {
		t.Errorf("warnings: %v", warnings)
	}
	n := c.Notifications
	if !n.Events.IncludeReferences || len(n.Endpoints) != 2 {
		t.Fatalf("notifications = %+v", n)
	}
	e := n.Endpoints[0]
	wantSettings(t, []setting{
		{"name", e.Name, "alistener"},
		{"url", e.URL, "https://my.listener.com/event"},
		{"headers", e.Headers["Authorization"][0], "Bearer abc"},
		{"timeout", e.Timeout, 500 * time.Millisecond},
		{"threshold", e.Threshold, 5},
		{"backoff", e.Backoff, 2 * time.Second},
		{"ignoredmediatypes", e.IgnoredMediaTypes[0], "application/octet-stream"},
		{"ignore.mediatypes", e.Ignore.MediaTypes[0], "text/plain"},
		{"ignore.actions", strings.Join(e.Ignore.Actions, ","), "pull,gc"},
		{"queue.path", n.Queue.Path, "/var/lib/cairn/events.db"},
		{"queue.maxevents", n.Queue.MaxEvents, 50},
	})
	if en := n.Enabled(); len(en) != 1 || en[0].Name != "alistener" {
		t.Errorf("enabled = %+v", en)
	}
}

func TestNotificationsInvalid(t *testing.T) {
	for _, tc := range []struct{ name, yml, want string }{
		{"no name", "notifications:\n  endpoints:\n    - url: http://x/\n", "config: notifications.endpoints[0].name: required"},
		{"bad url", "notifications:\n  endpoints:\n    - name: a\n      url: x\n", `config: notifications.endpoints[0].url: "x" is not an http or https URL`},
		{"twice", "notifications:\n  endpoints:\n    - name: a\n      url: http://x/\n    - name: a\n      url: http://y/\n", `config: notifications.endpoints[1].name: "a" names two endpoints`},
		{"action", "notifications:\n  endpoints:\n    - name: a\n      url: http://x/\n      ignore:\n        actions: [pul]\n", `config: notifications.endpoints[0].ignore.actions: "pul" is not one of push, pull, delete, mount, gc, dedup, login, login.failed, login.held, robot.create, robot.revoke`},
		{"negative", "notifications:\n  endpoints:\n    - name: a\n      url: http://x/\n      threshold: -1\n", "config: notifications.endpoints[0].threshold: must not be negative, not -1"},
		{"maxevents", "notifications:\n  queue:\n    maxevents: -1\n", "config: notifications.queue.maxevents: must not be negative, not -1"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, _, err := Parse([]byte(tc.yml))
			if err == nil || err.Error() != tc.want {
				t.Fatalf("err = %v\nwant  %s", err, tc.want)
			}
		})
	}
}

// An endpoint list given as a REGISTRY_NOTIFICATIONS_ENDPOINTS variable.
func TestNotificationsEnv(t *testing.T) {
	c, _, err := LoadWithEnv("", []string{"REGISTRY_NOTIFICATIONS_ENDPOINTS=[{name: e, url: 'http://h:1/x', timeout: 3s}]"})
	if err != nil {
		t.Fatal(err)
	}
	if e := c.Notifications.Endpoints; len(e) != 1 || e[0].URL != "http://h:1/x" || e[0].Timeout != 3*time.Second {
		t.Fatalf("endpoints = %+v", e)
	}
}
