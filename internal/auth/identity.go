package auth

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"time"
)

// One access policy whatever proves the identity: Accounts checks who a
// caller is (an htpasswd user or a robot key), grants decides what that
// identity may do (access control, or everything for users without it; a
// robot's own scopes), and two authorizers put them in front of the
// registry: Basic (HTTP Basic on every request) and TokenService (Bearer
// tokens cairn issues itself, Basic accepted too).

// Identity is a caller who proved who they are.
type Identity struct {
	// Name is the user name: an htpasswd user, or RobotPrefix+name.
	Name  string
	robot *Robot
}

// Accounts checks credentials against the identity sources: robot keys for
// user names starting with RobotPrefix, the htpasswd file for the others.
// Every check costs the same whether the name is known or not (a dummy
// bcrypt hash for unknown users, a dummy SHA-256 for unknown robots), so
// names cannot be probed by timing; an address that failed too often is
// held back (LoginLimiter); each login is audited (WithAuditor).
type Accounts struct {
	users  *Htpasswd
	robots *Robots       // nil: no robot keys
	limit  *LoginLimiter // nil: no limit
	// seen remembers credentials that passed lately, so that a pull
	// audits one login, not one per request.
	seen *verifiedCache
	now  func() time.Time
}

// NewAccounts returns the accounts of users and robots (nil for none),
// failed logins limited by limit (nil for no limit).
func NewAccounts(users *Htpasswd, robots *Robots, limit *LoginLimiter) *Accounts {
	secret := make([]byte, 32)
	rand.Read(secret)
	return &Accounts{users: users, robots: robots, limit: limit, seen: newVerifiedCache(secret), now: time.Now}
}

// Login checks user and pass, which came with r by way of via.
func (a *Accounts) Login(r *http.Request, user, pass, via string) (Identity, error) {
	ctx := r.Context()
	ev := AuditEvent{User: user, Addr: source(r), UserAgent: r.UserAgent(), Via: via, Robot: a.isRobot(user)}
	if held, announce := a.limit.held(ev.Addr, a.now()); held {
		if announce {
			ev.Action = AuditLoginHeld
			audit(ctx, ev)
		}
		return Identity{}, fmt.Errorf("%w: user %q from %s", ErrTooManyAttempts, user, ev.Addr)
	}
	id, err := a.check(ctx, user, pass)
	if err != nil {
		if ctx.Err() == nil {
			// A client that left is not a guess.
			a.limit.failed(ev.Addr, a.now())
		}
		ev.Action, ev.Err = AuditLoginFailed, err
		audit(ctx, ev)
		return Identity{}, fmt.Errorf("%w: user %q: %w", ErrInvalidCredentials, user, err)
	}
	if key := a.seen.key(user, pass); !a.seen.has(key) {
		a.seen.add(key)
		ev.Action = AuditLogin
		audit(ctx, ev)
	}
	return id, nil
}

func (a *Accounts) isRobot(user string) bool {
	return a.robots != nil && strings.HasPrefix(user, RobotPrefix)
}

func (a *Accounts) check(ctx context.Context, user, pass string) (Identity, error) {
	if a.isRobot(user) {
		rb, err := a.robots.check(user, pass, a.now())
		if err != nil {
			return Identity{}, err
		}
		return Identity{Name: user, robot: rb}, nil
	}
	ok, err := a.users.verify(ctx, user, pass)
	switch {
	case err != nil:
		return Identity{}, fmt.Errorf("not checked: %w", err)
	case !ok:
		return Identity{}, errors.New("unknown user or wrong password")
	}
	return Identity{Name: user}, nil
}

// resume is a login by refresh token: the token named the user and the
// fingerprint of their password hash, or a robot key's ID. It passes while
// the user keeps that password, or while the key is valid.
func (a *Accounts) resume(r *http.Request, user, robotID, cred string, invalid error) (Identity, error) {
	ctx := r.Context()
	ev := AuditEvent{User: user, Addr: source(r), UserAgent: r.UserAgent(), Via: ViaRefresh, Robot: robotID != ""}
	if held, announce := a.limit.held(ev.Addr, a.now()); held {
		if announce {
			ev.Action = AuditLoginHeld
			audit(ctx, ev)
		}
		return Identity{}, fmt.Errorf("%w: user %q from %s", ErrTooManyAttempts, user, ev.Addr)
	}
	var id Identity
	var err error
	switch {
	case invalid != nil:
		// A forged, expired or mangled token names nobody; it counts as
		// a failed login of its address all the same.
		err = invalid
	case robotID != "" && a.robots != nil:
		var rb *Robot
		if rb, err = a.robots.valid(robotID, a.now()); err == nil {
			id = Identity{Name: rb.User(), robot: rb}
		}
	case robotID != "":
		err = errors.New("robot keys are not enabled")
	default:
		if fp, ok := a.users.fingerprint(user); !ok || fp != cred {
			err = errors.New("user removed or password changed since the refresh token was issued")
		} else {
			id = Identity{Name: user}
		}
	}
	if err != nil {
		a.limit.failed(ev.Addr, a.now())
		ev.Action, ev.Err = AuditLoginFailed, err
		audit(ctx, ev)
		return Identity{}, fmt.Errorf("%w: refresh token of %q: %w", ErrInvalidCredentials, user, err)
	}
	if key := a.seen.key(user, "\x00refresh:"+robotID+cred); !a.seen.has(key) {
		a.seen.add(key)
		ev.Action = AuditLogin
		audit(ctx, ev)
	}
	return id, nil
}

