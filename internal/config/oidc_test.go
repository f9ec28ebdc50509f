package config

import (
	"strings"
	"testing"
	"time"
)

func TestOIDCKeys(t *testing.T) {
	const o = "auth:\n  oidc:\n    issuer: https://idp.example\n    clientid: cairn\n"
	c, warnings, err := Parse([]byte(o + "    clientsecretfile: /s\n    audiences: [cairn, cairn-cli]\n    groupsclaim: roles\n    weblogin: true\n    sessionlifetime: 2h\n  tokenservice:\n    service: reg.example\n"))
	if err != nil || len(warnings) != 0 {
		t.Fatalf("Parse: %v, warnings %v", err, warnings)
	}
	got := c.Auth.OIDC.OIDCDefaults()
	if got.Issuer != "https://idp.example" || got.ClientID != "cairn" || len(got.Audiences) != 2 || got.GroupsClaim != "roles" ||
		got.UsernameClaim != DefaultOIDCUsernameClaim || !got.WebLogin || got.SessionLifetime != 2*time.Hour || got.ClientSecretFile != "/s" {
		t.Errorf("oidc %+v", got)
	}
	if !c.Auth.Accounts() || !c.Auth.Enabled() {
		t.Error("auth.oidc alone does not turn on cairn's accounts")
	}
	for doc, want := range map[string]string{
		"auth:\n  oidc:\n    clientid: cairn\n":                                                     "auth.oidc.issuer: required",
		"auth:\n  oidc:\n    issuer: idp.example\n    clientid: c\n":                                "auth.oidc.issuer",
		"auth:\n  oidc:\n    issuer: http://idp.example\n    clientid: c\n":                         "over https",
		"auth:\n  oidc:\n    issuer: https://idp.example\n":                                         "auth.oidc.clientid: required",
		"auth:\n  oidc:\n    issuer: https://idp.example\n    audiences: [a]\n    weblogin: true\n": "required with weblogin",
		o + "    clientsecret: a\n    clientsecretfile: /b\n":                                       "not both",
		o + "    sessionlifetime: 10s\n":                                                            "auth.oidc.sessionlifetime",
		o + "    redirecturl: https://reg.example/callback\n":                                       "auth.oidc.redirecturl",
		o + "    audiences: [\"\"]\n":                                                               "auth.oidc.audiences",
		o + "    claims: x\n":                                                                       "auth.oidc.claims",
		o + "  token:\n    realm: r\n    service: s\n    issuer: i\n    jwks: /j\n":                 "auth: give one of",
	} {
		if _, _, err := Parse([]byte(doc)); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("Parse(%q) = %v, want an error naming %s", doc, err, want)
		}
	}
	// On the loopback a test provider may serve plain HTTP.
	if _, _, err := Parse([]byte("auth:\n  oidc:\n    issuer: http://127.0.0.1:4444\n    clientid: c\n    redirecturl: http://127.0.0.1:5000/auth/oidc/callback\n")); err != nil {
		t.Errorf("a loopback issuer: %v", err)
	}
}
