package config

import (
	"errors"
	"fmt"
	"net"
	"net/url"
	"strings"
	"time"
)

// LDAP configures an LDAP directory (OpenLDAP, 389-ds, Active Directory)
// as an identity source (auth.ldap): users log in with their directory
// password, and the groups they are members of meet auth.accesscontrol's
// policies by name. A login binds as the service account (BindDN), searches
// the user under UserBase, binds as the user with the password given, then
// searches the user's groups under GroupBase.
type LDAP struct {
	// URL is the server: ldap://host[:389] or ldaps://host[:636].
	URL string `yaml:"url"`
	// StartTLS upgrades an ldap:// connection to TLS before any bind.
	StartTLS bool `yaml:"starttls"`
	// CA is a PEM bundle that verifies the server's certificate (default:
	// the system's roots).
	CA string `yaml:"ca"`
	// InsecureSkipVerify accepts any server certificate: passwords go to
	// whoever answers. For tests only.
	InsecureSkipVerify bool `yaml:"insecureskipverify"`
	// InsecurePlaintext allows ldap:// without StartTLS to a host that is
	// not the loopback: every login's password crosses the network in
	// clear.
	InsecurePlaintext bool `yaml:"insecureplaintext"`
	// BindDN is the service account that searches users and groups; empty
	// searches anonymously. Its password is one of BindPassword,
	// BindPasswordFile (a file holding it) or BindPasswordEnv (the name of
	// an environment variable holding it).
	BindDN           string `yaml:"binddn"`
	BindPassword     string `yaml:"bindpassword"`
	BindPasswordFile string `yaml:"bindpasswordfile"`
	BindPasswordEnv  string `yaml:"bindpasswordenv"`
	// UserBase is where users are searched (subtree); required.
	UserBase string `yaml:"userbase"`
	// UserAttribute holds the login name (default uid; sAMAccountName on
	// Active Directory). A login's name must equal one of its values.
	UserAttribute string `yaml:"userattribute"`
	// UserFilter narrows who may log in, ANDed with
	// (<userattribute>=<name>), e.g. (objectClass=inetOrgPerson)
	// (default (objectClass=*)).
	UserFilter string `yaml:"userfilter"`
	// GroupBase is where groups are searched (subtree); empty: users have
	// no directory groups.
	GroupBase string `yaml:"groupbase"`
	// GroupFilter finds a user's groups: {dn} stands for the user's DN,
	// {user} for the login name, both escaped (default
	// (|(member={dn})(uniqueMember={dn}))).
	GroupFilter string `yaml:"groupfilter"`
	// GroupAttribute holds a group's name, as access-control policies
	// name it (default cn).
	GroupAttribute string `yaml:"groupattribute"`
	// Timeout bounds connecting and each request to the server (default
	// 5s).
	Timeout time.Duration `yaml:"timeout"`
}

// Defaults of auth.ldap.
const (
	DefaultLDAPUserAttribute  = "uid"
	DefaultLDAPUserFilter     = "(objectClass=*)"
	DefaultLDAPGroupFilter    = "(|(member={dn})(uniqueMember={dn}))"
	DefaultLDAPGroupAttribute = "cn"
	DefaultLDAPTimeout        = 5 * time.Second
)

// LDAPDefaults returns l with the defaults of unset keys.
func (l LDAP) LDAPDefaults() LDAP {
	if l.UserAttribute == "" {
		l.UserAttribute = DefaultLDAPUserAttribute
	}
	if l.UserFilter == "" {
		l.UserFilter = DefaultLDAPUserFilter
	}
	if l.GroupFilter == "" {
		l.GroupFilter = DefaultLDAPGroupFilter
	}
	if l.GroupAttribute == "" {
		l.GroupAttribute = DefaultLDAPGroupAttribute
	}
	if l.Timeout == 0 {
		l.Timeout = DefaultLDAPTimeout
	}
	return l
}

