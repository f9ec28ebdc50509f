// Package notify sends registry events to webhook endpoints, as
// distribution's notifications do: the same configuration, the same JSON
// envelope (EnvelopeMediaType), so existing receivers work unchanged.
//
// Delivery is at least once. An event is written to a bounded on-disk queue
// per endpoint (bbolt) before any attempt to send it, and removed only after
// the endpoint answered 2xx or 3xx; a restart resumes from what is queued.
// A full queue drops its oldest events and counts them. Events reach each
// endpoint in the order they were queued, one per envelope.
//
// Life of an event: Notify hands it to the writer goroutine (it blocks only
// while the writer is behind by intakeSize events); the writer filters it
// per endpoint (ignore.mediatypes, ignore.actions), appends it to the
// queues in one transaction with the events that arrived meanwhile, and
// wakes the endpoints' senders. A sender POSTs the oldest events with the
// endpoint's timeout; after threshold failures in a row it waits backoff
// before each further try, and it never gives up on an event.
//
// One process holds the queue file (bbolt locks it: two processes never
// write one file). A short-lived process that finds it held (cairn gc
// beside a running cairn serve) leaves its events in the spool beside it
// (Spool: one file per call, written aside and renamed); the holder moves
// spooled files into its queue, in name order, at start and every
// spoolPoll, and deletes each once its events are queued (a crash between
// the two sends them twice: at least once). A short-lived process that
// gets the queue uses Deliver: it queues, sends until the queues are empty
// or each endpoint failed threshold times in a row, and leaves the rest
// queued for the next holder.
package notify

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"slices"
	"sync"
	"time"

	"github.com/google/uuid"
)

// Endpoint is one receiver, with distribution's defaults for zero values.
type Endpoint struct {
	Name    string
	URL     string
	Headers http.Header
	// Timeout bounds one POST (default 1s).
	Timeout time.Duration
	// Threshold failures in a row make the sender wait Backoff before each
	// further try (defaults 10 and 1s).
	Threshold int
	Backoff   time.Duration
	// IgnoreMediaTypes and IgnoreActions drop events whose target has one
	// of the media types, or whose action is listed, before they are
	// queued.
	IgnoreMediaTypes []string
	IgnoreActions    []string
}

// Metrics receives delivery counts (metrics.Notifications implements it).
type Metrics interface {
	NotifySent(endpoint string, events int)
	NotifyFailed(endpoint string)
	NotifyDropped(endpoint string, events int)
	NotifyPending(endpoint string, events int)
}

// Options configure a Notifier.
type Options struct {
	Endpoints []Endpoint
	// QueuePath is the bbolt file of the queues; MaxEvents bounds each
	// endpoint's queue (default DefaultMaxEvents).
	QueuePath string
	MaxEvents int
	// Source names this process in every event.
	Source  Source
	Metrics Metrics
	Logger  *slog.Logger
}

// DefaultMaxEvents bounds an endpoint's queue when Options.MaxEvents is 0.
const DefaultMaxEvents = 10000

const (
	// intakeSize is how many events may wait for the writer; the writer
	// takes all that wait in one transaction, so under load the cost of a
	// commit is shared by many events.
	intakeSize = 1024
	// maxPeek bounds the events a sender reads from the queue at once.
	maxPeek = 64
	// spoolPoll is how often the queue's holder looks for spooled events.
	spoolPoll = 2 * time.Second
)

// Notifier queues events and delivers them.
type Notifier struct {
	eps     []*endpoint
	queue   *Queue
	spool   string // directory of events spooled by other processes
	source  Source
	metrics Metrics
	log     *slog.Logger

	intake chan Event
	done   chan struct{} // closed when Run returns: Notify stops waiting
	once   sync.Once
}

type endpoint struct {
	Endpoint
	client *http.Client
	wake   chan struct{} // has one token when new events were queued
}

