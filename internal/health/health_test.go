package health

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"
)

// A check fails only after Threshold failures in a row and recovers on its
// first pass. The check's results are handed over one by one, and each is
// known to be recorded once the next run starts, so nothing depends on
// timing.
func TestThreshold(t *testing.T) {
	results := make(chan error)
	started := make(chan struct{})
	c := New([]Check{{Name: "flaky", Interval: time.Millisecond, Threshold: 3, Run: func(ctx context.Context) error {
		select {
		case started <- struct{}{}:
		case <-ctx.Done():
			return nil
		}
		select {
		case err := <-results:
			return err
		case <-ctx.Done():
			return nil
		}
	}}})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { c.Run(ctx); close(done) }()
	defer func() { cancel(); <-done }()

	boom := errors.New("boom")
	// Three failures in a row make it fail; one pass heals it.
	<-started
	results <- boom
	<-started
	results <- boom
	<-started
	if c.Err() != nil {
		t.Fatalf("failing after 2 of 3: %v", c.Err())
	}
	results <- boom
	<-started
	if err := c.Err(); err == nil || !strings.Contains(err.Error(), "flaky: boom") {
		t.Fatalf("after 3 failures: %v", err)
	}
	results <- nil
	<-started
	if err := c.Err(); err != nil {
		t.Fatalf("after a pass: %v", err)
	}
	// A failure after the pass starts counting again.
	results <- boom
	<-started
	if err := c.Err(); err != nil {
		t.Fatalf("after 1 failure: %v", err)
	}
	cancel()
}

func TestHandler(t *testing.T) {
	c := New(nil)
	w := httptest.NewRecorder()
	c.Handler().ServeHTTP(w, httptest.NewRequest(http.MethodGet, "/debug/health", nil))
	if w.Code != http.StatusOK || strings.TrimSpace(w.Body.String()) != "{}" {
		t.Errorf("healthy: %d %q", w.Code, w.Body)
	}
	c.set("file:/x", errors.New("file exists"))
	w = httptest.NewRecorder()
	c.Handler().ServeHTTP(w, httptest.NewRequest(http.MethodGet, "/debug/health", nil))
	if w.Code != http.StatusServiceUnavailable || strings.TrimSpace(w.Body.String()) != `{"file:/x":"file exists"}` {
		t.Errorf("failing: %d %q", w.Code, w.Body)
	}
}
