package config

import (
	"strings"
	"testing"
	"time"
)

func TestLDAPKeys(t *testing.T) {
	const base = "auth:\n  ldap:\n    userbase: ou=people,dc=x\n"
	c, warnings, err := Parse([]byte(base + "    url: ldaps://ldap.example\n    binddn: cn=svc,dc=x\n    bindpasswordenv: LDAP_PW\n    groupbase: ou=groups,dc=x\n  tokenservice:\n    service: reg\n  accesscontrol:\n    repositories:\n      team/**:\n        policies:\n          - groups: [developers]\n            actions: [pull]\n"))
	if err != nil || len(warnings) != 0 {
		t.Fatalf("Parse: %v, warnings %v", err, warnings)
	}
	if !c.Auth.Accounts() || !c.Auth.Enabled() || c.Auth.Htpasswd != nil {
		t.Errorf("ldap alone: accounts %v, enabled %v", c.Auth.Accounts(), c.Auth.Enabled())
	}
	l := c.Auth.LDAP.LDAPDefaults()
	if l.UserAttribute != "uid" || l.GroupAttribute != "cn" || l.GroupFilter != DefaultLDAPGroupFilter || l.UserFilter != DefaultLDAPUserFilter || l.Timeout != 5*time.Second {
		t.Errorf("defaults: %+v", l)
	}
	for doc, want := range map[string]string{
		"auth:\n  ldap:\n    url: ldaps://x\n":            "auth.ldap.userbase: required",
		base:                                              "auth.ldap.url: required",
		base + "    url: http://x\n":                      "auth.ldap.url",
		base + "    url: ldaps://x/dc=x?uid\n":            "auth.ldap.url",
		base + "    url: ldap://ldap.example\n":           "in clear",
		base + "    url: ldaps://x\n    starttls: true\n": "auth.ldap.starttls",
		base + "    url: ldaps://x\n    ca: /ca.pem\n    insecureskipverify: true\n":                       "ca or insecureskipverify",
		base + "    url: ldap://127.0.0.1\n    insecureskipverify: true\n":                                 "auth.ldap.insecureskipverify",
		base + "    url: ldaps://x\n    binddn: cn=svc\n":                                                  "auth.ldap.binddn: needs bindpassword",
		base + "    url: ldaps://x\n    bindpassword: p\n":                                                 "auth.ldap.binddn: required",
		base + "    url: ldaps://x\n    binddn: cn=s\n    bindpassword: p\n    bindpasswordenv: E\n":       "give one of bindpassword",
		base + "    url: ldaps://x\n    userattribute: \"uid)(x\"\n":                                       "auth.ldap.userattribute",
		base + "    url: ldaps://x\n    userfilter: objectClass=person\n":                                  "auth.ldap.userfilter",
		base + "    url: ldaps://x\n    userfilter: \"(uid={user})\"\n":                                    "no placeholders",
		base + "    url: ldaps://x\n    groupbase: ou=g\n    groupfilter: \"(objectClass=*)\"\n":           "auth.ldap.groupfilter",
		base + "    url: ldaps://x\n    groupfilter: \"(member={dn}))\"\n":                                 "unbalanced",
		base + "    url: ldaps://x\n    timeout: -1s\n":                                                    "auth.ldap.timeout",
		base + "    url: ldaps://x\n    bindpasswrd: p\n":                                                  "auth.ldap.bindpasswrd",
		base + "    url: ldaps://x\n  token:\n    realm: r\n    service: s\n    issuer: i\n    jwks: /j\n": "not several",
	} {
		if _, _, err := Parse([]byte(doc)); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("Parse(%q) = %v, want an error naming %s", doc, err, want)
		}
	}
	// Plain ldap:// is fine to the loopback, or when asked for.
	for _, doc := range []string{
		base + "    url: ldap://127.0.0.1:3890\n",
		base + "    url: ldap://localhost\n",
		base + "    url: ldap://ldap.example\n    starttls: true\n",
		base + "    url: ldap://ldap.example\n    insecureplaintext: true\n",
	} {
		if _, _, err := Parse([]byte(doc)); err != nil {
			t.Errorf("Parse(%q): %v", doc, err)
		}
	}
}
