package registry

import (
	"encoding/json"
	"fmt"
	"strings"

	"github.com/opencontainers/go-digest"
	ocispec "github.com/opencontainers/image-spec/specs-go/v1"
)

// This file exports the storage layout to the garbage collector (package gc)
// and holds the registry's side of the protocol that lets GC run while the
// registry serves (see "GC journal and fences" below, and package gc's
// documentation for the whole protocol).

// RootPath is the storage root every registry path lives under.
const RootPath = rootPath

// RepositoriesPath is the directory holding every repository.
func RepositoriesPath() string { return repositoriesPath() }

// BlobsPath is the directory holding every blob's data.
func BlobsPath() string { return rootPath + "/blobs" }

// BlobDataPath is the data file of blob d.
func BlobDataPath(d digest.Digest) string { return blobDataPath(d) }

// BlobRecipePath is the dedup recipe file of blob d (see package dedup).
func BlobRecipePath(d digest.Digest) string { return blobRecipePath(d) }

// Leaves of a blob's directory: the intact bytes and the dedup recipe.
const (
	BlobData   = "data"
	BlobRecipe = "recipe"
)

// TagCurrentLinkPath is the link naming the manifest tag points at.
func TagCurrentLinkPath(repo, tag string) string { return tagCurrentLinkPath(repo, tag) }

// The Append*Path functions append a path to b by plain concatenation, with
// the digest given as its algorithm and hex parts: GC builds hundreds of
// millions of paths and must not allocate for each. alg and hex must be
// valid (GC parses them from paths it listed).

// AppendBlobDataPath appends blobs/<alg>/<hex[0:2]>/<hex>/data.
func AppendBlobDataPath(b []byte, alg, hex string) []byte {
	b = append(b, rootPath+"/blobs/"...)
	b = append(b, alg...)
	b = append(b, '/')
	b = append(b, hex[:2]...)
	b = append(b, '/')
	b = append(b, hex...)
	return append(b, "/data"...)
}

// AppendRevisionLinkPath appends the revision link of manifest alg:hex in repo.
func AppendRevisionLinkPath(b []byte, repo, alg, hex string) []byte {
	b = appendRepo(b, repo)
	b = append(b, "/_manifests/revisions/"...)
	return appendDigestLink(b, alg, hex)
}

// AppendLayerLinkPath appends the _layers link of blob alg:hex in repo.
func AppendLayerLinkPath(b []byte, repo, alg, hex string) []byte {
	b = appendRepo(b, repo)
	b = append(b, "/_layers/"...)
	return appendDigestLink(b, alg, hex)
}

// AppendTagIndexLinkPath appends tag's index entry for manifest alg:hex.
func AppendTagIndexLinkPath(b []byte, repo, tag, alg, hex string) []byte {
	b = appendRepo(b, repo)
	b = append(b, "/_manifests/tags/"...)
	b = append(b, tag...)
	b = append(b, "/index/"...)
	return appendDigestLink(b, alg, hex)
}

// TagIndexDir is the directory of tag's index entries; an entry's path is
// TagIndexDir + DigestLink(alg, hex). GC builds the two parts once per tag
// and once per manifest, and each of a tag's entries from them.
func TagIndexDir(repo, tag string) string { return tagPath(repo, tag) + "/index/" }

// DigestLink is "<alg>/<hex>/link", the tail of every link path.
func DigestLink(alg, hex string) string { return alg + "/" + hex + "/link" }

// AppendReferrerLinkPath appends the referrers-index link of manifest
// alg:hex under its subject subjAlg:subjHex.
func AppendReferrerLinkPath(b []byte, repo, subjAlg, subjHex, alg, hex string) []byte {
	b = appendRepo(b, repo)
	b = append(b, "/_referrers/"...)
	b = append(b, subjAlg...)
	b = append(b, '/')
	b = append(b, subjHex...)
	b = append(b, '/')
	return appendDigestLink(b, alg, hex)
}

