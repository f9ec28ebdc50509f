package config

import (
	"fmt"
	"time"
)

// Cache configures what cairn keeps to answer requests without reading
// storage (storage.cache): distribution's blob descriptor cache, and
// cairn's manifest cache.
type Cache struct {
	// BlobDescriptor is inmemory or redis (the redis section); "" is none.
	BlobDescriptor string `yaml:"blobdescriptor"`
	// BlobDescriptorSize bounds the inmemory cache's entries (default
	// 10000; 0 is unbounded).
	BlobDescriptorSize int `yaml:"blobdescriptorsize"`
	// LayerInfo is distribution's deprecated name of BlobDescriptor.
	LayerInfo string `yaml:"layerinfo"`
	// TTL (cairn) bounds how long a blob descriptor is trusted (default
	// 10m): blobs deleted by another node's DELETE are forgotten at once,
	// but those a garbage collection deleted only when their entry expires.
	TTL time.Duration `yaml:"ttl"`
	// Manifests (cairn) keeps recently served manifests and links.
	Manifests ManifestCache `yaml:"manifests"`
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
	return Cache{BlobDescriptorSize: defaultBlobDescriptorSize, TTL: defaultBlobDescriptorTTL,
		Manifests: ManifestCache{Size: defaultManifestCacheSize, TagTTL: defaultTagTTL}}
}

// validateManifests checks the manifest cache's keys.
func (c *Cache) validateManifests() error {
	if _, err := ParseBytes(c.Manifests.Size); err != nil {
		return fmt.Errorf("config: storage.cache.manifests.size: %w", err)
	}
	if c.Manifests.TagTTL < 0 {
		return fmt.Errorf("config: storage.cache.manifests.tagttl: must not be negative, not %s", c.Manifests.TagTTL)
	}
	return nil
}
