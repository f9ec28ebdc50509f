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
// caller is (a robot key, an htpasswd user, or a user of a Source such as
// LDAP), grants decides what that identity may do (access control by user
// name and groups, or everything for users without it; a robot's own
// scopes), and two authorizers put them in front of the registry: Basic
// (HTTP Basic on every request) and TokenService (Bearer tokens cairn
// issues itself, Basic accepted too).

// What proved an identity besides a Source (whose Name is used).
const (
	SourceHtpasswd = "htpasswd"
	SourceRobot    = "robot"
)

// Identity is a caller who proved who they are.
type Identity struct {
	// Name is the user name: an htpasswd or source user, or
	// RobotPrefix+name.
	Name string
	// Groups are the groups the identity's source gave (an LDAP user's
	// directory groups); access-control policies naming one of them
	// apply to the identity, as do those naming a group of
	// accesscontrol.groups that lists Name.
	Groups []string
	// Source says what proved the identity: SourceHtpasswd, SourceRobot,
	// or a Source's Name.
	Source string
	robot  *Robot
}

// Accounts checks credentials against the identity sources, in order:
// robot keys for user names starting with RobotPrefix; the htpasswd file
// (when there is one, for the users it lists, or every user when there is
// no other source); then each Source, until one knows the user. Every check
// costs the same whether the name is known or not (a dummy bcrypt hash for
// unknown users, a dummy SHA-256 for unknown robots, a Source's own
// equal work, such as LDAP's dummy bind), so names cannot be probed by
// timing; an address that failed too often is held back (LoginLimiter),
// whichever source was asked; each login is audited (WithAuditor) with
// the source that proved or refused it.
type Accounts struct {
	users   *Htpasswd     // nil: no htpasswd file
	robots  *Robots       // nil: no robot keys
	limit   *LoginLimiter // nil: no limit
	sources []Source
	// seen remembers credentials that passed lately, so that a pull
	// audits one login, not one per request.
	seen *verifiedCache
	// verified remembers the source logins that passed lately, and the
	// groups they gave, so that a pull with Basic credentials asks the
	// directory once, not once per request.
	verified *sourceCache
	now      func() time.Time
}

// NewAccounts returns the accounts of users, robots (nil for none) and
// sources, failed logins limited by limit (nil for no limit).
func NewAccounts(users *Htpasswd, robots *Robots, limit *LoginLimiter, sources ...Source) *Accounts {
	secret := make([]byte, 32)
	rand.Read(secret)
	return &Accounts{
		users: users, robots: robots, limit: limit, sources: sources,
		seen: newVerifiedCache(secret), verified: newSourceCache(secret), now: time.Now,
	}
}

