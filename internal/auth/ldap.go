package auth

import (
	"context"
	"crypto/rand"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"net/url"
	"slices"
	"strings"
	"time"

	"github.com/go-ldap/ldap/v3"
)

// LDAP is an LDAP directory as an identity Source (auth.ldap).
//
// A login: connect (ldaps://, or ldap:// upgraded by StartTLS), bind as
// the service account (or anonymously), search the user under UserBase
// with (&(<UserAttribute>=<name>)<UserFilter>), the name escaped so that it
// can only ever be a value; exactly one entry whose attribute equals the
// name is the user. Then bind as that entry's DN with the password, rebind
// as the service account, and search the user's groups under GroupBase.
// Empty passwords are refused before any bind: LDAP takes a bind with a DN
// and no password for an anonymous bind, and answers it with success.
//
// An unknown name (no entry, several, or a name the entry spells another
// way) costs the same round trips as a wrong password: a bind of a DN no
// entry has, with the password given, stands in for the user's bind, so
// names cannot be told apart by timing. The server's own hash check of an
// existing entry is not mirrored (it depends on the server's hash scheme).
//
// Each login opens its own connection and closes it: logins are few (the
// token service hands out tokens; Accounts keeps passing Basic logins for
// a minute), and a connection kept open would need its own bind state,
// health checks and reconnection. At most ldapConns exchanges run at
// once, so that a flood of logins from many addresses (each within its
// failed-login limit) cannot open a connection each to the directory. The
// whole exchange, the wait for its turn included, is bounded by Timeout; a
// directory down, too slow or too busy fails the login with
// ErrUnavailable, never holds it.
type LDAP struct {
	opts    LDAPOptions
	addr    string // host:port
	tls     bool   // ldaps://
	dummyDN string
	slots   chan struct{}
}

// ldapConns bounds the connections one cairn process opens to the
// directory at once.
const ldapConns = 16

// LDAPOptions configure an LDAP Source.
type LDAPOptions struct {
	// URL is ldap://host[:port] or ldaps://host[:port].
	URL string
	// StartTLS upgrades an ldap:// connection before any bind.
	StartTLS bool
	// TLS verifies the server for ldaps:// and StartTLS; nil means the
	// system roots and the URL's host name.
	TLS *tls.Config
	// BindDN and BindPassword are the service account's; an empty BindDN
	// searches anonymously.
	BindDN, BindPassword string
	// UserBase, UserAttribute and UserFilter find users (see LDAP).
	UserBase, UserAttribute, UserFilter string
	// GroupBase ("" for no groups), GroupFilter ({dn} and {user} stand for
	// the user's DN and name, escaped) and GroupAttribute (the group's
	// name) find a user's groups.
	GroupBase, GroupFilter, GroupAttribute string
	// Timeout bounds one login's exchange with the directory.
	Timeout time.Duration
}

// NewLDAP returns the LDAP source of opts. It does not connect: a
// directory down at start-up fails logins, not the registry.
func NewLDAP(opts LDAPOptions) (*LDAP, error) {
	u, err := url.Parse(opts.URL)
	if err != nil || u.Host == "" || (u.Scheme != "ldap" && u.Scheme != "ldaps") {
		return nil, fmt.Errorf("ldap: url %q: want ldap://host[:port] or ldaps://host[:port]", opts.URL)
	}
	l := &LDAP{opts: opts, tls: u.Scheme == "ldaps", addr: u.Host, slots: make(chan struct{}, ldapConns)}
	if u.Port() == "" {
		l.addr = net.JoinHostPort(u.Hostname(), map[bool]string{true: ldap.DefaultLdapsPort, false: ldap.DefaultLdapPort}[l.tls])
	}
	if l.tls && opts.StartTLS {
		return nil, errors.New("ldap: starttls with ldaps://")
	}
	switch {
	case opts.UserBase == "":
		return nil, errors.New("ldap: the user base is required")
	case opts.UserAttribute == "" || opts.Timeout <= 0:
		return nil, errors.New("ldap: the user attribute and a positive timeout are required")
	case opts.GroupBase != "" && (opts.GroupFilter == "" || opts.GroupAttribute == ""):
		return nil, errors.New("ldap: a group base needs a group filter and attribute")
	}
	if l.opts.TLS == nil {
		l.opts.TLS = &tls.Config{}
	}
	l.opts.TLS = l.opts.TLS.Clone()
	if l.opts.TLS.ServerName == "" && !l.opts.TLS.InsecureSkipVerify {
		l.opts.TLS.ServerName = u.Hostname()
	}
	if l.opts.TLS.MinVersion == 0 {
		l.opts.TLS.MinVersion = tls.VersionTLS12
	}
	// No entry has this DN: an unknown user's stand-in bind (see LDAP).
	l.dummyDN = opts.UserAttribute + "=cairn-no-such-user-" + strings.ToLower(rand.Text()) + "," + opts.UserBase
	return l, nil
}

