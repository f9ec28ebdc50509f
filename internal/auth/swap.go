package auth

import (
	"net/http"
	"sync/atomic"
)

// Swappable is an Authorizer whose rules can be replaced while requests
// are served (a configuration reload): each request is authorized by the
// authorizer current when it arrived.
type Swappable struct {
	cur atomic.Pointer[Authorizer]
}

// NewSwappable returns a Swappable serving a.
func NewSwappable(a Authorizer) *Swappable {
	s := &Swappable{}
	s.Swap(a)
	return s
}

// Swap makes a the authorizer of the requests that follow.
func (s *Swappable) Swap(a Authorizer) { s.cur.Store(&a) }

// Authorize implements Authorizer.
func (s *Swappable) Authorize(r *http.Request, need []Access) (Grant, error) {
	return (*s.cur.Load()).Authorize(r, need)
}

// Current is the authorizer serving requests now (the token endpoint asks
// it whether it issues tokens).
func (s *Swappable) Current() Authorizer { return *s.cur.Load() }
