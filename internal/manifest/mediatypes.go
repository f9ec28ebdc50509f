package manifest

import (
	"strings"

	ocispec "github.com/opencontainers/image-spec/specs-go/v1"
)

// Media types cairn reads besides the OCI ones in ocispec.
const (
	MediaTypeDockerManifest     = "application/vnd.docker.distribution.manifest.v2+json"
	MediaTypeDockerManifestList = "application/vnd.docker.distribution.manifest.list.v2+json"
	MediaTypeDockerSchema1      = "application/vnd.docker.distribution.manifest.v1+json"
	MediaTypeDockerSchema1JWS   = "application/vnd.docker.distribution.manifest.v1+prettyjws"
	MediaTypeDockerImageConfig  = "application/vnd.docker.container.image.v1+json"
	MediaTypeDockerPluginConfig = "application/vnd.docker.plugin.v1+json"
	MediaTypeDockerForeign      = "application/vnd.docker.image.rootfs.foreign.diff.tar.gzip"
)

// IsMediaType reports whether mt names a manifest or index type cairn
// accepts.
func IsMediaType(mt string) bool {
	switch mt {
	case ocispec.MediaTypeImageManifest, ocispec.MediaTypeImageIndex,
		MediaTypeDockerManifest, MediaTypeDockerManifestList:
		return true
	}
	return false
}

// IsIndexMediaType reports whether mt names an index (OCI index or Docker
// manifest list).
func IsIndexMediaType(mt string) bool {
	return mt == ocispec.MediaTypeImageIndex || mt == MediaTypeDockerManifestList
}

// IsNonDistributable reports layers that live outside the registry (Windows
// foreign layers), which a manifest may name without pushing.
func IsNonDistributable(mt string) bool {
	return mt == MediaTypeDockerForeign || strings.Contains(mt, ".nondistributable.")
}