// validate checks the section; the error names the key.
func (l *LDAP) validate() error {
	const key = "config: auth.ldap"
	u, err := url.Parse(l.URL)
	switch {
	case l.URL == "":
		return errors.New(key + ".url: required (ldap://host or ldaps://host)")
	case err != nil || (u.Scheme != "ldap" && u.Scheme != "ldaps") || u.Host == "":
		return fmt.Errorf("%s.url: %q is not an ldap:// or ldaps:// URL with a host", key, l.URL)
	case u.Path != "" && u.Path != "/" || u.RawQuery != "" || u.User != nil:
		return fmt.Errorf("%s.url: %q: give only scheme, host and port (the bases and filters have their own keys)", key, l.URL)
	case l.StartTLS && u.Scheme == "ldaps":
		return fmt.Errorf("%s.starttls: %q is already TLS (ldaps)", key, l.URL)
	case u.Scheme == "ldap" && !l.StartTLS && !l.InsecurePlaintext && !loopbackHost(u.Hostname()):
		return fmt.Errorf("%s.url: %q would send every login's password in clear: use ldaps://, starttls: true, or insecureplaintext: true", key, l.URL)
	case l.CA != "" && u.Scheme == "ldap" && !l.StartTLS:
		return fmt.Errorf("%s.ca: needs ldaps:// or starttls: true", key)
	case l.InsecureSkipVerify && u.Scheme == "ldap" && !l.StartTLS:
		return fmt.Errorf("%s.insecureskipverify: needs ldaps:// or starttls: true", key)
	case l.InsecureSkipVerify && l.CA != "":
		return fmt.Errorf("%s: give ca or insecureskipverify, not both", key)
	case l.UserBase == "":
		return errors.New(key + ".userbase: required (the DN under which users are searched)")
	case l.Timeout < 0:
		return fmt.Errorf("%s.timeout: must be positive, not %s", key, l.Timeout)
	}
	given := 0
	for _, s := range []string{l.BindPassword, l.BindPasswordFile, l.BindPasswordEnv} {
		if s != "" {
			given++
		}
	}
	switch {
	case given > 1:
		return errors.New(key + ": give one of bindpassword, bindpasswordfile and bindpasswordenv")
	case given == 1 && l.BindDN == "":
		return errors.New(key + ".binddn: required with a bind password")
	case given == 0 && l.BindDN != "":
		return errors.New(key + ".binddn: needs bindpassword, bindpasswordfile or bindpasswordenv (an empty password would be an unauthenticated bind)")
	}
	d := l.LDAPDefaults()
	if !validAttribute(d.UserAttribute) {
		return fmt.Errorf("%s.userattribute: %q is not an attribute name", key, d.UserAttribute)
	}
	if !validAttribute(d.GroupAttribute) {
		return fmt.Errorf("%s.groupattribute: %q is not an attribute name", key, d.GroupAttribute)
	}
	if err := checkFilter(d.UserFilter); err != nil {
		return fmt.Errorf("%s.userfilter: %w", key, err)
	}
	if strings.Contains(d.UserFilter, "{") {
		return fmt.Errorf("%s.userfilter: %q: no placeholders here (the name is matched on userattribute)", key, d.UserFilter)
	}
	if err := checkFilter(d.GroupFilter); err != nil {
		return fmt.Errorf("%s.groupfilter: %w", key, err)
	}
	if l.GroupBase != "" && !strings.Contains(d.GroupFilter, "{dn}") && !strings.Contains(d.GroupFilter, "{user}") {
		return fmt.Errorf("%s.groupfilter: %q names neither {dn} nor {user}: every user would be in every group it finds", key, d.GroupFilter)
	}
	return nil
}

// loopbackHost reports whether host is this machine.
func loopbackHost(host string) bool {
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// validAttribute reports an LDAP attribute description: a name of letters,
// digits and hyphens starting with a letter, or a numeric OID.
func validAttribute(s string) bool {
	if s == "" {
		return false
	}
	for i, r := range s {
		switch {
		case r >= 'a' && r <= 'z', r >= 'A' && r <= 'Z':
		case r >= '0' && r <= '9', r == '-' && i > 0, r == '.' && i > 0:
		default:
			return false
		}
	}
	return true
}

// checkFilter catches the mistakes a filter's author makes: a filter must
// be parenthesized, with balanced parentheses. The server judges the rest.
func checkFilter(f string) error {
	if !strings.HasPrefix(f, "(") || !strings.HasSuffix(f, ")") {
		return fmt.Errorf("%q: a filter is enclosed in parentheses", f)
	}
	depth := 0
	for i, r := range f {
		switch r {
		case '(':
			depth++
		case ')':
			depth--
		}
		if depth < 0 || depth == 0 && i != len(f)-1 {
			return fmt.Errorf("%q: unbalanced parentheses", f)
		}
	}
	if depth != 0 {
		return fmt.Errorf("%q: unbalanced parentheses", f)
	}
	return nil
}
