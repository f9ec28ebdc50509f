package auth

import (
	"cmp"
	"errors"
	"fmt"
	"net/http"
	"regexp"
	"slices"
	"strings"
)

// AccessControl is per-repository access control for htpasswd users, in
// the spirit of zot's accessControl. Each repository is governed by the
// most specific pattern that matches its name (the longest; "*" matches
// within one path segment, "**" across segments): the actions its
// policies give the caller's user name or groups, plus its default
// policy for any authenticated caller, plus its anonymous policy, which
// applies to everyone. The admin policy applies to every repository, and
// only admins may list the catalog (it would name repositories others may
// not see). A repository no pattern matches is open to admins alone.
type AccessControl struct {
	Groups       map[string][]string // group name → user names
	Repositories map[string]RepositoryPolicy
	Admin        Policy
}

// RepositoryPolicy is what callers may do in the repositories a pattern
// matches.
type RepositoryPolicy struct {
	Policies  []Policy
	Default   []string // actions of any authenticated caller
	Anonymous []string // actions of any caller, with or without credentials
}

// Policy gives actions (pull, push, delete, or "*" for all three) to users
// and to the members of groups.
type Policy struct {
	Users   []string
	Groups  []string
	Actions []string
}

// acl is an AccessControl compiled for lookups.
type acl struct {
	patterns []aclPattern // most specific first
	groups   map[string][]string
	admin    Policy
}

type aclPattern struct {
	pattern string
	re      *regexp.Regexp
	policy  RepositoryPolicy
}

// WithAccessControl wraps next, which authenticates callers (an Htpasswd),
// so that what they may do comes from ac. Wrong credentials are refused as
// next refuses them; a caller without credentials gets the anonymous
// policies, and the challenge to authenticate when they do not cover the
// request (so clients send credentials for a push). A known caller lacking
// an action is refused with 403, the same for repositories that exist and
// those that do not.
func WithAccessControl(next Authorizer, ac AccessControl) (Authorizer, error) {
	a := &acl{groups: ac.Groups, admin: ac.Admin}
	if err := checkActions("admin policy", ac.Admin.Actions); err != nil {
		return nil, err
	}
	for group, users := range ac.Groups {
		if group == "" || slices.Contains(users, "") {
			return nil, fmt.Errorf("auth: access control: group %q: empty group or user name", group)
		}
	}
	for pattern, p := range ac.Repositories {
		re, err := compilePattern(pattern)
		if err != nil {
			return nil, err
		}
		what := fmt.Sprintf("repository pattern %q", pattern)
		if err := errors.Join(checkActions(what+" default policy", p.Default), checkActions(what+" anonymous policy", p.Anonymous)); err != nil {
			return nil, err
		}
		for _, pol := range p.Policies {
			if err := checkActions(what+" policy", pol.Actions); err != nil {
				return nil, err
			}
			for _, g := range pol.Groups {
				if _, ok := ac.Groups[g]; !ok {
					return nil, fmt.Errorf("auth: access control: %s names group %q, which groups does not define", what, g)
				}
			}
		}
		a.patterns = append(a.patterns, aclPattern{pattern: pattern, re: re, policy: p})
	}
	slices.SortFunc(a.patterns, func(x, y aclPattern) int {
		return cmp.Or(cmp.Compare(len(y.pattern), len(x.pattern)), strings.Compare(x.pattern, y.pattern))
	})
	return &aclAuthorizer{next: next, acl: a}, nil
}

