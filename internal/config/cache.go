package config

import (
	"fmt"
	"time"
)

// Cache configures what cairn keeps in memory to answer requests without
// reading storage (storage.cache). distribution's blobdescriptor keys are
// recognised but not implemented.
type Cache struct {
	Manifests ManifestCache `yaml:"manifests"`

	_ notYet `yaml:"blobdescriptor"`
	_ notYet `yaml:"blobdescriptorsize"`
}

// ManifestCache configures the cache of manifest GETs and HEADs (cairn):
// manifests by digest, and the tag and revision links that lead to them.
type ManifestCache struct {
	// Size bounds the cache's memory, with an optional unit (default
	// 32MiB; 0 turns the cache off).
	Size string `yaml:"size"`
	// TagTTL is how long a tag or revision link read from storage is
	// trusted (default 1s). Changes made through this node are seen at
	// once; a tag moved or deleted, or a manifest deleted, through another
	// node sharing the storage (or by `cairn gc`) is seen within TagTTL.
	// 0s reads the links on every request.
	TagTTL time.Duration `yaml:"tagttl"`
}

const (
	defaultManifestCacheSize = "32MiB"
	defaultTagTTL            = time.Second
)

func defaultCache() Cache {
	return Cache{Manifests: ManifestCache{Size: defaultManifestCacheSize, TagTTL: defaultTagTTL}}
}

func (c *Cache) validate() error {
	if _, err := ParseBytes(c.Manifests.Size); err != nil {
		return fmt.Errorf("config: storage.cache.manifests.size: %w", err)
	}
	if c.Manifests.TagTTL < 0 {
		return fmt.Errorf("config: storage.cache.manifests.tagttl: must not be negative, not %s", c.Manifests.TagTTL)
	}
	return nil
}
