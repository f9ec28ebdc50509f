package config

import (
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"
)

func TestServingKeysAreRead(t *testing.T) {
	doc := `http:
  addr: :5000
  tls:
    certificate: /tls/cert.pem
    key: /tls/key.pem
    clientcas: [/tls/ca1.pem, /tls/ca2.pem]
    clientauth: verify-client-cert-if-given
    minimumtls: tls1.3
    ciphersuites: [TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256]
  debug:
    addr: 127.0.0.1:5001
    prometheus:
      path: /prom
  http2:
    disabled: true
auth:
  token:
    realm: https://auth.example/token
    service: registry.example
    issuer: auth.example
    rootcertbundle: /tls/token-ca.pem
    jwks: /tls/jwks.json
    signingalgorithms: [ES256, RS256]
  anonymous:
    pull: true
`
	c, warnings, err := Parse([]byte(doc))
	if err != nil || len(warnings) != 0 {
		t.Fatalf("Parse: %v, warnings %q", err, warnings)
	}
	wantTLS := &TLS{
		Certificate: "/tls/cert.pem", Key: "/tls/key.pem",
		ClientCAs:  []string{"/tls/ca1.pem", "/tls/ca2.pem"},
		ClientAuth: ClientAuthIfGiven, MinimumTLS: "tls1.3",
		CipherSuites: []string{"TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256"},
	}
	if !reflect.DeepEqual(c.HTTP.TLS, wantTLS) {
		t.Errorf("tls = %+v\nwant %+v", c.HTTP.TLS, wantTLS)
	}
	if want := (Debug{Addr: "127.0.0.1:5001", Prometheus: Prometheus{Enabled: true, Path: "/prom"}}); c.HTTP.Debug != want {
		t.Errorf("debug = %+v, want %+v", c.HTTP.Debug, want)
	}
	if !c.HTTP.HTTP2.Disabled {
		t.Error("http2.disabled not read")
	}
	wantToken := &Token{
		Realm: "https://auth.example/token", Service: "registry.example", Issuer: "auth.example",
		RootCertBundle: "/tls/token-ca.pem", JWKS: "/tls/jwks.json", SigningAlgorithms: []string{"ES256", "RS256"},
	}
	if !reflect.DeepEqual(c.Auth.Token, wantToken) || c.Auth.Htpasswd != nil || !c.Auth.Anonymous.Pull {
		t.Errorf("auth = %+v, token %+v", c.Auth, c.Auth.Token)
	}
}

func TestServingDefaults(t *testing.T) {
	c := Default()
	if c.HTTP.TLS != nil || c.Auth.Enabled() || c.HTTP.Debug.Addr != "" {
		t.Errorf("defaults serve TLS %v, auth %v, debug %q", c.HTTP.TLS, c.Auth.Enabled(), c.HTTP.Debug.Addr)
	}
	c, _, err := Parse([]byte("http:\n  tls:\n    certificate: /c\n    key: /k\n"))
	if err != nil {
		t.Fatal(err)
	}
	if c.HTTP.TLS.ClientAuth != ClientAuthRequire || c.HTTP.TLS.MinimumTLS != "tls1.2" {
		t.Errorf("tls defaults = %+v", c.HTTP.TLS)
	}
}

func TestServingKeysAreValidated(t *testing.T) {
	const htpasswd = "auth:\n  htpasswd:\n    realm: r\n    path: /h\n"
	const token = "auth:\n  token:\n    realm: https://a/t\n    service: s\n    issuer: i\n    jwks: /j\n"
	cases := []struct{ name, doc, want string }{
		{"both methods", htpasswd + "  token:\n    realm: x\n", "config: auth: give one of htpasswd (and/or ldap), token or silly, not several"},
		{"anonymous alone", "auth:\n  anonymous:\n    pull: true\n", "config: auth.anonymous.pull: needs auth.htpasswd, auth.ldap, auth.token or auth.silly"},
		{"access control with tokens", token + "  accesscontrol:\n    adminpolicy: {users: [a], actions: [pull]}\n", "config: auth.accesscontrol: needs auth.htpasswd"},
		{"access control and anonymous pull", htpasswd + "  anonymous: {pull: true}\n  accesscontrol:\n    repositories: {'**': {anonymouspolicy: [pull]}}\n", "config: auth.anonymous.pull: give anonymous pulls per repository in auth.accesscontrol"},
		{"htpasswd without path", "auth:\n  htpasswd:\n    realm: r\n", "config: auth.htpasswd.path: required"},
		{"htpasswd without realm", "auth:\n  htpasswd:\n    path: /h\n", "config: auth.htpasswd.realm: required"},
		{"token without service", strings.Replace(token, "    service: s\n", "", 1), "config: auth.token.service: required"},
		{"token without issuer", strings.Replace(token, "    issuer: i\n", "", 1), "config: auth.token.issuer: required"},
		{"token without realm", strings.Replace(token, "    realm: https://a/t\n", "", 1), "config: auth.token.realm: required"},
		{"token without keys", strings.Replace(token, "    jwks: /j\n", "", 1), "config: auth.token: give rootcertbundle or jwks"},
		{"unknown auth method", "auth:\n  keystone:\n    url: x\n", "config: auth.keystone: unknown authentication method"},
		{"silly auth", "auth:\n  silly:\n    realm: x\n", "config: auth.silly: realm and service are required"},
		{"tls without certificate", "http:\n  tls:\n    key: /k\n", "config: http.tls.certificate: required"},
		{"tls 1.0", "http:\n  tls:\n    certificate: /c\n    key: /k\n    minimumtls: tls1.0\n", "config: http.tls.minimumtls: tls1.0 is insecure"},
		{"tls version garbage", "http:\n  tls:\n    certificate: /c\n    key: /k\n    minimumtls: ssl3\n", `config: http.tls.minimumtls: "ssl3" is not one of tls1.2, tls1.3`},
		{"clientauth garbage", "http:\n  tls:\n    certificate: /c\n    key: /k\n    clientauth: maybe\n", `config: http.tls.clientauth: "maybe" is not one of`},
		{"letsencrypt", "http:\n  tls:\n    letsencrypt:\n      email: a@b\n", "config: http.tls.letsencrypt.cachefile: required"},
		{"debug addr", "http:\n  debug:\n    addr: nowhere\n", `config: http.debug.addr: "nowhere": missing port in address`},
		{"debug addr is http addr", "http:\n  addr: 127.0.0.1:5000\n  debug:\n    addr: 127.0.0.1:5000\n", "config: http.debug.addr: \"127.0.0.1:5000\" is also http.addr"},
		{"metrics path", "http:\n  debug:\n    addr: :5001\n    prometheus:\n      path: /readyz\n", `config: http.debug.prometheus.path: "/readyz" must start with /`},
		{"debug tls", "http:\n  debug:\n    addr: :5001\n    tls:\n      certificate: /c\n", "config: http.debug.tls: refused"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			_, _, err := Parse([]byte(tc.doc))
			if err == nil || !strings.HasPrefix(err.Error(), tc.want) {
				t.Errorf("err = %v\nwant prefix %s", err, tc.want)
			}
		})
	}
}

