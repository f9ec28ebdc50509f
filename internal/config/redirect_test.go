package config

import (
	"strings"
	"testing"
)

func TestRedirectKeys(t *testing.T) {
	c, warnings, err := Parse([]byte(`
storage:
  inmemory:
  redirect:
    disable: true
middleware:
  storage:
    - name: redirect
      disabled: true
      options: {baseurl: "https://a.example"}
    - name: cloudfront
      options:
        baseurl: https://d111111abcdef8.cloudfront.net/
        privatekey: /etc/cloudfront.pem
        keypairid: K2JCJMDEHXQW5F
        duration: 3000s
`))
	if err != nil {
		t.Fatal(err)
	}
	if !c.Storage.Redirect.Disable {
		t.Error("storage.redirect.disable not read")
	}
	if len(warnings) != 0 {
		t.Errorf("warnings = %q", warnings)
	}
	if _, _, err := Parse([]byte("middleware:\n  registry:\n    - name: something\n")); err == nil || !strings.Contains(err.Error(), "config: middleware.registry: refused: distribution's registry middlewares are code built into a distribution binary") {
		t.Errorf("middleware.registry: %v, want a refusal with its reason", err)
	}
	sm, i, ok := c.Middleware.RedirectMiddleware()
	if !ok || i != 1 || sm.Name != "cloudfront" || sm.Options["keypairid"] != "K2JCJMDEHXQW5F" || sm.Options["duration"] != "3000s" {
		t.Errorf("RedirectMiddleware() = %+v, %d, %v; want the enabled cloudfront entry", sm, i, ok)
	}
	if Default().Storage.Redirect.Disable {
		t.Error("redirects are disabled by default")
	}
	if _, _, ok := Default().Middleware.RedirectMiddleware(); ok {
		t.Error("a storage middleware is enabled by default")
	}
}

func TestRedirectFromEnvironment(t *testing.T) {
	c, warnings, err := LoadWithEnv("", []string{"REGISTRY_STORAGE_REDIRECT_DISABLE=true"})
	if err != nil || len(warnings) != 0 {
		t.Fatalf("LoadWithEnv: %v, warnings %q", err, warnings)
	}
	if !c.Storage.Redirect.Disable {
		t.Error("REGISTRY_STORAGE_REDIRECT_DISABLE not read")
	}
}

func TestStorageMiddlewareInvalid(t *testing.T) {
	for _, tc := range []struct{ doc, want string }{
		{"middleware:\n  storage:\n    - name: rewrite\n      options: {scheme: https}\n",
			`middleware.storage[0]: "rewrite" is not supported`},
		{"middleware:\n  storage:\n    - options: {baseurl: https://a.example}\n",
			"middleware.storage[0]: name is required"},
		{"middleware:\n  storage:\n    - name: redirect\n    - name: cloudfront\n",
			"middleware.storage: more than one enabled (redirect, cloudfront)"},
		{"storage:\n  redirect:\n    disable: maybe\n", "storage.redirect.disable"},
		{"storage:\n  redirect:\n    enabled: true\n", "storage.redirect.enabled: unknown key"},
	} {
		_, _, err := Parse([]byte(tc.doc))
		if err == nil || !strings.Contains(err.Error(), tc.want) || strings.Contains(err.Error(), "\n") {
			t.Errorf("Parse(%q) = %v, want one line containing %q", tc.doc, err, tc.want)
		}
	}
}
