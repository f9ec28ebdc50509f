// Package notify sends distribution's event notifications: every push,
// pull, mount and delete becomes an event POSTed, one envelope per event,
// to each configured endpoint (the notifications section), in order, with
// distribution's JSON shape and media type, so that listeners written for
// distribution work unchanged.
//
// Delivery is at least once while the process runs: each endpoint has an
// in-memory queue (bounded; an event that finds it full is dropped and
// logged) and retries an event until its listener answers 2xx or 3xx,
// waiting Backoff between tries once Threshold tries in a row failed.
// Events still queued when the process stops are lost, as in distribution.
package notify

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/json"
	"fmt"
	"log/slog"
	"net/http"
	"slices"
	"sync"
	"time"

	ocispec "github.com/opencontainers/image-spec/specs-go/v1"
)

// MediaType is the Content-Type of every envelope.
const MediaType = "application/vnd.docker.distribution.events.v2+json"

// Actions.
const (
	ActionPull   = "pull"
	ActionPush   = "push"
	ActionMount  = "mount"
	ActionDelete = "delete"
)

// Event is one event, as distribution writes it.
type Event struct {
	ID        string    `json:"id,omitempty"`
	Timestamp time.Time `json:"timestamp"`
	Action    string    `json:"action,omitempty"`
	Target    Target    `json:"target"`
	Request   Request   `json:"request"`
	Actor     Actor     `json:"actor"`
	Source    Source    `json:"source"`
}

// Target is what the event is about.
type Target struct {
	ocispec.Descriptor
	Length         int64                `json:"length,omitempty"`
	Repository     string               `json:"repository,omitempty"`
	FromRepository string               `json:"fromRepository,omitempty"`
	URL            string               `json:"url,omitempty"`
	Tag            string               `json:"tag,omitempty"`
	References     []ocispec.Descriptor `json:"references,omitempty"`
}

// Request describes the request that caused the event.
type Request struct {
	ID        string `json:"id"`
	Addr      string `json:"addr,omitempty"`
	Host      string `json:"host,omitempty"`
	Method    string `json:"method"`
	UserAgent string `json:"useragent"`
}

// Actor is the authenticated user, if any.
type Actor struct {
	Name string `json:"name,omitempty"`
}

// Source is the registry node that sent the event.
type Source struct {
	Addr       string `json:"addr,omitempty"`
	InstanceID string `json:"instanceID,omitempty"`
}

type envelope struct {
	Events []Event `json:"events"`
}

// Endpoint is one listener.
type Endpoint struct {
	Name    string
	URL     string
	Headers http.Header
	// Timeout bounds one POST (default 1s).
	Timeout time.Duration
	// Threshold tries in a row must fail before the sender waits Backoff
	// between tries (defaults 10 and 1s).
	Threshold int
	Backoff   time.Duration
	// IgnoreMediaTypes and IgnoreActions drop events whose target has one
	// of these media types, or whose action is one of these.
	IgnoreMediaTypes []string
	IgnoreActions    []string
}

// queueLen bounds the events waiting per endpoint.
const queueLen = 10000

// Notifier fans events out to endpoints.
type Notifier struct {
	endpoints []*sender
	log       *slog.Logger
}

type sender struct {
	Endpoint
	client *http.Client
	queue  chan Event
}

// New returns a Notifier for endpoints; nothing is sent until Run.
func New(endpoints []Endpoint, log *slog.Logger) *Notifier {
	n := &Notifier{log: log}
	for _, e := range endpoints {
		if e.Timeout <= 0 {
			e.Timeout = time.Second
		}
		if e.Threshold <= 0 {
			e.Threshold = 10
		}
		if e.Backoff <= 0 {
			e.Backoff = time.Second
		}
		n.endpoints = append(n.endpoints, &sender{
			Endpoint: e,
			client:   &http.Client{Timeout: e.Timeout},
			queue:    make(chan Event, queueLen),
		})
	}
	return n
}

// NewID returns a random identifier for an event or a request.
func NewID() string { return rand.Text() }

// Notify queues ev for every endpoint that does not ignore it. It never
// blocks.
func (n *Notifier) Notify(ev Event) {
	if ev.ID == "" {
		ev.ID = NewID()
	}
	if ev.Timestamp.IsZero() {
		ev.Timestamp = time.Now().UTC()
	}
	for _, s := range n.endpoints {
		if slices.Contains(s.IgnoreActions, ev.Action) || (ev.Target.MediaType != "" && slices.Contains(s.IgnoreMediaTypes, ev.Target.MediaType)) {
			continue
		}
		select {
		case s.queue <- ev:
		default:
			n.log.Warn("notifications: queue full; event dropped", "endpoint", s.Name, "action", ev.Action, "repository", ev.Target.Repository, "digest", ev.Target.Digest)
		}
	}
}

// Run sends queued events until ctx ends.
func (n *Notifier) Run(ctx context.Context) {
	var wg sync.WaitGroup
	for _, s := range n.endpoints {
		wg.Go(func() { n.send(ctx, s) })
	}
	wg.Wait()
}

func (n *Notifier) send(ctx context.Context, s *sender) {
	for {
		var ev Event
		select {
		case <-ctx.Done():
			return
		case ev = <-s.queue:
		}
		for failures := 0; ; {
			err := s.post(ctx, ev)
			if err == nil {
				break
			}
			if ctx.Err() != nil {
				return
			}
			failures++
			n.log.Warn("notifications: delivery failed; retrying", "endpoint", s.Name, "failures", failures, "err", err)
			if failures >= s.Threshold {
				select {
				case <-ctx.Done():
					return
				case <-time.After(s.Backoff):
				}
			}
		}
	}
}

func (s *sender) post(ctx context.Context, ev Event) error {
	body, err := json.MarshalIndent(envelope{Events: []Event{ev}}, "", "   ")
	if err != nil {
		return err
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, s.URL, bytes.NewReader(body))
	if err != nil {
		return err
	}
	for k, vs := range s.Headers {
		for _, v := range vs {
			req.Header.Add(k, v)
		}
	}
	req.Header.Set("Content-Type", MediaType)
	resp, err := s.client.Do(req)
	if err != nil {
		return err
	}
	resp.Body.Close()
	if resp.StatusCode < 200 || resp.StatusCode >= 400 {
		return fmt.Errorf("%s answered %s", s.URL, resp.Status)
	}
	return nil
}