// fingerprint names user's current password hash in refresh tokens, so
// that a new password (or the user's removal) ends them. It is a hash of
// the bcrypt hash: it tells nothing that would help guess the password.
func (h *Htpasswd) fingerprint(user string) (string, bool) {
	hash, ok := h.users[user]
	if !ok {
		return "", false
	}
	sum := sha256.Sum256(append([]byte("cairn refresh\x00"), hash...))
	return base64.RawURLEncoding.EncodeToString(sum[:16]), true
}

// grants decides what identities may do.
type grants struct {
	acl           *acl // nil: every user may do everything
	anonymousPull bool
}

func newGrants(ac *AccessControl, anonymousPull bool) (grants, error) {
	g := grants{anonymousPull: anonymousPull}
	if ac != nil {
		a, err := compileACL(*ac)
		if err != nil {
			return grants{}, err
		}
		g.acl = a
	}
	return g, nil
}

// of is the grant of id; nil is a caller without credentials. A robot may
// do what its scopes give and what anyone may; users what access control
// gives them, or everything without it.
func (p grants) of(id *Identity) Grant {
	g := Grant{anonymousPull: p.anonymousPull}
	if id != nil {
		g.Subject = id.Name
	}
	switch {
	case id != nil && id.robot != nil:
		g.robot = id.robot
		if p.acl != nil {
			g.acl = &aclCaller{acl: p.acl}
		}
	case p.acl != nil:
		g.acl = &aclCaller{acl: p.acl, user: g.Subject, authenticated: id != nil}
	case id != nil:
		g.all = true
	}
	return g
}

// Basic authorizes HTTP Basic credentials on every request: htpasswd
// users and robot keys, under one access policy.
type Basic struct {
	realm    string
	accounts *Accounts
	grants   grants
}

// NewBasic returns the Basic authorizer of accounts. ac (nil for none)
// gives users actions per repository; without it every user may do
// everything. anonymousPull lets callers without credentials pull.
func NewBasic(realm string, accounts *Accounts, ac *AccessControl, anonymousPull bool) (*Basic, error) {
	g, err := newGrants(ac, anonymousPull)
	if err != nil {
		return nil, err
	}
	return &Basic{realm: realm, accounts: accounts, grants: g}, nil
}

var _ Authorizer = (*Basic)(nil)

// Authorize implements Authorizer. A caller without credentials gets what
// anyone may do, and the challenge when that does not cover the request
// (GET /v2/ always asks, so that clients send credentials for their
// pushes); wrong credentials are refused, never downgraded to anonymous; a
// known caller lacking an action is refused with 403, alike for
// repositories that exist and those that do not.
func (b *Basic) Authorize(r *http.Request, need []Access) (Grant, error) {
	user, pass, ok := r.BasicAuth()
	if !ok || user == "" && pass == "" {
		// containers/image (skopeo, podman) answers a Basic challenge
		// with empty credentials when it has none: that names nobody.
		g := b.grants.of(nil)
		if len(need) > 0 && len(g.missing(need)) == 0 {
			return g, nil
		}
		return g, b.challenge(ErrNoCredentials, need)
	}
	id, err := b.accounts.Login(r, user, pass, ViaBasic)
	if err != nil {
		return Grant{}, b.challenge(err, need)
	}
	g := b.grants.of(&id)
	if missing := g.missing(need); len(missing) > 0 {
		return g, &Challenge{err: fmt.Errorf("%w: user %q", ErrInsufficientScope, id.Name), need: missing}
	}
	return g, nil
}

func (b *Basic) challenge(err error, need []Access) *Challenge {
	if errors.Is(err, ErrTooManyAttempts) {
		return &Challenge{err: err, need: need}
	}
	return &Challenge{err: err, header: fmt.Sprintf("Basic realm=%q", b.realm), need: need}
}
