package auth

import (
	"context"
	"errors"
	"slices"
	"sync"
	"time"
)

// Source is an identity source beside htpasswd users and robot keys: an
// LDAP directory, an OIDC provider's tokens.
type Source interface {
	// Name labels the source in audit events and errors ("ldap", "oidc").
	Name() string
	// Authenticate checks pass for user and returns the user's groups
	// (names access-control policies may give actions to). An error
	// wrapping ErrUnknownUser says the source does not know user (the next
	// source is tried); any other error fails the login.
	Authenticate(ctx context.Context, user, pass string) (groups []string, err error)
}

// ErrUnknownUser is what a Source's Authenticate wraps when it does not
// know the user, so that Accounts tries the next source.
var ErrUnknownUser = errors.New("unknown user")

// ErrUnavailable is what a Source wraps when it could not check the
// credentials (its server down or too slow): the login fails, but it is not
// counted as a guess of the caller's address, and the token service answers
// 503 rather than 401.
var ErrUnavailable = errors.New("identity source unavailable")

// Lookuper is a Source that can tell, without the password, whether it
// still knows a user and what the user's groups are now. The token
// service's refresh tokens of a Source's users resume through it, so that
// a user removed from the directory stops at the next refresh and group
// changes apply; a Source without it gets no refresh tokens, and its users
// log in again with their password when their access token expires.
type Lookuper interface {
	// Lookup returns user's groups; an error wrapping ErrUnknownUser when
	// the source no longer knows user.
	Lookup(ctx context.Context, user string) (groups []string, err error)
}

// uncached is a Source whose logins are checked locally at little cost and
// carry their own lifetime (a token's expiry): Accounts does not remember
// them, so a token stops working the moment it expires.
type uncached interface{ uncachedLogins() }

// sourceCache remembers Source logins that passed recently, with the groups
// they gave: with Basic credentials every request of a pull logs in again,
// and a directory asked four times per blob would be the registry's
// bottleneck. Like verifiedCache it keeps keyed hashes of user and
// password, never the password; failures are not kept, so guessing keeps
// paying the source's price. A user removed from the directory, or from a
// group, keeps what they had for at most sourceTTL.
type sourceCache struct {
	keys  *verifiedCache // for key derivation only
	mu    sync.Mutex
	until map[[32]byte]sourceEntry
}

type sourceEntry struct {
	source string
	groups []string
	until  time.Time
}

const sourceTTL = time.Minute

func newSourceCache(secret []byte) *sourceCache {
	return &sourceCache{keys: newVerifiedCache(secret), until: make(map[[32]byte]sourceEntry)}
}

func (c *sourceCache) get(user, pass string) (sourceEntry, bool) {
	k := c.keys.key(user, pass)
	c.mu.Lock()
	defer c.mu.Unlock()
	e, ok := c.until[k]
	if ok && time.Now().After(e.until) {
		delete(c.until, k)
		return sourceEntry{}, false
	}
	return e, ok
}

func (c *sourceCache) add(user, pass, source string, groups []string) {
	k := c.keys.key(user, pass)
	c.mu.Lock()
	defer c.mu.Unlock()
	now := time.Now()
	if len(c.until) >= verifiedMax {
		for k, e := range c.until {
			if now.After(e.until) {
				delete(c.until, k)
			}
		}
		if len(c.until) >= verifiedMax {
			clear(c.until)
		}
	}
	c.until[k] = sourceEntry{source: source, groups: slices.Clone(groups), until: now.Add(sourceTTL)}
}
