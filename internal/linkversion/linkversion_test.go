package linkversion

import (
	"context"
	"errors"
	"net"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/cairn-registry/cairn/internal/testutil/objstore"
	"github.com/cairn-registry/cairn/internal/testutil/testenv"
)

// TestVersions: a repository's version changes with its own bumps and
// with BumpAll, and not with another repository's.
func TestVersions(t *testing.T) {
	ctx := t.Context()
	c := redis.NewClient(&redis.Options{Addr: testenv.RedisAddr(t), MaxRetries: -1, ContextTimeoutEnabled: true})
	t.Cleanup(func() { c.Close() })
	v := New(c, objstore.RandomName("cairn-test-")+":")
	version := func(repo string) string {
		t.Helper()
		s, err := v.Version(ctx, repo)
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	a0, b0 := version("a"), version("b")
	if err := v.Bump(ctx, "a"); err != nil {
		t.Fatal(err)
	}
	a1 := version("a")
	if a1 == a0 || version("b") != b0 {
		t.Fatalf("after a's bump: a %q→%q, b %q→%q", a0, a1, b0, version("b"))
	}
	if err := v.BumpAll(ctx); err != nil {
		t.Fatal(err)
	}
	if version("a") == a1 || version("b") == b0 {
		t.Fatalf("BumpAll left a at %q or b at %q", a1, b0)
	}
}

// TestDown: a Redis that does not answer fails the first command, and the
// next ones fail at once without asking it.
func TestDown(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	var dials atomic.Int64
	c := redis.NewClient(&redis.Options{Addr: addr, MaxRetries: -1, ContextTimeoutEnabled: true,
		Dialer: func(ctx context.Context, network, addr string) (net.Conn, error) {
			dials.Add(1)
			return (&net.Dialer{}).DialContext(ctx, network, addr)
		}})
	t.Cleanup(func() { c.Close() })
	v := New(c, "x:")
	v.downFor = time.Hour // a busy machine must not outlast the window between two calls
	if _, err := v.Version(t.Context(), "a"); err == nil || errors.Is(err, ErrDown) {
		t.Fatalf("first Version: %v, want Redis's error", err)
	}
	asked := dials.Load()
	if asked == 0 {
		t.Fatal("Redis was never dialed")
	}
	if _, err := v.Version(t.Context(), "a"); !errors.Is(err, ErrDown) {
		t.Fatalf("second Version: %v, want ErrDown", err)
	}
	if err := v.Bump(t.Context(), "a"); !errors.Is(err, ErrDown) {
		t.Fatalf("Bump: %v, want ErrDown", err)
	}
	if n := dials.Load(); n != asked {
		t.Fatalf("Redis was dialed %d more times while down", n-asked)
	}
}
