package redis

import (
	"context"
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/cairn-registry/cairn/internal/meta"
)

// A lease is one string key, prefix "lease:" name, holding the holder's name,
// with a PX expiry that Redis enforces itself.

func (k redisKeys) lease(name string) string { return k.prefix + "lease:" + name }

// scriptTryLease: KEYS[1] the lease key; ARGV[1] holder, ARGV[2] ttl in ms. It
// returns 1 when holder holds the lease now. One script, so taking a free lease
// and renewing one's own cost one round trip alike.
var scriptTryLease = redis.NewScript(`
if redis.call('SET', KEYS[1], ARGV[1], 'NX', 'PX', ARGV[2]) then return 1 end
if redis.call('GET', KEYS[1]) == ARGV[1] then
  redis.call('PEXPIRE', KEYS[1], ARGV[2])
  return 1
end
return 0
`)

// scriptReleaseLease: KEYS[1] the lease key; ARGV[1] holder.
var scriptReleaseLease = redis.NewScript(`
if redis.call('GET', KEYS[1]) == ARGV[1] then redis.call('DEL', KEYS[1]) end
return 1
`)

// TryLease implements Leases.
func (s *Store) TryLease(ctx context.Context, name, holder string, ttl time.Duration) (bool, error) {
	ms, err := meta.LeaseMillis(name, holder, ttl)
	if err != nil {
		return false, err
	}
	v, err := s.run(ctx, scriptTryLease, []string{s.k.lease(name)}, holder, ms)
	if err != nil {
		return false, fmt.Errorf("meta: try lease %q: %w", name, err)
	}
	return v == int64(1), nil
}

// ReleaseLease implements Leases.
func (s *Store) ReleaseLease(ctx context.Context, name, holder string) error {
	if _, err := meta.LeaseMillis(name, holder, time.Millisecond); err != nil {
		return err
	}
	if _, err := s.run(ctx, scriptReleaseLease, []string{s.k.lease(name)}, holder); err != nil {
		return fmt.Errorf("meta: release lease %q: %w", name, err)
	}
	return nil
}
