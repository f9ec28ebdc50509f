package notify

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"
)

// SpoolDir is where processes that find the queue file at queuePath held
// by another leave their events for it.
func SpoolDir(queuePath string) string { return queuePath + ".spool" }

// fill gives ev the ID, timestamp and source Notify would.
func fill(ev *Event, source Source) {
	if ev.ID == "" {
		ev.ID = NewID()
	}
	if ev.Timestamp.IsZero() {
		ev.Timestamp = time.Now().UTC()
	}
	if ev.Source == (Source{}) {
		ev.Source = source
	}
}

// Spool leaves events for the process holding the queue file at
// queuePath (ErrQueueLocked), which queues and sends them within
// spoolPoll: one file in SpoolDir, written aside and renamed into place,
// so the holder never reads a part. The holder filters them by its own
// endpoints' ignore lists.
func Spool(queuePath string, source Source, events []Event) error {
	if len(events) == 0 {
		return nil
	}
	for i := range events {
		fill(&events[i], source)
	}
	data, err := json.Marshal(events)
	if err != nil {
		return fmt.Errorf("notify: spool: %w", err)
	}
	dir := SpoolDir(queuePath)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return fmt.Errorf("notify: spool: %w", err)
	}
	f, err := os.CreateTemp(dir, ".part-*")
	if err != nil {
		return fmt.Errorf("notify: spool: %w", err)
	}
	_, err = f.Write(data)
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	// Named by time: the holder queues spooled files in the order they
	// were written.
	name := filepath.Join(dir, fmt.Sprintf("%020d-%s.json", time.Now().UnixNano(), NewID()))
	if err == nil {
		err = os.Rename(f.Name(), name)
	}
	if err != nil {
		os.Remove(f.Name())
		return fmt.Errorf("notify: spool: %w", err)
	}
	return nil
}

// ingest queues the spooled files, oldest first, and deletes each once its
// events are queued. A file that does not parse is renamed *.bad and left
// for the operator.
func (n *Notifier) ingest() {
	entries, err := os.ReadDir(n.spool)
	if err != nil {
		if !errors.Is(err, fs.ErrNotExist) {
			n.log.Error("notifications: spool unreadable", "dir", n.spool, "err", err)
		}
		return
	}
	for _, e := range entries {
		name := e.Name()
		if e.IsDir() || strings.HasPrefix(name, ".") || !strings.HasSuffix(name, ".json") {
			continue
		}
		p := filepath.Join(n.spool, name)
		data, err := os.ReadFile(p)
		if err != nil {
			n.log.Error("notifications: spooled events unreadable", "file", p, "err", err)
			return
		}
		var events []Event
		if err := json.Unmarshal(data, &events); err != nil {
			n.log.Error("notifications: spooled events do not parse; set aside", "file", p+".bad", "err", err)
			os.Rename(p, p+".bad")
			continue
		}
		if err := n.append(events); err != nil {
			// Kept: the next poll tries again.
			n.log.Error("notifications: spooled events not queued yet", "file", p, "err", err)
			return
		}
		if err := os.Remove(p); err != nil {
			n.log.Error("notifications: spooled events queued, their file stays (they will be sent again)", "file", p, "err", err)
		}
	}
}

// Deliver is Run for a short-lived process (cairn gc), instead of it: it
// queues events (and what other processes spooled), then sends every
// endpoint's queue until it is empty, the endpoint failed its threshold
// of tries in a row, or ctx is done. What is not delivered stays queued
// for the next process that holds the queue (cairn serve).
func (n *Notifier) Deliver(ctx context.Context, events []Event) error {
	for i := range events {
		fill(&events[i], n.source)
	}
	n.ingest()
	if err := n.append(events); err != nil {
		return fmt.Errorf("notify: %w", err)
	}
	var wg sync.WaitGroup
	for _, e := range n.eps {
		wg.Go(func() { n.send(ctx, e, true) })
	}
	wg.Wait()
	return nil
}
