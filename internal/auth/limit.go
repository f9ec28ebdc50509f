package auth

import (
	"net"
	"net/http"
	"sync"
	"time"

	"golang.org/x/time/rate"
)

// LoginLimiter holds back password guessing: each source address may fail
// to log in Burst times in a row, then once per 1/PerMinute minute, and
// while it may not, its logins are answered 429 Too Many Requests without
// their credentials being checked. A login that succeeds costs nothing.
//
// Why 429 at once rather than a 401 after a delay: a delay holds a
// goroutine and a connection per attempt, so a flood would tie up the
// server's resources in its own throttle, while 429 costs nothing and
// tells clients (docker's "toomanyrequests") what happened. The
// credentials are not checked while the address is held back: answering a
// right password with 200 and a wrong one with 429 would let guessing go
// on at full speed. The price is that users behind the same address as a
// guesser (one NAT, one proxy) wait with it; the address is the
// connection's (a proxy in front should do its own limiting).
type LoginLimiter struct {
	every rate.Limit
	burst int

	mu      sync.Mutex
	sources map[string]*limitEntry
}

type limitEntry struct {
	lim       *rate.Limiter
	announced time.Time // when a hold-back was last audited
}

// limiterMax bounds the addresses remembered; beyond it, those whose
// budget is whole again are forgotten (they would start whole anyway).
const limiterMax = 65536

// NewLoginLimiter allows burst failed logins in a row per source address,
// then perMinute more each minute. A burst of 0 or less turns limiting off
// (nil).
func NewLoginLimiter(burst int, perMinute float64) *LoginLimiter {
	if burst <= 0 {
		return nil
	}
	return &LoginLimiter{every: rate.Limit(perMinute / 60), burst: burst, sources: make(map[string]*limitEntry)}
}

// source is the address a request came from, without its port.
func source(r *http.Request) string {
	host, _, err := net.SplitHostPort(r.RemoteAddr)
	if err != nil {
		return r.RemoteAddr
	}
	return host
}

func (l *LoginLimiter) entry(src string, now time.Time) *limitEntry {
	e := l.sources[src]
	if e != nil {
		return e
	}
	if len(l.sources) >= limiterMax {
		for k, e := range l.sources {
			if e.lim.TokensAt(now) >= float64(l.burst) {
				delete(l.sources, k)
			}
		}
		if len(l.sources) >= limiterMax {
			clear(l.sources)
		}
	}
	e = &limitEntry{lim: rate.NewLimiter(l.every, l.burst)}
	l.sources[src] = e
	return e
}

// held reports whether src may not try to log in now; announce is true
// when this hold-back should be audited (once a minute per address, so a
// flood does not flood the audit trail).
func (l *LoginLimiter) held(src string, now time.Time) (held, announce bool) {
	if l == nil {
		return false, false
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	e := l.sources[src]
	if e == nil || e.lim.TokensAt(now) >= 1 {
		return false, false
	}
	if now.Sub(e.announced) >= time.Minute {
		e.announced = now
		return true, true
	}
	return true, false
}

// failed spends one of src's failed logins.
func (l *LoginLimiter) failed(src string, now time.Time) {
	if l == nil {
		return
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	l.entry(src, now).lim.AllowN(now, 1)
}