func appendRepo(b []byte, repo string) []byte {
	b = append(b, rootPath+"/repositories/"...)
	return append(b, repo...)
}

func appendDigestLink(b []byte, alg, hex string) []byte {
	b = append(b, alg...)
	b = append(b, '/')
	b = append(b, hex...)
	return append(b, "/link"...)
}

// EntryKind classifies a path below RepositoriesPath.
type EntryKind uint8

// Kinds of repository entries.
const (
	EntryOther        EntryKind = iota // not part of the layout cairn reads
	EntryLayerLink                     // <repo>/_layers/<alg>/<hex>/link
	EntryRevisionLink                  // <repo>/_manifests/revisions/<alg>/<hex>/link
	EntryTagCurrent                    // <repo>/_manifests/tags/<tag>/current/link
	EntryTagIndex                      // <repo>/_manifests/tags/<tag>/index/<alg>/<hex>/link
	EntryUploads                       // <repo>/_uploads (the directory)
	EntryReferrers                     // <repo>/_referrers (the directory)
)

// RepoEntry is a path below RepositoriesPath split into its parts. The
// strings are slices of the path; Alg and Hex are as found, not validated.
type RepoEntry struct {
	Kind     EntryKind
	Repo     string
	Tag      string
	Alg, Hex string
}

// ParseRepoPath splits a path from a listing of RepositoriesPath. A file
// that is not one of the link kinds, and a directory other than _uploads or
// _referrers, is EntryOther (with Repo set when it lies in a repository).
// A repository's own directory ends where its first segment starting with
// '_' begins: no repository name component may start with '_'.
func ParseRepoPath(p string) RepoEntry {
	rest, ok := strings.CutPrefix(p, rootPath+"/repositories/")
	if !ok {
		return RepoEntry{}
	}
	i := strings.Index(rest, "/_")
	if i <= 0 || rest[0] == '_' {
		// No repository directory before the first '_' segment.
		return RepoEntry{}
	}
	e := RepoEntry{Repo: rest[:i]}
	rest = rest[i+1:]
	switch {
	case rest == "_uploads":
		e.Kind = EntryUploads
	case rest == "_referrers":
		e.Kind = EntryReferrers
	case strings.HasPrefix(rest, "_layers/"):
		if alg, hex, ok := digestLink(rest[len("_layers/"):]); ok {
			e.Kind, e.Alg, e.Hex = EntryLayerLink, alg, hex
		}
	case strings.HasPrefix(rest, "_manifests/revisions/"):
		if alg, hex, ok := digestLink(rest[len("_manifests/revisions/"):]); ok {
			e.Kind, e.Alg, e.Hex = EntryRevisionLink, alg, hex
		}
	case strings.HasPrefix(rest, "_manifests/tags/"):
		rest = rest[len("_manifests/tags/"):]
		j := strings.IndexByte(rest, '/')
		if j <= 0 {
			break
		}
		tag, sub := rest[:j], rest[j+1:]
		if sub == "current/link" {
			e.Kind, e.Tag = EntryTagCurrent, tag
		} else if s, ok := strings.CutPrefix(sub, "index/"); ok {
			if alg, hex, ok := digestLink(s); ok {
				e.Kind, e.Tag, e.Alg, e.Hex = EntryTagIndex, tag, alg, hex
			}
		}
	}
	return e
}

// digestLink splits "<alg>/<hex>/link".
func digestLink(s string) (alg, hex string, ok bool) {
	alg, s, ok = strings.Cut(s, "/")
	if !ok {
		return "", "", false
	}
	hex, ok = strings.CutSuffix(s, "/link")
	if !ok || alg == "" || hex == "" || strings.IndexByte(hex, '/') >= 0 {
		return "", "", false
	}
	return alg, hex, true
}

