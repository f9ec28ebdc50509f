package config

import (
	"strings"
	"testing"
)

// The effective configuration shows what cairn runs with, defaults
// included, and never a secret.
func TestEffectiveMasksSecrets(t *testing.T) {
	doc := `
http:
  secret: http-secret-1
storage:
  s3:
    region: us-east-1
    bucket: b
    accesskey: AKIAEXAMPLE
    secretkey: s3-secret-2
    sessiontoken: s3-token-3
redis:
  addrs: [127.0.0.1:6379]
  password: redis-pass-4
auth:
  token:
    realm: https://auth.example/token
    service: registry
    issuer: issuer
    rootcertbundle: /etc/certs.pem
proxy:
  remoteurl: https://user:proxy-url-pass-5@registry-1.docker.io
  username: user
  password: proxy-pass-6
notifications:
  endpoints:
    - name: hook
      url: https://hooks.example/x
      headers:
        Authorization: [Bearer header-token-7]
log:
  hooks:
    - type: mail
      options:
        smtp: {addr: mail:25, username: u, password: smtp-pass-8}
        from: a@example
        to: [b@example]
`
	c, _, err := Parse([]byte(doc))
	if err != nil {
		t.Fatal(err)
	}
	out, err := c.Effective()
	if err != nil {
		t.Fatal(err)
	}
	text := string(out)
	for _, secret := range []string{"http-secret-1", "s3-secret-2", "s3-token-3", "redis-pass-4", "proxy-url-pass-5", "proxy-pass-6", "header-token-7", "smtp-pass-8"} {
		if strings.Contains(text, secret) {
			t.Errorf("effective configuration shows %q:\n%s", secret, text)
		}
	}
	for _, want := range []string{"secretkey: '********'", "accesskey: AKIAEXAMPLE", "region: us-east-1", "draintimeout: 1m0s", "age: 168h0m0s", "rootcertbundle: /etc/certs.pem", "remoteurl: https://user:xxxxx@registry-1.docker.io"} {
		if !strings.Contains(text, want) {
			t.Errorf("effective configuration lacks %q:\n%s", want, text)
		}
	}
	// Loading what is printed gives the same configuration back, secrets
	// aside: the output is a configuration, not a report.
	if _, _, err := Parse(out); err != nil {
		t.Errorf("the effective configuration does not load: %v\n%s", err, text)
	}
}

// With no file, the effective configuration names the default root.
func TestEffectiveDefault(t *testing.T) {
	out, err := Default().Effective()
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(out), "rootdirectory: ./cairn-data") {
		t.Errorf("default effective configuration:\n%s", out)
	}
}