var (
	_ Source   = (*LDAP)(nil)
	_ Lookuper = (*LDAP)(nil)
)

// Name implements Source.
func (l *LDAP) Name() string { return "ldap" }

// Authenticate implements Source.
func (l *LDAP) Authenticate(ctx context.Context, user, pass string) ([]string, error) {
	if pass == "" {
		return nil, errors.New("empty password")
	}
	if user == "" {
		return nil, fmt.Errorf("%w: empty name", ErrUnknownUser)
	}
	return l.exchange(ctx, user, &pass)
}

// Lookup implements Lookuper: the user's groups, if the directory still
// has the user (and the user filter still admits them).
func (l *LDAP) Lookup(ctx context.Context, user string) ([]string, error) {
	if user == "" {
		return nil, fmt.Errorf("%w: empty name", ErrUnknownUser)
	}
	return l.exchange(ctx, user, nil)
}

// exchange is one login (pass non-nil) or lookup (pass nil).
func (l *LDAP) exchange(ctx context.Context, user string, pass *string) ([]string, error) {
	parent := ctx
	ctx, cancel := context.WithTimeout(ctx, l.opts.Timeout)
	defer cancel()
	select {
	case l.slots <- struct{}{}:
		defer func() { <-l.slots }()
	case <-ctx.Done():
		return nil, l.unavailable(parent, ctx, "waiting for a connection slot", ctx.Err())
	}
	c, err := l.dial(ctx)
	if err != nil {
		return nil, l.unavailable(parent, ctx, "connect", err)
	}
	defer c.Close()
	if err := l.bindService(c); err != nil {
		return nil, l.unavailable(parent, ctx, "service account bind", err)
	}
	dn, found, why, err := l.findUser(c, user)
	if err != nil {
		return nil, l.unavailable(parent, ctx, "user search", err)
	}
	if pass != nil {
		bindDN := dn
		if !found {
			bindDN = l.dummyDN
		}
		err := c.Bind(bindDN, *pass)
		switch {
		case !found && !isNetwork(err) && ctx.Err() == nil:
			// Whatever the server said of a DN it does not have.
			return nil, fmt.Errorf("%w: %s", ErrUnknownUser, why)
		case ldap.IsErrorWithCode(err, ldap.LDAPResultInvalidCredentials):
			return nil, fmt.Errorf("wrong password for %s", dn)
		case isNetwork(err) || ctx.Err() != nil:
			return nil, l.unavailable(parent, ctx, "user bind", err)
		case err != nil:
			// Locked, expired, or refused by a policy of the server.
			return nil, fmt.Errorf("bind as %s: %w", dn, err)
		}
	} else if !found {
		return nil, fmt.Errorf("%w: %s", ErrUnknownUser, why)
	}
	if l.opts.GroupBase == "" {
		return []string{}, nil
	}
	if pass != nil {
		// The user may not read groups: search them as the service.
		if err := l.bindService(c); err != nil {
			return nil, l.unavailable(parent, ctx, "service account rebind", err)
		}
	}
	groups, err := l.groups(c, dn, user)
	if err != nil {
		return nil, l.unavailable(parent, ctx, "group search", err)
	}
	return groups, nil
}

// dial connects, TLS included, within ctx; the connection is closed when
// ctx ends, which fails any request in flight instead of holding it.
func (l *LDAP) dial(ctx context.Context) (*ldap.Conn, error) {
	d := &net.Dialer{}
	var raw net.Conn
	var err error
	if l.tls {
		raw, err = (&tls.Dialer{NetDialer: d, Config: l.opts.TLS}).DialContext(ctx, "tcp", l.addr)
	} else {
		raw, err = d.DialContext(ctx, "tcp", l.addr)
	}
	if err != nil {
		return nil, err
	}
	if dl, ok := ctx.Deadline(); ok {
		// Also bounds the StartTLS handshake, which the library runs
		// without a timeout of its own.
		raw.SetDeadline(dl)
	}
	c := ldap.NewConn(raw, l.tls)
	c.Start()
	if dl, ok := ctx.Deadline(); ok {
		c.SetTimeout(time.Until(dl))
	}
	context.AfterFunc(ctx, func() { c.Close() })
	if l.opts.StartTLS {
		if err := c.StartTLS(l.opts.TLS); err != nil {
			c.Close()
			return nil, fmt.Errorf("starttls: %w", err)
		}
	}
	return c, nil
}

