// Package auth decides who may do what on the registry API, configured as
// distribution configures it: HTTP Basic against a bcrypt htpasswd file, or
// Bearer tokens issued by a token server (the Docker token authentication
// spec), optionally with anonymous pull; and cairn's own identity layer:
// one access policy whatever proves the identity (identity.go), htpasswd
// users, robot keys (robots.go) and the users of identity sources
// (source.go: an LDAP directory, ldap.go; an OIDC provider's tokens, oidc.go, and
// its web login and sessions, oidcweb.go) checked by Accounts at the same
// cost for unknown names, failed logins limited per address (limit.go), logins
// audited (audit.go), served as Basic or through cairn's own token service
// (tokenservice.go), whose tokens the registry verifies with Token. dev.go
// is distribution's "silly" development authorizer.
//
// The server asks one question per request: Authorize(r, need), where need
// is the list of accesses the route and method require (see Needed). The
// answer is a Grant or a *Challenge error that says how to refuse: 401 with
// a WWW-Authenticate challenge when the caller is unknown, 403 when a known
// caller lacks the access. A refusal never depends on whether the
// repository exists, so callers learn nothing about what they may not see.
package auth

import (
	"errors"
	"net/http"
	"slices"
	"strings"
)

// Resource types and actions of the token spec's scopes.
const (
	TypeRepository = "repository"
	TypeRegistry   = "registry"

	ActionPull   = "pull"
	ActionPush   = "push"
	ActionDelete = "delete"
	ActionAll    = "*"
)

// Access is one action on one resource, as in a scope
// "repository:library/alpine:pull" or "registry:catalog:*".
type Access struct {
	Type   string `json:"type"`
	Name   string `json:"name"`
	Action string `json:"action"`
}

// Authorizer authorizes requests. need lists every access the request
// requires; an empty need asks only that the caller be authenticated (GET
// /v2/, which clients use to discover authentication). On success the Grant
// describes the caller; otherwise the error is a *Challenge.
type Authorizer interface {
	Authorize(r *http.Request, need []Access) (Grant, error)
}

// Errors a Challenge wraps, for errors.Is.
var (
	// ErrNoCredentials: the request carried no credentials this
	// authorizer understands.
	ErrNoCredentials = errors.New("authentication required")
	// ErrInvalidCredentials: wrong password, unknown user, or a token that
	// failed verification.
	ErrInvalidCredentials = errors.New("invalid credentials")
	// ErrInsufficientScope: the caller is known but lacks an access.
	ErrInsufficientScope = errors.New("requested access to the resource is denied")
	// ErrTooManyAttempts: the caller's address failed to log in too often
	// lately; its credentials were not checked (see LoginLimiter).
	ErrTooManyAttempts = errors.New("too many failed logins from this address; retry later")
)

// Grant is what an authenticated (or anonymous) caller may do.
type Grant struct {
	// Subject names the caller (user name or token subject); "" when
	// anonymous.
	Subject string

	all           bool                  // htpasswd users may do everything
	access        map[resource][]string // token access claims
	anonymousPull bool                  // anyone may pull
	acl           *aclCaller            // per-repository rules decide
	robot         *Robot                // a robot key's own scopes
	robotID       string                // the robot key a token was issued for
}

type resource struct{ typ, name string }

// Allows reports whether the grant covers a.
func (g Grant) Allows(a Access) bool {
	if g.all {
		return true
	}
	if g.anonymousPull && a.Type == TypeRepository && a.Action == ActionPull {
		return true
	}
	if g.robot != nil && g.robot.allows(a) {
		return true
	}
	if g.acl != nil {
		return g.acl.allows(a)
	}
	actions := g.access[resource{a.Type, a.Name}]
	return slices.Contains(actions, a.Action) || slices.Contains(actions, ActionAll)
}

// PullableRepositories says which repositories g may pull: every one (all),
// or the named ones. A mount without a source repository searches only
// these, so a caller can neither take nor probe content it may not pull.
func (g Grant) PullableRepositories() (all bool, names []string) {
	if g.all || g.anonymousPull || g.acl != nil && g.acl.pullsEverywhere() || g.robot != nil && g.robot.pullsEverywhere() {
		return true, nil
	}
	for res, actions := range g.access {
		if res.typ == TypeRepository && (slices.Contains(actions, ActionPull) || slices.Contains(actions, ActionAll)) {
			names = append(names, res.name)
		}
	}
	slices.Sort(names)
	return false, names
}

