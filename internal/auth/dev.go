package auth

import (
	"fmt"
	"net/http"
)

// Silly is distribution's development backend: a request that carries any
// Authorization header may do everything; one without is challenged with a
// Bearer challenge naming realm, service and the scope it needed. It checks
// nothing, so it must never guard a registry anyone else can reach.
type Silly struct {
	realm, service string
}

// NewSilly returns the silly authorizer.
func NewSilly(realm, service string) *Silly { return &Silly{realm: realm, service: service} }

var _ Authorizer = (*Silly)(nil)

// Authorize lets in any request with an Authorization header.
func (s *Silly) Authorize(r *http.Request, need []Access) (Grant, error) {
	if r.Header.Get("Authorization") != "" {
		return Grant{Subject: "silly", all: true}, nil
	}
	h := fmt.Sprintf("Bearer realm=%q,service=%q", s.realm, s.service)
	if len(need) > 0 {
		h += fmt.Sprintf(",scope=%q", Scope(need))
	}
	return Grant{}, &Challenge{err: ErrNoCredentials, header: h, need: need}
}
