package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"log/slog"
	"strings"
	"testing"

	"github.com/cairn-registry/cairn/internal/auth"
	"github.com/cairn-registry/cairn/internal/notify"
)

// notified keeps the events given to Notify.
type notified []notify.Event

func (n *notified) Notify(e notify.Event) { *n = append(*n, e) }

// TestAuditTrailEvents: each audit entry is a log line and an event
// whose cairn.login has the entry's identity source, way and robot flag
// (the event's own source stays the registry process's).
func TestAuditTrailEvents(t *testing.T) {
	var logs bytes.Buffer
	var events notified
	trail := auditTrail{log: slog.New(slog.NewTextHandler(&logs, nil)), events: &events}
	entries := []auth.AuditEvent{
		{Action: auth.AuditLogin, User: "bob", Source: "ldap", Via: auth.ViaToken, Addr: "192.0.2.1", UserAgent: "docker"},
		{Action: auth.AuditLogin, User: "erin", Source: auth.SourceOIDC, Via: auth.ViaWeb},
		{Action: auth.AuditLogin, User: "robot$ci", Robot: true, Source: auth.SourceRobot, Via: auth.ViaBasic},
		{Action: auth.AuditLoginFailed, User: "mallory", Source: auth.SourceHtpasswd, Via: auth.ViaRefresh, Err: errors.New("no")},
		{Action: auth.AuditLoginHeld, User: "mallory", Via: auth.ViaBasic},
	}
	for _, e := range entries {
		trail.Audit(t.Context(), e)
	}
	if len(events) != len(entries) {
		t.Fatalf("%d events for %d audit entries", len(events), len(entries))
	}
	for i, e := range entries {
		ev := events[i]
		want := notify.Login{Source: e.Source, Via: e.Via, Robot: e.Robot}
		if ev.Action != e.Action || ev.Actor.Name != e.User || ev.Request.Addr != e.Addr || ev.Request.UserAgent != e.UserAgent {
			t.Errorf("event %d: %+v, want action %s of %s from %q (%q)", i, ev, e.Action, e.User, e.Addr, e.UserAgent)
		}
		if ev.Cairn == nil || ev.Cairn.Login == nil || *ev.Cairn.Login != want {
			t.Errorf("event %d (%s of %s): cairn %+v, want login %+v", i, e.Action, e.User, ev.Cairn, want)
		}
		if ev.Source != (notify.Source{}) {
			t.Errorf("event %d: source %+v set by the audit trail (the notifier's to fill)", i, ev.Source)
		}
	}
	raw, err := json.Marshal(events[0])
	if err != nil {
		t.Fatal(err)
	}
	if want := `"cairn":{"login":{"source":"ldap","via":"token"}}`; !strings.Contains(string(raw), want) {
		t.Errorf("event JSON %s lacks %s", raw, want)
	}
	if !strings.Contains(logs.String(), "source=oidc") {
		t.Errorf("no audit line with source=oidc:\n%s", logs.String())
	}
}
