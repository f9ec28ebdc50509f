// Package health runs distribution's periodic health checks (the health
// section: storage driver, files, HTTP URIs, TCP addresses) and keeps their
// verdict: a check that failed Threshold times in a row makes the registry
// unhealthy until it passes again. The API answers 503 while it is
// unhealthy, and the debug listener reports each failing check.
package health

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"net"
	"net/http"
	"os"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// Check is one periodic check.
type Check struct {
	// Name identifies the check in reports ("storagedriver_s3",
	// "file:/srv/down", ...).
	Name     string
	Interval time.Duration
	// Threshold is how many failures in a row make the check fail; 0
	// means 1.
	Threshold int
	// Run returns nil when what it checks is healthy.
	Run func(ctx context.Context) error
}

// Checker runs checks and holds their current verdicts.
type Checker struct {
	checks []Check

	mu     sync.Mutex
	failed map[string]error // checks currently failing
	// verdict caches the joined failures for the API's per-request
	// question; nil (the pointer or the error) is healthy.
	verdict atomic.Pointer[error]
}

// New returns a Checker of checks; nothing runs until Run.
func New(checks []Check) *Checker {
	return &Checker{checks: checks, failed: make(map[string]error)}
}

// Run runs every check at once and then every Interval, each on a goroutine
// of its own (not on the background task runner: a verdict must not wait
// behind a GC or dedup queue), until ctx ends.
func (c *Checker) Run(ctx context.Context) {
	var wg sync.WaitGroup
	for _, ch := range c.checks {
		wg.Go(func() { c.loop(ctx, ch) })
	}
	wg.Wait()
}

func (c *Checker) loop(ctx context.Context, ch Check) {
	threshold := max(ch.Threshold, 1)
	failures := 0
	t := time.NewTicker(ch.Interval)
	defer t.Stop()
	for {
		err := ch.Run(ctx)
		if ctx.Err() != nil {
			return
		}
		if err == nil {
			failures = 0
			c.set(ch.Name, nil)
		} else if failures++; failures >= threshold {
			c.set(ch.Name, err)
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

func (c *Checker) set(name string, err error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if err == nil {
		delete(c.failed, name)
	} else {
		c.failed[name] = err
	}
	var errs []error
	for _, n := range slices.Sorted(maps.Keys(c.failed)) {
		errs = append(errs, fmt.Errorf("%s: %w", n, c.failed[n]))
	}
	joined := errors.Join(errs...)
	c.verdict.Store(&joined)
}

// Err returns nil while every check passes, else the failures on one line.
func (c *Checker) Err() error {
	p := c.verdict.Load()
	if p == nil || *p == nil {
		return nil
	}
	return errors.New(strings.ReplaceAll((*p).Error(), "\n", "; "))
}

// Handler answers distribution's /debug/health: a JSON object of the
// failing checks' errors by name, 503 when there is one, else {} and 200.
func (c *Checker) Handler() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		c.mu.Lock()
		body := make(map[string]string, len(c.failed))
		for n, err := range c.failed {
			body[n] = err.Error()
		}
		c.mu.Unlock()
		w.Header().Set("Content-Type", "application/json; charset=utf-8")
		w.Header().Set("Cache-Control", "no-store")
		if len(body) > 0 {
			w.WriteHeader(http.StatusServiceUnavailable)
		}
		json.NewEncoder(w).Encode(body)
	})
}

// File fails while path exists: creating it takes a registry out of
// rotation.
func File(path string) func(ctx context.Context) error {
	return func(context.Context) error {
		if _, err := os.Stat(path); err == nil {
			return errors.New("file exists")
		}
		return nil
	}
}

// HTTP sends HEAD to uri with headers and fails on a status other than
// status, or when no answer comes within timeout.
func HTTP(uri string, headers http.Header, status int, timeout time.Duration) func(ctx context.Context) error {
	client := &http.Client{Timeout: timeout}
	return func(ctx context.Context) error {
		req, err := http.NewRequestWithContext(ctx, http.MethodHead, uri, nil)
		if err != nil {
			return err
		}
		for k, vs := range headers {
			for _, v := range vs {
				req.Header.Add(k, v)
			}
		}
		resp, err := client.Do(req)
		if err != nil {
			return fmt.Errorf("HEAD %s: %w", uri, err)
		}
		resp.Body.Close()
		if resp.StatusCode != status {
			return fmt.Errorf("HEAD %s: status %d, want %d", uri, resp.StatusCode, status)
		}
		return nil
	}
}

// TCP fails when addr does not accept a connection within timeout.
func TCP(addr string, timeout time.Duration) func(ctx context.Context) error {
	return func(ctx context.Context) error {
		d := net.Dialer{Timeout: timeout}
		conn, err := d.DialContext(ctx, "tcp", addr)
		if err != nil {
			return fmt.Errorf("connect %s: %w", addr, err)
		}
		conn.Close()
		return nil
	}
}
