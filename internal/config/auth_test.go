package config

import (
	"strings"
	"testing"
	"time"
)

func TestTokenServiceKeys(t *testing.T) {
	const hp = "auth:\n  htpasswd:\n    realm: r\n    path: /etc/htpasswd\n"
	c, warnings, err := Parse([]byte(hp + "  tokenservice:\n    service: reg.example\n    expiration: 10m\n    key: /k.pem\n  robots:\n    path: /robots.json\n  failedlogins:\n    burst: 7\n"))
	if err != nil || len(warnings) != 0 {
		t.Fatalf("Parse: %v, warnings %v", err, warnings)
	}
	ts := c.Auth.TokenService.TokenDefaults()
	if ts.Service != "reg.example" || ts.Expiration != 10*time.Minute || ts.Issuer != DefaultTokenIssuer || ts.RefreshExpiration != DefaultRefreshExpiration || ts.Key != "/k.pem" {
		t.Errorf("token service %+v", ts)
	}
	if c.Auth.Robots.Path != "/robots.json" {
		t.Errorf("robots %+v", c.Auth.Robots)
	}
	if b, pm := c.Auth.FailedLogins.Limits(); b != 7 || pm != DefaultFailedPerMinute {
		t.Errorf("limits %d %v", b, pm)
	}
	if b, _ := (FailedLogins{Burst: -1}).Limits(); b != 0 {
		t.Errorf("burst -1: %d, want 0 (off)", b)
	}
	for doc, want := range map[string]string{
		"auth:\n  tokenservice:\n    service: x\n":                       "auth.tokenservice: needs auth.htpasswd",
		hp + "  tokenservice:\n    realm: https://x/auth/token\n":        "auth.tokenservice.service: required",
		hp + "  tokenservice:\n    service: x\n    expiration: 10s\n":    "under a minute",
		hp + "  tokenservice:\n    service: x\n    realm: /auth/token\n": "auth.tokenservice.realm",
		"auth:\n  robots:\n    path: /r.json\n":                          "auth.robots: needs auth.htpasswd",
		hp + "  failedlogins:\n    burst: -2\n":                          "auth.failedlogins",
		hp + "  tokenservice:\n    service: x\n    lifetime: 1m\n":       "auth.tokenservice.lifetime",
	} {
		if _, _, err := Parse([]byte(doc)); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("Parse(%q) = %v, want an error naming %s", doc, err, want)
		}
	}
	c, _, err = LoadWithEnv("", []string{"REGISTRY_AUTH_HTPASSWD_REALM=r", "REGISTRY_AUTH_HTPASSWD_PATH=/h", "REGISTRY_AUTH_TOKENSERVICE_SERVICE=envreg"})
	if err != nil || c.Auth.TokenService == nil || c.Auth.TokenService.Service != "envreg" {
		t.Errorf("from the environment: %v, %+v", err, c.Auth.TokenService)
	}
}