func (l *LDAP) bindService(c *ldap.Conn) error {
	if l.opts.BindDN == "" {
		return c.UnauthenticatedBind("")
	}
	return c.Bind(l.opts.BindDN, l.opts.BindPassword)
}

// findUser searches user: found when exactly one entry matches and its
// user attribute holds the name as given; why says otherwise.
func (l *LDAP) findUser(c *ldap.Conn, user string) (dn string, found bool, why string, err error) {
	req := ldap.NewSearchRequest(l.opts.UserBase, ldap.ScopeWholeSubtree, ldap.NeverDerefAliases,
		2, 0, false, userFilter(l.opts.UserAttribute, l.opts.UserFilter, user), []string{l.opts.UserAttribute}, nil)
	res, err := c.Search(req)
	switch {
	case ldap.IsErrorWithCode(err, ldap.LDAPResultSizeLimitExceeded):
		return "", false, "several directory entries match the name", nil
	case ldap.IsErrorWithCode(err, ldap.LDAPResultNoSuchObject):
		return "", false, "", fmt.Errorf("user base %q does not exist: %w", l.opts.UserBase, err)
	case err != nil:
		return "", false, "", err
	case len(res.Entries) == 0:
		return "", false, "no directory entry matches the name", nil
	case len(res.Entries) > 1:
		return "", false, "several directory entries match the name", nil
	}
	e := res.Entries[0]
	if !slices.Contains(e.GetEqualFoldAttributeValues(l.opts.UserAttribute), user) {
		// The server matched case-insensitively or ignoring spaces; the
		// identity must be the name policies spell, so the login must
		// spell it so too.
		return "", false, fmt.Sprintf("entry %s spells the name otherwise", e.DN), nil
	}
	return e.DN, true, "", nil
}

// groups returns the names of the groups of the user at dn.
func (l *LDAP) groups(c *ldap.Conn, dn, user string) ([]string, error) {
	req := ldap.NewSearchRequest(l.opts.GroupBase, ldap.ScopeWholeSubtree, ldap.NeverDerefAliases,
		0, 0, false, groupFilter(l.opts.GroupFilter, dn, user), []string{l.opts.GroupAttribute}, nil)
	res, err := c.Search(req)
	if err != nil {
		return nil, err
	}
	groups := []string{}
	for _, e := range res.Entries {
		for _, name := range e.GetEqualFoldAttributeValues(l.opts.GroupAttribute) {
			if name != "" && !slices.Contains(groups, name) {
				groups = append(groups, name)
			}
		}
	}
	slices.Sort(groups)
	return groups, nil
}

// unavailable wraps err, from step, as ErrUnavailable: the directory could
// not answer. A request that ended (the client left) is not the
// directory's fault and says so instead.
func (l *LDAP) unavailable(parent, ctx context.Context, step string, err error) error {
	if parent.Err() != nil {
		return fmt.Errorf("%s: %w", step, context.Cause(parent))
	}
	if ctx.Err() != nil {
		return fmt.Errorf("%w: %s at %s: no answer within %s", ErrUnavailable, step, l.opts.URL, l.opts.Timeout)
	}
	return fmt.Errorf("%w: %s at %s: %w", ErrUnavailable, step, l.opts.URL, err)
}

func isNetwork(err error) bool {
	return ldap.IsErrorWithCode(err, ldap.ErrorNetwork)
}

// userFilter is the search filter of user: the name escaped (RFC 4515), so
// that "*" or ")(uid=*" is a value, never filter syntax.
func userFilter(attr, filter, user string) string {
	return "(&(" + attr + "=" + ldap.EscapeFilter(user) + ")" + filter + ")"
}

// groupFilter is filter with {dn} and {user} replaced by the user's DN and
// name, escaped.
func groupFilter(filter, dn, user string) string {
	return strings.NewReplacer("{dn}", ldap.EscapeFilter(dn), "{user}", ldap.EscapeFilter(user)).Replace(filter)
}
