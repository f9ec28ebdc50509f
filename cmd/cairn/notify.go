package main

import (
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"slices"

	"github.com/opencontainers/go-digest"

	"github.com/cairn-registry/cairn/internal/config"
	"github.com/cairn-registry/cairn/internal/gc"
	"github.com/cairn-registry/cairn/internal/metrics"
	"github.com/cairn-registry/cairn/internal/notify"
	"github.com/cairn-registry/cairn/internal/retention"
)

// newNotifier opens the notification queue and returns the Notifier of the
// enabled endpoints; nil when there is none.
func newNotifier(cfg *config.Config, m *metrics.Metrics, log *slog.Logger) (*notify.Notifier, error) {
	enabled := cfg.Notifications.Enabled()
	if len(enabled) == 0 {
		return nil, nil
	}
	path, err := notifyQueuePath(cfg)
	if err != nil {
		return nil, err
	}
	var eps []notify.Endpoint
	for _, e := range enabled {
		eps = append(eps, notify.Endpoint{
			Name: e.Name, URL: e.URL, Headers: http.Header(e.Headers),
			Timeout: e.Timeout, Threshold: e.Threshold, Backoff: e.Backoff,
			IgnoreMediaTypes: append(slices.Clone(e.Ignore.MediaTypes), e.IgnoredMediaTypes...),
			IgnoreActions:    e.Ignore.Actions,
		})
	}
	n, err := notify.New(notify.Options{
		Endpoints: eps,
		QueuePath: path,
		MaxEvents: cfg.Notifications.Queue.MaxEvents,
		Source:    notify.Source{Addr: sourceAddr(cfg.HTTP.Addr), InstanceID: notify.NewID()},
		Metrics:   m.Notifications(),
		Logger:    log,
	})
	if errors.Is(err, notify.ErrQueueLocked) {
		return nil, fmt.Errorf("notifications: %w (a second cairn serve on the same queue? set notifications.queue.path)", err)
	}
	if err != nil {
		return nil, fmt.Errorf("notifications: %w", err)
	}
	log.Info("notifications: queue", "path", path)
	return n, nil
}

// notifyQueuePath is where undelivered events are kept: the configured
// path, else beside the registry's files with the filesystem driver, else
// in the user's cache directory.
func notifyQueuePath(cfg *config.Config) (string, error) {
	if p := cfg.Notifications.Queue.Path; p != "" {
		return p, nil
	}
	if fs := cfg.Storage.Filesystem; fs != nil {
		return filepath.Join(fs.RootDirectory, "cairn-notifications.db"), nil
	}
	dir, err := os.UserCacheDir()
	if err != nil {
		return "", fmt.Errorf("notifications.queue.path must be set: %w", err)
	}
	return filepath.Join(dir, "cairn", "notifications.db"), nil
}

// sourceAddr names this node in events, as distribution does: the host
// name and the listening port.
func sourceAddr(addr string) string {
	host, _ := os.Hostname()
	if _, port, err := net.SplitHostPort(addr); err == nil {
		return net.JoinHostPort(host, port)
	}
	return host
}

// retentionEvents are distribution's delete events for what retention
// deleted: a tag, or a manifest by digest; the actor is "retention".
func retentionEvents(rep *retention.Report) []notify.Event {
	var out []notify.Event
	for _, d := range rep.Tags {
		out = append(out, notify.Event{Action: notify.ActionDelete, Target: notify.Target{Repository: d.Repository, Tag: d.Tag}, Actor: notify.Actor{Name: "retention"}})
	}
	for _, d := range rep.Manifests {
		out = append(out, notify.Event{Action: notify.ActionDelete, Target: notify.Target{Repository: d.Repository, Digest: d.Digest}, Actor: notify.Actor{Name: "retention"}})
	}
	return out
}

// gcEvent is the event of a finished GC run.
func gcEvent(rep *gc.Report, err error) notify.Event {
	run := &notify.GCRun{}
	if err != nil {
		run.Error = err.Error()
	}
	if rep != nil {
		run.RunID, run.DryRun, run.Seconds = rep.RunID, rep.DryRun, rep.Seconds
		run.Manifests, run.TagIndexEntries = rep.Deleted.Manifests, rep.Deleted.TagIndexEntries
		run.LayerLinks, run.Blobs, run.BytesFreed = rep.Deleted.LayerLinks, rep.Deleted.Blobs, rep.Deleted.BytesFreed
		run.DedupFiles, run.DeleteFailures = rep.Deleted.DedupFiles, rep.DeleteFailures
	}
	return notify.Event{Action: notify.ActionGC, Cairn: &notify.Details{GC: run}}
}

// dedupEvents turns the dedup worker's layers into events
// (dedup.LayerEvents).
type dedupEvents struct{ n *notify.Notifier }

func (e dedupEvents) LayerDeduplicated(layer digest.Digest) {
	e.n.Notify(notify.Event{
		Action: notify.ActionDedup,
		Target: notify.Target{Digest: layer},
		Cairn:  &notify.Details{Dedup: &notify.DedupLayer{Outcome: "deduplicated"}},
	})
}
