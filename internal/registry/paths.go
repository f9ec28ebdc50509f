package registry

import (
	"github.com/opencontainers/go-digest"
)

// rootPath is distribution's storage root; every path cairn writes lives below
// it so a directory or bucket written by distribution is served as it is.
const rootPath = "/docker/registry/v2"

// Paths are built by plain concatenation in this one file: GC builds hundreds
// of millions of them, and a generic path builder costs microseconds each.
// Callers pass validated names, tags and digests.

func blobDataPath(d digest.Digest) string {
	hex := d.Encoded()
	return rootPath + "/blobs/" + string(d.Algorithm()) + "/" + hex[:2] + "/" + hex + "/data"
}

// blobRecipePath is where dedup keeps the recipe that rebuilds blob d; in
// full mode it is the only file left in the blob's directory.
func blobRecipePath(d digest.Digest) string {
	hex := d.Encoded()
	return rootPath + "/blobs/" + string(d.Algorithm()) + "/" + hex[:2] + "/" + hex + "/recipe"
}

func repoPath(repo string) string { return rootPath + "/repositories/" + repo }

func repositoriesPath() string { return rootPath + "/repositories" }

func layerLinkDir(repo string, d digest.Digest) string {
	return rootPath + "/repositories/" + repo + "/_layers/" + string(d.Algorithm()) + "/" + d.Encoded()
}

func layerLinkPath(repo string, d digest.Digest) string { return layerLinkDir(repo, d) + "/link" }

func revisionDir(repo string, d digest.Digest) string {
	return rootPath + "/repositories/" + repo + "/_manifests/revisions/" + string(d.Algorithm()) + "/" + d.Encoded()
}

func revisionLinkPath(repo string, d digest.Digest) string { return revisionDir(repo, d) + "/link" }

func tagsPath(repo string) string { return rootPath + "/repositories/" + repo + "/_manifests/tags" }

func tagPath(repo, tag string) string { return tagsPath(repo) + "/" + tag }

func tagCurrentLinkPath(repo, tag string) string { return tagPath(repo, tag) + "/current/link" }

func tagIndexLinkPath(repo, tag string, d digest.Digest) string {
	return tagPath(repo, tag) + "/index/" + string(d.Algorithm()) + "/" + d.Encoded() + "/link"
}

// referrersDir holds one link per manifest whose subject is d. It is cairn's
// addition to the layout (distribution has no referrers index).
func referrersDir(repo string, subject digest.Digest) string {
	return rootPath + "/repositories/" + repo + "/_referrers/" + string(subject.Algorithm()) + "/" + subject.Encoded()
}

func referrerLinkPath(repo string, subject, d digest.Digest) string {
	return referrersDir(repo, subject) + "/" + string(d.Algorithm()) + "/" + d.Encoded() + "/link"
}

func uploadsPath(repo string) string { return rootPath + "/repositories/" + repo + "/_uploads" }

func uploadPath(repo, id string) string { return uploadsPath(repo) + "/" + id }

func uploadStartedAtPath(repo, id string) string { return uploadPath(repo, id) + "/startedat" }

// uploadHeadPath names what an upload session holds (see uploads.go).
func uploadHeadPath(repo, id string) string { return uploadPath(repo, id) + "/head" }

func uploadChunksPath(repo, id string) string { return uploadPath(repo, id) + "/chunks" }

// uploadChunkPath is a chunk object or record of an upload session.
func uploadChunkPath(repo, id, name string) string { return uploadChunksPath(repo, id) + "/" + name }