// New opens the queue file and returns a Notifier; Run delivers.
func New(opts Options) (*Notifier, error) {
	max := opts.MaxEvents
	if max == 0 {
		max = DefaultMaxEvents
	}
	q, err := OpenQueue(opts.QueuePath, max)
	if err != nil {
		return nil, err
	}
	n := &Notifier{
		queue: q, spool: SpoolDir(opts.QueuePath), source: opts.Source, metrics: opts.Metrics, log: opts.Logger,
		intake: make(chan Event, intakeSize), done: make(chan struct{}),
	}
	if n.log == nil {
		n.log = slog.New(slog.DiscardHandler)
	}
	if n.metrics == nil {
		n.metrics = nopMetrics{}
	}
	for _, e := range opts.Endpoints {
		if e.Timeout <= 0 {
			e.Timeout = time.Second
		}
		if e.Threshold <= 0 {
			e.Threshold = 10
		}
		if e.Backoff <= 0 {
			e.Backoff = time.Second
		}
		n.eps = append(n.eps, &endpoint{
			Endpoint: e,
			client:   &http.Client{Timeout: e.Timeout},
			wake:     make(chan struct{}, 1),
		})
		n.metrics.NotifyPending(e.Name, q.Len(e.Name))
		// Headers are not logged: they often hold credentials.
		n.log.Info("notifications: endpoint", "name", e.Name, "url", e.URL, "timeout", e.Timeout,
			"threshold", e.Threshold, "backoff", e.Backoff, "queued", q.Len(e.Name))
	}
	return n, nil
}

// NewID returns a random identifier for an event, request or instance.
func NewID() string { return uuid.NewString() }

// Notify queues ev for every endpoint that does not ignore it, filling its
// ID, timestamp and source when empty. It does not wait for delivery.
// After Run has returned, events are dropped.
func (n *Notifier) Notify(ev Event) {
	if ev.ID == "" {
		ev.ID = NewID()
	}
	if ev.Timestamp.IsZero() {
		ev.Timestamp = time.Now().UTC()
	}
	if ev.Source == (Source{}) {
		ev.Source = n.source
	}
	select {
	case n.intake <- ev:
	case <-n.done:
		n.log.Warn("notifications: event after shutdown not queued", "action", ev.Action)
	}
}

// Run writes and delivers events until ctx is done, then writes what
// Notify handed over and returns. Call it once; Close after. Each endpoint
// has a loop of its own, not tasks: it sends in queue order, waits on new
// events and backs off on failures, which would hold a task worker idle.
func (n *Notifier) Run(ctx context.Context) {
	var wg sync.WaitGroup
	for _, e := range n.eps {
		wg.Go(func() { n.send(ctx, e, false) })
	}
	n.ingest()
	poll := time.NewTicker(spoolPoll)
	defer poll.Stop()
	for {
		select {
		case ev := <-n.intake:
			n.write(ev)
		case <-poll.C:
			n.ingest()
		case <-ctx.Done():
			// Events handed over before shutdown are written, so a
			// restart delivers them.
			n.once.Do(func() { close(n.done) })
			for {
				select {
				case ev := <-n.intake:
					n.write(ev)
					continue
				default:
				}
				break
			}
			wg.Wait()
			return
		}
	}
}

// Close closes the queue file; call it after Run has returned.
func (n *Notifier) Close() error { return n.queue.Close() }

// write queues first and the events waiting behind it in one transaction.
func (n *Notifier) write(first Event) {
	batch := []Event{first}
	for len(batch) < intakeSize {
		select {
		case ev := <-n.intake:
			batch = append(batch, ev)
			continue
		default:
		}
		break
	}
	if err := n.append(batch); err != nil {
		n.log.Error("notifications: events lost: the queue could not be written", "events", len(batch), "err", err)
	}
}

// append queues batch for the endpoints that do not ignore its events, in
// one transaction, and wakes their senders.
func (n *Notifier) append(batch []Event) error {
	items := make(map[string][][]byte)
	for _, ev := range batch {
		data, err := json.Marshal(ev)
		if err != nil {
			n.log.Error("notifications: event not encodable", "action", ev.Action, "err", err)
			continue
		}
		for _, e := range n.eps {
			if e.ignores(ev) {
				continue
			}
			items[e.Name] = append(items[e.Name], data)
		}
	}
	if len(items) == 0 {
		return nil
	}
	dropped, err := n.queue.Append(items)
	if err != nil {
		return err
	}
	for _, e := range n.eps {
		if _, ok := items[e.Name]; !ok {
			continue
		}
		if d := dropped[e.Name]; d > 0 {
			n.metrics.NotifyDropped(e.Name, d)
			n.log.Warn("notifications: queue full, oldest events dropped", "endpoint", e.Name, "dropped", d)
		}
		n.metrics.NotifyPending(e.Name, n.queue.Len(e.Name))
		select {
		case e.wake <- struct{}{}:
		default:
		}
	}
	return nil
}

