package metatest

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cairn-registry/cairn/internal/meta"
)

// long is a ttl no test outlives, for leases that must stay held.
const long = time.Minute

func tryLease(t *testing.T, s meta.Store, name, holder string, ttl time.Duration) bool {
	t.Helper()
	return must(s.TryLease(context.Background(), name, holder, ttl))(t)
}

func releaseLease(t *testing.T, s meta.Store, name, holder string) {
	t.Helper()
	if err := s.ReleaseLease(context.Background(), name, holder); err != nil {
		t.Fatal(err)
	}
}

func testLeaseLifecycle(t *testing.T, s meta.Store) {
	if !tryLease(t, s, "job", "a", long) {
		t.Fatal("free lease: a did not get it")
	}
	if tryLease(t, s, "job", "b", long) {
		t.Fatal("b took a lease a holds")
	}
	if !tryLease(t, s, "job", "a", long) {
		t.Fatal("a could not renew its own lease")
	}
	if !tryLease(t, s, "other-job", "b", long) {
		t.Fatal("b did not get a free lease of another name")
	}
	releaseLease(t, s, "job", "b") // not b's: a no-op
	if tryLease(t, s, "job", "b", long) {
		t.Fatal("a release by a non-holder freed the lease")
	}
	releaseLease(t, s, "job", "a")
	releaseLease(t, s, "job", "a") // a second release is a no-op
	releaseLease(t, s, "never-taken", "a")
	if !tryLease(t, s, "job", "b", long) {
		t.Fatal("b did not get the lease a released")
	}
	if tryLease(t, s, "job", "a", long) {
		t.Fatal("a took the lease back from b")
	}
	if tryLease(t, s, "other-job", "a", long) {
		t.Fatal("releasing job freed other-job")
	}
}

func testLeaseExpiry(t *testing.T, s meta.Store) {
	if !tryLease(t, s, "job", "a", 100*time.Millisecond) {
		t.Fatal("free lease: a did not get it")
	}
	time.Sleep(400 * time.Millisecond)
	if !tryLease(t, s, "job", "b", long) {
		t.Fatal("b did not get a lease that expired")
	}
	if tryLease(t, s, "job", "a", long) {
		t.Fatal("a renewed a lease that expired and b took")
	}
	releaseLease(t, s, "job", "a") // a's lease is gone: b's stays
	if tryLease(t, s, "job", "c", long) {
		t.Fatal("the expired holder's release freed b's lease")
	}

	// A renewal extends the lease from the time of the renewal: the check
	// comes after the first ttl ended and well before the renewed one ends.
	const ttl = 500 * time.Millisecond
	if !tryLease(t, s, "renewed", "a", ttl) {
		t.Fatal("free lease: a did not get it")
	}
	time.Sleep(300 * time.Millisecond)
	if !tryLease(t, s, "renewed", "a", ttl) {
		t.Fatal("a could not renew its own lease")
	}
	time.Sleep(300 * time.Millisecond)
	if tryLease(t, s, "renewed", "b", long) {
		t.Fatal("b took a renewed lease at its first expiry")
	}
	// A renewal with a shorter ttl shortens it.
	if !tryLease(t, s, "renewed", "a", 50*time.Millisecond) {
		t.Fatal("a could not renew its own lease")
	}
	time.Sleep(300 * time.Millisecond)
	if !tryLease(t, s, "renewed", "b", long) {
		t.Fatal("b did not get a lease whose renewal expired")
	}
}

func testLeaseRace(t *testing.T, s meta.Store) {
	const n = 32
	var wins atomic.Int32
	var wg sync.WaitGroup
	start := make(chan struct{})
	for i := range n {
		wg.Go(func() {
			<-start
			ok, err := s.TryLease(context.Background(), "contested", fmt.Sprintf("node-%d", i), long)
			if err != nil {
				t.Error(err)
				return
			}
			if ok {
				wins.Add(1)
			}
		})
	}
	close(start)
	wg.Wait()
	if got := wins.Load(); got != 1 {
		t.Fatalf("%d of %d racing holders got the lease, want exactly 1", got, n)
	}
}

func testLeaseInvalid(t *testing.T, s meta.Store) {
	ctx := context.Background()
	tooLong := strings.Repeat("x", meta.MaxLeaseName+1)
	for _, c := range []struct {
		name, holder string
		ttl          time.Duration
	}{{"", "a", long}, {"job", "", long}, {"job", "a", 0}, {"job", "a", -time.Second}, {tooLong, "a", long}, {"job", tooLong, long}} {
		if _, err := s.TryLease(ctx, c.name, c.holder, c.ttl); !errors.Is(err, meta.ErrInvalidLease) {
			t.Errorf("TryLease(%.8q, %.8q, %v): err = %v, want ErrInvalidLease", c.name, c.holder, c.ttl, err)
		}
	}
	if err := s.ReleaseLease(ctx, "", "a"); !errors.Is(err, meta.ErrInvalidLease) {
		t.Errorf("ReleaseLease empty name: err = %v, want ErrInvalidLease", err)
	}
	// The longest valid name and holder work.
	name, holder := strings.Repeat("n", meta.MaxLeaseName), strings.Repeat("h", meta.MaxLeaseName)
	if !tryLease(t, s, name, holder, long) {
		t.Fatal("longest name and holder: lease not taken")
	}
	cctx, cancel := context.WithCancel(ctx)
	cancel()
	if _, err := s.TryLease(cctx, "job", "a", long); !errors.Is(err, context.Canceled) {
		t.Fatalf("TryLease with cancelled ctx: err = %v", err)
	}
	if !tryLease(t, s, "job", "b", long) {
		t.Fatal("a cancelled TryLease took the lease")
	}
}
