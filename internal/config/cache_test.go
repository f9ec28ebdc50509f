package config

import (
	"strings"
	"testing"
	"time"
)

func TestCacheKeys(t *testing.T) {
	if got := Default().Storage.Cache.Manifests; got != (ManifestCache{Size: "32MiB", TagTTL: time.Second}) {
		t.Errorf("defaults %+v", got)
	}
	c, warnings, err := Parse([]byte(`
storage:
  filesystem:
    rootdirectory: /tmp/x
  cache:
    blobdescriptor: inmemory
    manifests:
      size: 1MiB
      tagttl: 0s
`))
	if err != nil {
		t.Fatal(err)
	}
	if len(warnings) != 0 || c.Storage.Cache.DescriptorCache() != "inmemory" {
		t.Errorf("warnings %q, descriptor cache %q: both caches configured together", warnings, c.Storage.Cache.DescriptorCache())
	}
	if got := c.Storage.Cache.Manifests; got != (ManifestCache{Size: "1MiB", TagTTL: 0}) {
		t.Errorf("got %+v", got)
	}
	c, _, err = LoadWithEnv("", []string{"REGISTRY_STORAGE_CACHE_MANIFESTS_TAGTTL=250ms"})
	if err != nil {
		t.Fatal(err)
	}
	if got := c.Storage.Cache.Manifests; got.TagTTL != 250*time.Millisecond || got.Size != "32MiB" {
		t.Errorf("from the environment: %+v", got)
	}
	for doc, want := range map[string]string{
		"size: lots":  "storage.cache.manifests.size",
		"size: -1MiB": "storage.cache.manifests.size",
		"tagttl: -1s": "storage.cache.manifests.tagttl",
		"tagttl: 5":   "storage.cache.manifests.tagttl",
	} {
		_, _, err := Parse([]byte("storage:\n  cache:\n    manifests:\n      " + doc + "\n"))
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%q: error %v, want one naming %s", doc, err, want)
		}
	}
}