// ParseBlobDataPath splits blobs/<alg>/<xx>/<hex>/data; ok is false for any
// other path, and for a <xx> that is not the start of <hex>.
func ParseBlobDataPath(p string) (alg, hex string, ok bool) {
	alg, hex, leaf, ok := ParseBlobPath(p)
	if !ok || leaf != BlobData {
		return "", "", false
	}
	return alg, hex, true
}

// ParseBlobPath splits blobs/<alg>/<xx>/<hex>/<leaf> where leaf is BlobData
// or BlobRecipe; ok is false for any other path, and for a <xx> that is not
// the start of <hex>.
func ParseBlobPath(p string) (alg, hex, leaf string, ok bool) {
	rest, ok := strings.CutPrefix(p, rootPath+"/blobs/")
	if !ok {
		return "", "", "", false
	}
	i := strings.LastIndexByte(rest, '/')
	if i < 0 {
		return "", "", "", false
	}
	rest, leaf = rest[:i], rest[i+1:]
	if leaf != BlobData && leaf != BlobRecipe {
		return "", "", "", false
	}
	alg, rest, ok = strings.Cut(rest, "/")
	if !ok {
		return "", "", "", false
	}
	pre, hex, ok := strings.Cut(rest, "/")
	if !ok || len(hex) < 2 || pre != hex[:2] || strings.IndexByte(hex, '/') >= 0 {
		return "", "", "", false
	}
	return alg, hex, leaf, true
}

// ManifestRefs are the digests a manifest names, as the garbage collector
// follows them.
type ManifestRefs struct {
	// Blobs: config, layers, Docker schema 1 fsLayers, and index entries
	// whose media type is not a manifest's.
	Blobs []digest.Digest
	// Manifests: index entries that are (or may be) manifests.
	Manifests []digest.Digest
	// Subject is the manifest this one refers to, or "".
	Subject digest.Digest
}

// ParseManifestRefs extracts what a stored manifest references, from any
// manifest flavour a registry may hold (OCI and Docker image manifests and
// indexes, OCI artifact manifests, Docker schema 1 written by distribution).
// Digests that do not parse are skipped and counted in bad.
func ParseManifestRefs(content []byte) (refs ManifestRefs, bad int, err error) {
	var m struct {
		Config    *ocispec.Descriptor  `json:"config"`
		Layers    []ocispec.Descriptor `json:"layers"`
		Blobs     []ocispec.Descriptor `json:"blobs"` // OCI artifact manifest (draft 1.1)
		Manifests []ocispec.Descriptor `json:"manifests"`
		Subject   *ocispec.Descriptor  `json:"subject"`
		FSLayers  []struct {
			BlobSum digest.Digest `json:"blobSum"`
		} `json:"fsLayers"`
	}
	if err := json.Unmarshal(content, &m); err != nil {
		return refs, 0, fmt.Errorf("manifest is not JSON: %w", err)
	}
	add := func(list *[]digest.Digest, d digest.Digest) {
		if d.Validate() != nil {
			bad++
			return
		}
		*list = append(*list, d)
	}
	if m.Config != nil {
		add(&refs.Blobs, m.Config.Digest)
	}
	for _, l := range m.Layers {
		add(&refs.Blobs, l.Digest)
	}
	for _, l := range m.Blobs {
		add(&refs.Blobs, l.Digest)
	}
	for _, l := range m.FSLayers {
		add(&refs.Blobs, l.BlobSum)
	}
	for _, c := range m.Manifests {
		if c.MediaType != "" && !IsManifestMediaType(c.MediaType) && !strings.Contains(c.MediaType, "manifest") {
			add(&refs.Blobs, c.Digest)
			continue
		}
		add(&refs.Manifests, c.Digest)
	}
	if m.Subject != nil {
		if m.Subject.Digest.Validate() == nil {
			refs.Subject = m.Subject.Digest
		} else {
			bad++
		}
	}
	return refs, bad, nil
}