// HasSources reports whether any Source beside htpasswd and robots is
// configured.
func (a *Accounts) HasSources() bool { return len(a.sources) > 0 }

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
	ev.Source = id.Source
	if err != nil {
		if ctx.Err() == nil && !errors.Is(err, ErrUnavailable) {
			// A client that left is not a guess, nor is a login that
			// a directory down could not check.
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

// check proves user with pass. The identity it returns with an error
// names the source that refused, for the audit trail.
func (a *Accounts) check(ctx context.Context, user, pass string) (Identity, error) {
	if a.isRobot(user) {
		rb, err := a.robots.check(user, pass, a.now())
		if err != nil {
			return Identity{Source: SourceRobot}, err
		}
		return Identity{Name: user, Source: SourceRobot, robot: rb}, nil
	}
	if a.users != nil && (len(a.sources) == 0 || a.users.knows(user)) {
		// A name the file lists is the file's alone: its wrong password
		// is not tried against the sources, so a directory account of the
		// same name cannot take the local account over.
		id := Identity{Source: SourceHtpasswd}
		ok, err := a.users.verify(ctx, user, pass)
		switch {
		case err != nil:
			return id, fmt.Errorf("not checked: %w", err)
		case !ok:
			return id, errors.New("unknown user or wrong password")
		}
		id.Name = user
		return id, nil
	}
	if pass == "" {
		// An LDAP bind with a DN and no password is an unauthenticated
		// bind, which servers answer with success: never let one through.
		return Identity{}, errors.New("empty password")
	}
	if e, ok := a.verified.get(user, pass); ok {
		return Identity{Name: user, Groups: e.groups, Source: e.source}, nil
	}
	for _, s := range a.sources {
		groups, err := s.Authenticate(ctx, user, pass)
		if errors.Is(err, ErrUnknownUser) {
			continue
		}
		if err != nil {
			return Identity{Source: s.Name()}, fmt.Errorf("%s: %w", s.Name(), err)
		}
		if _, ok := s.(uncached); !ok {
			a.verified.add(user, pass, s.Name(), groups)
		}
		return Identity{Name: user, Groups: groups, Source: s.Name()}, nil
	}
	return Identity{}, fmt.Errorf("%w: no identity source knows the user", ErrUnknownUser)
}

// source returns the Source called name.
func (a *Accounts) source(name string) Source {
	for _, s := range a.sources {
		if s.Name() == name {
			return s
		}
	}
	return nil
}

// resume is a login by refresh token: the token named the user and the
// fingerprint of their password hash, or a robot key's ID, or the Source
// that proved the user. It passes while the user keeps that password,
// while the key is valid, or while the source still knows the user (its
// Lookup, which also gives the user's groups as they are now).
func (a *Accounts) resume(r *http.Request, user string, c refreshClaims, invalid error) (Identity, error) {
	ctx := r.Context()
	robotID, cred := c.Robot, c.Cred
	ev := AuditEvent{User: user, Addr: source(r), UserAgent: r.UserAgent(), Via: ViaRefresh, Robot: robotID != "", Source: c.Source}
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
	case c.Source != "":
		id, err = a.lookup(ctx, user, c.Source)
	default:
		if fp, ok := a.users.fingerprint(user); !ok || fp != cred {
			err = errors.New("user removed or password changed since the refresh token was issued")
		} else {
			id = Identity{Name: user, Source: SourceHtpasswd}
		}
	}
	if err != nil {
		if !errors.Is(err, ErrUnavailable) {
			a.limit.failed(ev.Addr, a.now())
		}
		ev.Action, ev.Err = AuditLoginFailed, err
		audit(ctx, ev)
		return Identity{}, fmt.Errorf("%w: refresh token of %q: %w", ErrInvalidCredentials, user, err)
	}
	if key := a.seen.key(user, "\x00refresh:"+robotID+cred+"\x00"+c.Source); !a.seen.has(key) {
		a.seen.add(key)
		ev.Action = AuditLogin
		audit(ctx, ev)
	}
	return id, nil
}

// lookup resumes the login of user, whom the source called name proved.
func (a *Accounts) lookup(ctx context.Context, user, name string) (Identity, error) {
	s := a.source(name)
	if s == nil {
		return Identity{}, fmt.Errorf("identity source %q is not configured", name)
	}
	l, ok := s.(Lookuper)
	if !ok {
		return Identity{}, fmt.Errorf("identity source %q cannot resume logins", name)
	}
	groups, err := l.Lookup(ctx, user)
	if err != nil {
		return Identity{}, fmt.Errorf("%s: %w", name, err)
	}
	return Identity{Name: user, Groups: groups, Source: name}, nil
}

// resumable reports whether refresh tokens can be issued to id.
func (a *Accounts) resumable(id *Identity) bool {
	switch id.Source {
	case SourceRobot, SourceHtpasswd, "":
		return true
	}
	_, ok := a.source(id.Source).(Lookuper)
	return ok
}

// knows reports whether the file lists user.
func (h *Htpasswd) knows(user string) bool {
	_, ok := h.users[user]
	return ok
}

// fingerprint names user's current password hash in refresh tokens, so
// that a new password (or the user's removal) ends them. It is a hash of
// the bcrypt hash: it tells nothing that would help guess the password.
func (h *Htpasswd) fingerprint(user string) (string, bool) {
	if h == nil {
		// No file (auth.ldap alone): a token naming a file's user, made
		// before the file was dropped, names nobody now.
		return "", false
	}
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
		if id != nil {
			g.acl.groups = id.Groups
		}
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
