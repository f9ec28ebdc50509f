package auth

import (
	"context"

	"github.com/cairn-registry/cairn/internal/notify"
)

// Audit actions, as notification events name them.
const (
	// AuditLogin: credentials were checked and passed. Credentials that
	// passed within the last few minutes are not audited again (a pull
	// sends them with every request).
	AuditLogin = notify.ActionLogin
	// AuditLoginFailed: credentials were checked and failed.
	AuditLoginFailed = notify.ActionLoginFailed
	// AuditLoginHeld: an address that failed too often was answered 429
	// without a check (audited once a minute per address).
	AuditLoginHeld = notify.ActionLoginHeld
)

// How a login came: Basic credentials on a registry request, the token
// service's password grant (or GET with Basic), or a refresh token.
const (
	ViaBasic   = "basic"
	ViaToken   = "token"
	ViaRefresh = "refresh"
)

// AuditEvent is one login, as the audit trail records it.
type AuditEvent struct {
	Action string
	User   string // the user name as given (robots: robot$name)
	Robot  bool
	// Source is what proved the identity, or refused it when it was
	// asked: "htpasswd", "robot", or a Source's Name ("ldap"); "" when no
	// source knew the user or none was asked.
	Source    string
	Addr      string // the source address
	UserAgent string
	Via       string
	// Err says why a login failed, for the server's log only: a client
	// is told no more than "invalid credentials".
	Err error
}

// Auditor receives audit events.
type Auditor interface {
	Audit(ctx context.Context, e AuditEvent)
}

type auditorKey struct{}

// WithAuditor returns ctx carrying a, to which the authorizers report the
// logins of the request. It travels with the request rather than in the
// authorizer because the authorizer is rebuilt on every configuration
// reload by code that does not know where events go.
func WithAuditor(ctx context.Context, a Auditor) context.Context {
	return context.WithValue(ctx, auditorKey{}, a)
}

func audit(ctx context.Context, e AuditEvent) {
	if a, ok := ctx.Value(auditorKey{}).(Auditor); ok && a != nil {
		a.Audit(ctx, e)
	}
}