func TestServingKeysFromEnvironment(t *testing.T) {
	c, warnings, err := LoadWithEnv("", []string{
		"REGISTRY_AUTH_HTPASSWD_REALM=basic",
		"REGISTRY_AUTH_HTPASSWD_PATH=/etc/htpasswd",
		"REGISTRY_AUTH_ANONYMOUS_PULL=true",
		"REGISTRY_HTTP_TLS_CERTIFICATE=/c.pem",
		"REGISTRY_HTTP_TLS_KEY=/k.pem",
		"REGISTRY_HTTP_TLS_CLIENTCAS=[/ca.pem]",
		"REGISTRY_HTTP_DEBUG_ADDR=127.0.0.1:5001",
	})
	if err != nil || len(warnings) != 0 {
		t.Fatalf("LoadWithEnv: %v, warnings %q", err, warnings)
	}
	if h := c.Auth.Htpasswd; h == nil || h.Realm != "basic" || h.Path != "/etc/htpasswd" || !c.Auth.Anonymous.Pull {
		t.Errorf("auth = %+v", c.Auth)
	}
	if tl := c.HTTP.TLS; tl == nil || tl.Certificate != "/c.pem" || tl.Key != "/k.pem" || !slices.Equal(tl.ClientCAs, []string{"/ca.pem"}) {
		t.Errorf("tls = %+v", c.HTTP.TLS)
	}
	if c.HTTP.Debug.Addr != "127.0.0.1:5001" {
		t.Errorf("debug.addr = %q", c.HTTP.Debug.Addr)
	}
}

func TestProxyKeys(t *testing.T) {
	c, _, err := Parse([]byte("proxy:\n  revalidate: 5m\n  upstreams:\n    - prefix: docker.io/\n      remoteurl: https://registry-1.docker.io\n      username: u\n      password: p\n    - prefix: ghcr.io\n      remoteurl: https://ghcr.io\n      ttl: 0s\n      revalidate: 30s\n"))
	if err != nil {
		t.Fatal(err)
	}
	all := c.Proxy.All()
	if len(all) != 2 || *all[0].TTL != 168*time.Hour || all[0].Revalidate != 5*time.Minute || *all[1].TTL != 0 || all[1].Revalidate != 30*time.Second || all[0].Username != "u" {
		t.Fatalf("upstreams %+v", all)
	}
	c, _, err = Parse([]byte("proxy:\n  remoteurl: https://registry-1.docker.io\n  ttl: 24h\n"))
	if err != nil {
		t.Fatal(err)
	}
	if all := c.Proxy.All(); len(all) != 1 || all[0].Prefix != "" || *all[0].TTL != 24*time.Hour || all[0].Revalidate != time.Minute {
		t.Fatalf("remoteurl: %+v", all)
	}
	for doc, want := range map[string]string{
		"proxy:\n  remoteurl: https://a\n  upstreams:\n    - {prefix: x, remoteurl: https://b}\n":                   "config: proxy: give remoteurl",
		"proxy:\n  upstreams:\n    - {remoteurl: https://b}\n":                                                      "config: proxy.upstreams[0].prefix: required",
		"proxy:\n  upstreams:\n    - {prefix: x, remoteurl: ftp://b}\n":                                             `config: proxy.upstreams[0].remoteurl: "ftp://b" is not an http(s) URL`,
		"proxy:\n  upstreams:\n    - {prefix: x, remoteurl: https://b}\n    - {prefix: x/, remoteurl: https://c}\n": `config: proxy.upstreams[1].prefix: "x" is given twice`,
		"proxy:\n  remoteurl: registry-1.docker.io\n":                                                               `config: proxy.remoteurl: "registry-1.docker.io" is not an http(s) URL`,
	} {
		if _, _, err := Parse([]byte(doc)); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%q: %v, want %q", doc, err, want)
		}
	}
}
