package main

import (
	"fmt"

	"github.com/cairn-registry/cairn/internal/auth"
	"github.com/cairn-registry/cairn/internal/config"
)

// newAuthorizer builds the authorizer auth configures; nil when none is.
func newAuthorizer(c config.Auth) (auth.Authorizer, error) {
	var a auth.Authorizer
	switch {
	case c.Htpasswd != nil:
		h, err := auth.LoadHtpasswd(c.Htpasswd.Realm, c.Htpasswd.Path)
		if err != nil {
			return nil, fmt.Errorf("config: auth.htpasswd.path: %w", err)
		}
		a = h
		if c.AccessControl != nil {
			if a, err = auth.WithAccessControl(h, accessControl(*c.AccessControl)); err != nil {
				return nil, fmt.Errorf("config: auth.accesscontrol: %w", err)
			}
		}
	case c.Silly != nil:
		a = auth.NewSilly(c.Silly.Realm, c.Silly.Service)
	case c.Token != nil:
		t, err := auth.NewToken(auth.TokenOptions{
			Realm:             c.Token.Realm,
			Service:           c.Token.Service,
			Issuer:            c.Token.Issuer,
			RootCertBundle:    c.Token.RootCertBundle,
			JWKS:              c.Token.JWKS,
			SigningAlgorithms: c.Token.SigningAlgorithms,
			AutoRedirect:      c.Token.AutoRedirect,
			AutoRedirectPath:  c.Token.AutoRedirectPath,
		})
		if err != nil {
			return nil, fmt.Errorf("config: auth.token: %w", err)
		}
		a = t
	default:
		return nil, nil
	}
	if c.Anonymous.Pull {
		a = auth.AnonymousPull(a)
	}
	return a, nil
}

// accessControl is the auth package's form of the accesscontrol section.
func accessControl(c config.AccessControl) auth.AccessControl {
	policy := func(p config.ACLPolicy) auth.Policy {
		return auth.Policy{Users: p.Users, Groups: p.Groups, Actions: p.Actions}
	}
	ac := auth.AccessControl{Groups: map[string][]string{}, Repositories: map[string]auth.RepositoryPolicy{}, Admin: policy(c.AdminPolicy)}
	for name, g := range c.Groups {
		ac.Groups[name] = g.Users
	}
	for pattern, r := range c.Repositories {
		rp := auth.RepositoryPolicy{Default: r.DefaultPolicy, Anonymous: r.AnonymousPolicy}
		for _, p := range r.Policies {
			rp.Policies = append(rp.Policies, policy(p))
		}
		ac.Repositories[pattern] = rp
	}
	return ac
}

func authName(c config.Auth) string {
	name := "none"
	switch {
	case c.Htpasswd != nil:
		name = "htpasswd"
	case c.Token != nil:
		name = "token"
	case c.Silly != nil:
		name = "silly"
	}
	if c.Anonymous.Pull {
		name += "+anonymous-pull"
	}
	if c.AccessControl != nil {
		name += "+accesscontrol"
	}
	return name
}
