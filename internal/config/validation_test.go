package config

import (
	"strings"
	"testing"
)

func TestValidationKeys(t *testing.T) {
	c, warnings, err := Parse([]byte("validation:\n  manifests:\n    sparse: true\n    indexes:\n      platforms: List\n      platformlist:\n        - architecture: amd64\n          os: linux\n"))
	if err != nil || len(warnings) != 0 {
		t.Fatalf("Parse: %v, warnings %v", err, warnings)
	}
	m := c.Validation.Manifests
	if !m.Sparse || m.Indexes.Platforms != "list" || len(m.Indexes.PlatformList) != 1 || m.Indexes.PlatformList[0] != (Platform{Architecture: "amd64", OS: "linux"}) {
		t.Fatalf("decoded %+v", m)
	}
	if d := Default(); d.Validation.Manifests.Sparse || d.Validation.Manifests.Indexes.Platforms != "all" {
		t.Fatalf("default validation %+v, want strict (all, not sparse)", d.Validation.Manifests)
	}
	for doc, want := range map[string]string{
		"validation:\n  manifests:\n    indexes:\n      platforms: some\n": "validation.manifests.indexes.platforms",
		"validation:\n  manifests:\n    indexes:\n      platforms: list\n": "platformlist",
	} {
		if _, _, err := Parse([]byte(doc)); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("Parse(%q) = %v, want an error naming %s", doc, err, want)
		}
	}
}