// missing returns the accesses of need that g does not cover.
func (g Grant) missing(need []Access) []Access {
	var out []Access
	for _, a := range need {
		if !g.Allows(a) {
			out = append(out, a)
		}
	}
	return out
}

// Challenge is a refusal: the status to answer, the WWW-Authenticate value
// to send with it, and the accesses that were needed.
type Challenge struct {
	err    error // one of the Err* above, possibly wrapped with detail
	header string
	need   []Access
}

func (c *Challenge) Error() string { return c.err.Error() }

func (c *Challenge) Unwrap() error { return c.err }

// Status is 403 for a known caller lacking access, 429 for an address
// whose logins are held back, 401 otherwise.
func (c *Challenge) Status() int {
	switch {
	case errors.Is(c.err, ErrInsufficientScope):
		return http.StatusForbidden
	case errors.Is(c.err, ErrTooManyAttempts):
		return http.StatusTooManyRequests
	}
	return http.StatusUnauthorized
}

// Code is the OCI error code: DENIED, TOOMANYREQUESTS or UNAUTHORIZED.
func (c *Challenge) Code() string {
	switch {
	case errors.Is(c.err, ErrInsufficientScope):
		return "DENIED"
	case errors.Is(c.err, ErrTooManyAttempts):
		return "TOOMANYREQUESTS"
	}
	return "UNAUTHORIZED"
}

// Message is the error message for the response body. It names no detail
// of why credentials failed: that goes to the server's log via Error.
func (c *Challenge) Message() string {
	switch {
	case errors.Is(c.err, ErrInsufficientScope):
		return ErrInsufficientScope.Error()
	case errors.Is(c.err, ErrTooManyAttempts):
		return ErrTooManyAttempts.Error()
	case errors.Is(c.err, ErrInvalidCredentials):
		return "authentication required: invalid credentials"
	}
	return ErrNoCredentials.Error()
}

// Header is the WWW-Authenticate value to send, "" for none.
func (c *Challenge) Header() string { return c.header }

// Need lists the accesses the request needed, for the error body's detail.
func (c *Challenge) Need() []Access { return c.need }

// Scope renders accesses as a token-spec scope parameter: one
// "type:name:action,action" entry per resource, in order of first
// appearance, separated by spaces.
func Scope(accesses []Access) string {
	type entry struct {
		res     resource
		actions []string
	}
	var entries []entry
outer:
	for _, a := range accesses {
		for i := range entries {
			if entries[i].res == (resource{a.Type, a.Name}) {
				if !slices.Contains(entries[i].actions, a.Action) {
					entries[i].actions = append(entries[i].actions, a.Action)
				}
				continue outer
			}
		}
		entries = append(entries, entry{resource{a.Type, a.Name}, []string{a.Action}})
	}
	parts := make([]string, len(entries))
	for i, e := range entries {
		parts[i] = e.res.typ + ":" + e.res.name + ":" + strings.Join(e.actions, ",")
	}
	return strings.Join(parts, " ")
}

// AnonymousPull wraps next so that requests needing only repository pulls
// succeed without credentials, and so that callers whose own grant lacks a
// pull may still pull. Wrong credentials are still refused: a client that
// sends a bad password learns so instead of silently pulling anonymously.
// An empty need (GET /v2/) still requires credentials, so that clients
// discover authentication and send credentials for their pushes.
func AnonymousPull(next Authorizer) Authorizer { return anonymous{next} }

type anonymous struct{ next Authorizer }

func (a anonymous) Authorize(r *http.Request, need []Access) (Grant, error) {
	g, err := a.next.Authorize(r, need)
	g.anonymousPull = true
	if err == nil {
		return g, nil
	}
	if onlyPulls(need) && (errors.Is(err, ErrNoCredentials) || errors.Is(err, ErrInsufficientScope)) {
		return g, nil
	}
	return g, err
}

func onlyPulls(need []Access) bool {
	if len(need) == 0 {
		return false
	}
	for _, a := range need {
		if a.Type != TypeRepository || a.Action != ActionPull {
			return false
		}
	}
	return true
}