// compilePattern turns a repository pattern into an anchored expression:
// "**" matches anything, "*" anything but "/", "?" one character but "/".
func compilePattern(pattern string) (*regexp.Regexp, error) {
	if pattern == "" {
		return nil, errors.New("auth: access control: empty repository pattern")
	}
	var b strings.Builder
	b.WriteString("^")
	for i := 0; i < len(pattern); i++ {
		switch c := pattern[i]; {
		case c == '*' && i+1 < len(pattern) && pattern[i+1] == '*':
			b.WriteString(".*")
			i++
		case c == '*':
			b.WriteString("[^/]*")
		case c == '?':
			b.WriteString("[^/]")
		case 'a' <= c && c <= 'z', '0' <= c && c <= '9', c == '.', c == '_', c == '-', c == '/':
			b.WriteString(regexp.QuoteMeta(string(c)))
		default:
			return nil, fmt.Errorf("auth: access control: repository pattern %q: %q is not allowed (lower-case names, '/', '*', '**', '?')", pattern, c)
		}
	}
	b.WriteString("$")
	return regexp.Compile(b.String())
}

func checkActions(what string, actions []string) error {
	for _, a := range actions {
		if a != ActionPull && a != ActionPush && a != ActionDelete && a != ActionAll {
			return fmt.Errorf("auth: access control: %s: unknown action %q (pull, push, delete or *)", what, a)
		}
	}
	return nil
}

type aclAuthorizer struct {
	next Authorizer
	acl  *acl
}

func (a *aclAuthorizer) Authorize(r *http.Request, need []Access) (Grant, error) {
	g, err := a.next.Authorize(r, need)
	anonymous := errors.Is(err, ErrNoCredentials)
	if err != nil && !anonymous {
		return Grant{}, err
	}
	caller := &aclCaller{acl: a.acl, user: g.Subject, authenticated: !anonymous}
	grant := Grant{Subject: g.Subject, acl: caller}
	missing := grant.missing(need)
	switch {
	case anonymous && (len(need) == 0 || len(missing) > 0):
		// GET /v2/ and what the anonymous policies do not cover ask for
		// credentials: next's challenge.
		return grant, err
	case len(missing) > 0:
		return grant, &Challenge{err: fmt.Errorf("%w: user %q", ErrInsufficientScope, g.Subject), need: missing}
	}
	return grant, nil
}

// aclCaller is one caller's view of the rules.
type aclCaller struct {
	acl           *acl
	user          string
	authenticated bool
}

func (c *aclCaller) allows(a Access) bool {
	if a.Type != TypeRepository {
		// The catalog: admins who may pull.
		return c.pullsEverywhere()
	}
	if c.admin() && slicesAllow(c.acl.admin.Actions, a.Action) {
		return true
	}
	p, ok := c.acl.match(a.Name)
	if !ok {
		return false
	}
	if slicesAllow(p.Anonymous, a.Action) || c.authenticated && slicesAllow(p.Default, a.Action) {
		return true
	}
	for _, pol := range p.Policies {
		if c.in(pol) && slicesAllow(pol.Actions, a.Action) {
			return true
		}
	}
	return false
}

// admin reports whether the admin policy names the caller.
func (c *aclCaller) admin() bool { return c.in(c.acl.admin) }

// in reports whether policy p names the caller, by user or group.
func (c *aclCaller) in(p Policy) bool {
	if !c.authenticated {
		return false
	}
	if slices.Contains(p.Users, c.user) {
		return true
	}
	for _, g := range p.Groups {
		if slices.Contains(c.acl.groups[g], c.user) {
			return true
		}
	}
	return false
}

// pullsEverywhere reports whether the caller may pull every repository:
// only an admin with pull can be sure to, whatever patterns say.
func (c *aclCaller) pullsEverywhere() bool {
	return c.admin() && slicesAllow(c.acl.admin.Actions, ActionPull)
}

// match returns the policy of the most specific pattern matching repo.
func (a *acl) match(repo string) (RepositoryPolicy, bool) {
	for _, p := range a.patterns {
		if p.re.MatchString(repo) {
			return p.policy, true
		}
	}
	return RepositoryPolicy{}, false
}

func slicesAllow(actions []string, action string) bool {
	return slices.Contains(actions, action) || slices.Contains(actions, ActionAll)
}
