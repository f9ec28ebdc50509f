package auth

import (
	"cmp"
	"errors"
	"fmt"
	"regexp"
	"slices"
	"strings"

	"github.com/cairn-registry/cairn/internal/layout"
)

// AccessControl is per-repository access control for every identity
// (htpasswd users, robot keys' owners aside, and the users of sources such
// as LDAP), in the spirit of zot's accessControl, applied by Basic and TokenService (see
// grants in identity.go). A caller without credentials gets the anonymous
// policies, and the challenge to authenticate when they do not cover the
// request (so clients send credentials for a push); a known caller lacking
// an action is refused with 403, the same for repositories that exist and
// those that do not. Each repository is governed by the
// most specific pattern that matches its name (the longest; "*" matches
// within one path segment, "**" across segments): the actions its
// policies give the caller's user name or groups, plus its default
// policy for any authenticated caller, plus its anonymous policy, which
// applies to everyone. The admin policy applies to every repository, and
// only admins may list the catalog (it would name repositories others may
// not see). A repository no pattern matches is open to admins alone.
//
// A caller is in a group when Groups lists their user name under it, or
// when the source that proved them (LDAP) gave them a group of that name:
// the two add up, so a directory group can be topped up with local users.
type AccessControl struct {
	Groups       map[string][]string // group name → user names
	Repositories map[string]RepositoryPolicy
	Admin        Policy
	// SourceGroups says identity sources give groups (auth.ldap is
	// configured): policies may then name groups Groups does not define,
	// whose members the source names. Without it such a group is a typo,
	// refused, since nobody could ever be in it.
	SourceGroups bool
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

// compileACL checks ac and compiles it for lookups.
func compileACL(ac AccessControl) (*acl, error) {
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
		re, err := layout.RepoPattern(pattern)
		if err != nil {
			return nil, fmt.Errorf("auth: access control: %w", err)
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
				if _, ok := ac.Groups[g]; !ok && !ac.SourceGroups {
					return nil, fmt.Errorf("auth: access control: %s names group %q, which groups does not define (and no identity source such as auth.ldap gives groups)", what, g)
				}
				if g == "" {
					return nil, fmt.Errorf("auth: access control: %s names an empty group", what)
				}
			}
		}
		a.patterns = append(a.patterns, aclPattern{pattern: pattern, re: re, policy: p})
	}
	slices.SortFunc(a.patterns, func(x, y aclPattern) int {
		return cmp.Or(cmp.Compare(len(y.pattern), len(x.pattern)), strings.Compare(x.pattern, y.pattern))
	})
	return a, nil
}

func checkActions(what string, actions []string) error {
	for _, a := range actions {
		if a != ActionPull && a != ActionPush && a != ActionDelete && a != ActionAll {
			return fmt.Errorf("auth: access control: %s: unknown action %q (pull, push, delete or *)", what, a)
		}
	}
	return nil
}

// aclCaller is one caller's view of the rules.
type aclCaller struct {
	acl           *acl
	user          string
	groups        []string // the groups the caller's source gave
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
		if slices.Contains(c.acl.groups[g], c.user) || slices.Contains(c.groups, g) {
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
