package redis_test

import (
	"bytes"
	"context"
	"crypto/rand"
	"log/slog"
	"strings"
	"testing"

	metaredis "github.com/cairn-registry/cairn/internal/meta/redis"
	"github.com/redis/go-redis/v9"

	"github.com/cairn-registry/cairn/internal/testutil/testenv"
)

// setRedisConfig sets a server parameter for the test and restores its old
// value when the test ends.
func setRedisConfig(t *testing.T, c *redis.Client, name, value string) {
	t.Helper()
	ctx := context.Background()
	old, err := c.ConfigGet(ctx, name).Result()
	if err != nil {
		t.Fatal(err)
	}
	if err := c.ConfigSet(ctx, name, value).Err(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := c.ConfigSet(ctx, name, old[name]).Err(); err != nil {
			t.Errorf("restore %s %q: %v", name, old[name], err)
		}
	})
}

// TestOpenRedisRefusesAnyEviction: any policy but noeviction is refused;
// volatile-* ones too (they were trusted before): a key that ever gets a
// TTL could be evicted with the reference counts it holds.
func TestOpenRedisRefusesAnyEviction(t *testing.T) {
	ctx := context.Background()
	addr := testenv.RedisAddr(t)
	c := rawClient(t, addr) // after setRedisConfig's restores
	for _, policy := range []string{"volatile-lru", "allkeys-lru", "volatile-ttl"} {
		t.Run(policy, func(t *testing.T) {
			setRedisConfig(t, c, "maxmemory-policy", policy)
			s, err := metaredis.Open(ctx, metaredis.Options{Addr: addr, Prefix: testPrefix(t, addr)})
			if err == nil {
				s.Close()
				t.Fatalf("Open of a server with maxmemory-policy %s succeeded", policy)
			}
			if !strings.Contains(err.Error(), policy) || !strings.Contains(err.Error(), "noeviction") {
				t.Fatalf("error %q does not name the policy and noeviction", err)
			}
		})
	}
}

// TestOpenRedisWarnsWithoutPersistence: a server that persists nothing is
// used, with one warning; one with snapshots or an append-only file is not
// warned about.
func TestOpenRedisWarnsWithoutPersistence(t *testing.T) {
	ctx := context.Background()
	addr := testenv.RedisAddr(t)
	c := rawClient(t, addr) // after setRedisConfig's restores
	setRedisConfig(t, c, "maxmemory-policy", "noeviction")
	open := func(t *testing.T) string {
		t.Helper()
		var logs bytes.Buffer
		s, err := metaredis.Open(ctx, metaredis.Options{
			Addr: addr, Prefix: testPrefix(t, addr),
			Log: slog.New(slog.NewTextHandler(&logs, nil)),
		})
		if err != nil {
			t.Fatal(err)
		}
		s.Close()
		return logs.String()
	}
	t.Run("none", func(t *testing.T) {
		setRedisConfig(t, c, "appendonly", "no")
		setRedisConfig(t, c, "save", "")
		logs := open(t)
		if strings.Count(logs, "\n") != 1 || !strings.Contains(logs, "persists nothing") || !strings.Contains(logs, addr) {
			t.Fatalf("want one warning naming the server, got %q", logs)
		}
	})
	t.Run("snapshots", func(t *testing.T) {
		setRedisConfig(t, c, "appendonly", "no")
		setRedisConfig(t, c, "save", "3600 1")
		if logs := open(t); logs != "" {
			t.Fatalf("want no warning, got %q", logs)
		}
	})
}

// TestOpenRedisTrustsHiddenConfig: a server that refuses CONFIG (a managed
// service, an ACL) is used, with a warning that nothing could be checked.
func TestOpenRedisTrustsHiddenConfig(t *testing.T) {
	ctx := context.Background()
	addr := testenv.RedisAddr(t)
	c := rawClient(t, addr)
	user := "cairn-noconfig-" + rand.Text()[:8]
	if err := c.Do(ctx, "ACL", "SETUSER", user, "on", ">pw", "~*", "&*", "+@all", "-config").Err(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := c.Do(ctx, "ACL", "DELUSER", user).Err(); err != nil {
			t.Error(err)
		}
	})
	var logs bytes.Buffer
	s, err := metaredis.Open(ctx, metaredis.Options{
		Addr: addr, Username: user, Password: "pw", Prefix: testPrefix(t, addr),
		Log: slog.New(slog.NewTextHandler(&logs, nil)),
	})
	if err != nil {
		t.Fatal(err)
	}
	s.Close()
	if !strings.Contains(logs.String(), "CONFIG GET is not allowed") {
		t.Fatalf("want a warning that the config could not be checked, got %q", logs.String())
	}
}
