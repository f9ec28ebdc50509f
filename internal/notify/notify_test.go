package notify

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"slices"
	"strconv"
	"sync"
	"testing"
	"time"
)

// sink is a receiver whose answers the test scripts: statuses are used in
// turn (the last one repeats); accepted events are recorded in order.
type sink struct {
	mu       sync.Mutex
	statuses []int
	tries    int
	got      []string // Target.Tag of accepted events
}

func (s *sink) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	var env Envelope
	if err := json.NewDecoder(r.Body).Decode(&env); err != nil || r.Header.Get("Content-Type") != EnvelopeMediaType || r.Header.Get("Authorization") != "Bearer t" {
		http.Error(w, "bad request", http.StatusBadRequest)
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	status := s.statuses[min(s.tries, len(s.statuses)-1)]
	s.tries++
	if status < 400 {
		for _, ev := range env.Events {
			s.got = append(s.got, ev.Target.Tag)
		}
	}
	w.WriteHeader(status)
}

func (s *sink) accepted() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.got)
}

func waitAccepted(t *testing.T, s *sink, n int) []string {
	t.Helper()
	deadline := time.Now().Add(time.Minute) // a hang guard
	for len(s.accepted()) < n {
		if time.Now().After(deadline) {
			t.Fatalf("accepted %v, want %d events", s.accepted(), n)
		}
		time.Sleep(10 * time.Millisecond)
	}
	return s.accepted()
}

// TestNotifierRetriesInOrder: refusals (5xx, 4xx) are retried until the
// endpoint accepts, a 3xx answer counts as delivered as in distribution,
// ignored actions and media types are never sent, and events arrive in the
// order they were notified.
func TestNotifierRetriesInOrder(t *testing.T) {
	s := &sink{statuses: []int{503, 400, 500, http.StatusNotModified, 200}}
	srv := httptest.NewServer(s)
	defer srv.Close()
	n, err := New(Options{
		QueuePath: filepath.Join(t.TempDir(), "q.db"),
		Endpoints: []Endpoint{{
			Name: "e", URL: srv.URL, Headers: http.Header{"Authorization": {"Bearer t"}},
			Threshold: 2, Backoff: time.Millisecond,
			IgnoreActions: []string{ActionPull}, IgnoreMediaTypes: []string{"text/skip"},
		}},
	})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan struct{})
	go func() { n.Run(ctx); close(done) }()
	var want []string
	for i := range 50 {
		tag := strconv.Itoa(i)
		switch i % 5 {
		case 1:
			n.Notify(Event{Action: ActionPull, Target: Target{Tag: "pull" + tag}})
		case 2:
			n.Notify(Event{Action: ActionPush, Target: Target{Tag: "skip" + tag, MediaType: "text/skip"}})
		default:
			n.Notify(Event{Action: ActionPush, Target: Target{Tag: tag, MediaType: "text/keep"}})
			want = append(want, tag)
		}
	}
	got := waitAccepted(t, s, len(want))
	cancel()
	<-done
	n.Close()
	if !slices.Equal(got, want) {
		t.Fatalf("accepted %v\nwant     %v", got, want)
	}
}

// TestNotifierRestart: events notified while the endpoint is down are on
// disk when Run returns, and a new Notifier on the same file delivers them.
func TestNotifierRestart(t *testing.T) {
	s := &sink{statuses: []int{503}}
	srv := httptest.NewServer(s)
	defer srv.Close()
	path := filepath.Join(t.TempDir(), "q.db")
	opts := Options{QueuePath: path, Endpoints: []Endpoint{{
		Name: "e", URL: srv.URL, Headers: http.Header{"Authorization": {"Bearer t"}}, Threshold: 1, Backoff: time.Millisecond,
	}}}
	n, err := New(opts)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan struct{})
	go func() { n.Run(ctx); close(done) }()
	for i := range 5 {
		n.Notify(Event{Action: ActionPush, Target: Target{Tag: strconv.Itoa(i)}})
	}
	cancel()
	<-done
	if err := n.Close(); err != nil {
		t.Fatal(err)
	}

	s.mu.Lock()
	s.statuses = []int{200}
	s.tries = 0
	s.mu.Unlock()
	n, err = New(opts)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel = context.WithCancel(t.Context())
	done = make(chan struct{})
	go func() { n.Run(ctx); close(done) }()
	got := waitAccepted(t, s, 5)
	cancel()
	<-done
	n.Close()
	if !slices.Equal(got, []string{"0", "1", "2", "3", "4"}) {
		t.Fatalf("after restart accepted %v", got)
	}
}