func (e *endpoint) ignores(ev Event) bool {
	return slices.Contains(e.IgnoreActions, ev.Action) ||
		(ev.Target.MediaType != "" && slices.Contains(e.IgnoreMediaTypes, ev.Target.MediaType))
}

// send delivers e's queue, oldest first, until ctx is done (once, with
// untilEmpty: until the queue is empty or threshold tries in a row
// failed). Events go one per envelope, as distribution sends them (some
// receivers read only the first); those delivered are removed from the
// queue together, so a commit is shared by up to maxPeek deliveries.
func (n *Notifier) send(ctx context.Context, e *endpoint, untilEmpty bool) {
	failures := 0
	for ctx.Err() == nil {
		items, err := n.queue.Peek(e.Name, maxPeek)
		if err != nil {
			n.log.Error("notifications: queue unreadable", "endpoint", e.Name, "err", err)
			items = nil
			if untilEmpty {
				return
			}
		}
		if len(items) == 0 {
			if untilEmpty {
				return
			}
			select {
			case <-e.wake:
			case <-ctx.Done():
			}
			continue
		}
		delivered := 0
		for _, it := range items {
			if err = e.post(ctx, it.Data); err != nil {
				break
			}
			delivered++
		}
		if delivered > 0 {
			if failures >= e.Threshold {
				n.log.Info("notifications: endpoint recovered", "endpoint", e.Name, "failures", failures)
			}
			failures = 0
			seqs := make([]uint64, delivered)
			for i, it := range items[:delivered] {
				seqs[i] = it.Seq
			}
			if rerr := n.queue.Remove(e.Name, seqs); rerr != nil {
				// Delivered, still queued: sent again later (at least once).
				n.log.Error("notifications: delivered events stay queued", "endpoint", e.Name, "err", rerr)
			}
			n.metrics.NotifySent(e.Name, delivered)
			n.metrics.NotifyPending(e.Name, n.queue.Len(e.Name))
		}
		if err == nil || ctx.Err() != nil {
			continue
		}
		failures++
		n.metrics.NotifyFailed(e.Name)
		if untilEmpty && failures >= e.Threshold {
			n.log.Warn("notifications: endpoint failing; its events stay queued for the next process that holds the queue", "endpoint", e.Name, "failures", failures, "queued", n.queue.Len(e.Name), "err", err)
			return
		}
		if failures == e.Threshold {
			n.log.Warn("notifications: endpoint failing; backing off between tries", "endpoint", e.Name, "failures", failures, "backoff", e.Backoff, "err", err)
		}
		if failures >= e.Threshold {
			select {
			case <-time.After(e.Backoff):
			case <-ctx.Done():
			}
		}
	}
}

// post sends one event; any 2xx or 3xx answer (after redirects) delivers
// it, as in distribution.
func (e *endpoint) post(ctx context.Context, event []byte) error {
	body := make([]byte, 0, len(event)+len(`{"events":[]}`))
	body = append(append(append(body, `{"events":[`...), event...), "]}"...)
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, e.URL, bytes.NewReader(body))
	if err != nil {
		return err
	}
	for k, vs := range e.Headers {
		for _, v := range vs {
			req.Header.Add(k, v)
		}
	}
	req.Header.Set("Content-Type", EnvelopeMediaType)
	resp, err := e.client.Do(req)
	if err != nil {
		return err
	}
	io.Copy(io.Discard, io.LimitReader(resp.Body, 64<<10))
	resp.Body.Close()
	if resp.StatusCode < 200 || resp.StatusCode >= 400 {
		return fmt.Errorf("%w: %s", errStatus, resp.Status)
	}
	return nil
}

var errStatus = errors.New("notify: endpoint answered")

type nopMetrics struct{}

func (nopMetrics) NotifySent(string, int)    {}
func (nopMetrics) NotifyFailed(string)       {}
func (nopMetrics) NotifyDropped(string, int) {}
func (nopMetrics) NotifyPending(string, int) {}
