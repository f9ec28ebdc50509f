// Package poll waits, in tests, for what a server does in the background
// (a GC run, a restore, a log line): it asks again until the answer is
// "done", and fails saying what it was still waiting for.
package poll

import (
	"testing"
	"time"
)

// margin is how long before the test binary's -timeout Until gives up, so
// that the failure names what was awaited instead of the binary panicking.
const margin = 10 * time.Second

// Until calls pending every interval until it returns "" (done); what it
// returns otherwise says what is awaited. There is no deadline of its own:
// a busy machine is slow, not wrong. Shortly before the test binary's
// -timeout it fails saying what it was still waiting for.
func Until(t *testing.T, interval time.Duration, pending func() string) {
	t.Helper()
	deadline, ok := t.Deadline()
	for {
		what := pending()
		if what == "" {
			return
		}
		if ok && time.Until(deadline) < margin {
			t.Fatalf("still waiting for %s as the test binary's -timeout nears", what)
		}
		time.Sleep(interval)
	}
}

// Within is Until bounded by a hang guard: after bound it fails saying what
// it was still waiting for. For waits whose end is certain unless
// something hangs, where the test's -timeout would be too late to say so.
func Within(t testing.TB, bound, interval time.Duration, pending func() string) {
	t.Helper()
	deadline := time.Now().Add(bound)
	for {
		what := pending()
		if what == "" {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("still waiting for %s after %s", what, bound)
		}
		time.Sleep(interval)
	}
}

// Unless turns a condition into a pending function for Until and Within:
// "" once cond holds, else what.
func Unless(cond func() bool, what string) func() string {
	return func() string {
		if cond() {
			return ""
		}
		return what
	}
}
