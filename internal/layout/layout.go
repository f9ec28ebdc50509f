// Package layout spells every path of cairn's store; nothing else does. The
// tree is distribution's (so a registry it wrote is served as it is) with
// cairn's additions beside it, never changing the meaning of the rest:
//
//	/docker/registry/v2/                                       Root
//	  blobs/<alg>/<hex[0:2]>/<hex>/data                        BlobData: a blob's bytes
//	  blobs/<alg>/<hex[0:2]>/<hex>/recipe                      BlobRecipe: dedup's rebuild recipe (cairn)
//	  repositories/<name>/                                     Repo
//	    _layers/<alg>/<hex>/link                               LayerLink
//	    _manifests/revisions/<alg>/<hex>/link                  RevisionLink
//	    _manifests/tags/<tag>/current/link                     TagCurrentLink
//	    _manifests/tags/<tag>/index/<alg>/<hex>/link           TagIndexLink
//	    _referrers/<alg>/<hex>/<alg>/<hex>/link                ReferrerLink: subject, then referrer (cairn)
//	    _cairn/pulls.json                                      RepoPulls: pulls by tag, for retention (cairn)
//	    _uploads/<id>/startedat                                UploadStartedAt
//	    _uploads/<id>/head                                     UploadHead: what the session holds (cairn)
//	    _uploads/<id>/chunks/<name>                            UploadChunk: chunk objects and records (cairn)
//	  cairn/                                                   everything else of cairn's
//	    store-id                                               StoreID: the store's identity (dedup's metadata names it)
//	    dedup/intake/<alg>-<hex>                               DedupIntake: a pushed image dedup could not admit yet
//	    gc/active/run-<id>, fence-<id>-<round>                 GCActive: online-GC markers and fences
//	    gc/journal/<repo>/_blobs|_manifests/<alg>/<hex>/<nonce> JournalRecord: writers' records
//	    files/<alg>/<hex[0:2]>/<hex>                           File: a unique file of dedup (zstd), before packs
//	    packs/<id[0:2]>/<id>                                   Pack: many unique files and their index (package pack)
//	    tmp/files/..., tmp/promote/...                         Tmp: partial writes, swept by GC
//	    tmp/ready/<id>                                         ReadyProbe: readiness's write probe (a crash's leftover is swept)
//	    unsynced/<epoch>/<alg>-<hex>/<nonce>                   UnsyncedMarker: a blob not yet synced (package registry)
//	    ui/history.json                                        UIHistory: the web page's storage story over time (package webui)
//	    replication/<target>/<repo>/_record.json               ReplicationRecord: what travelled to or from a peer (package replicate)
//
// A repository's directories are named by constants (LayersSubdir,
// ManifestsSubdir, ReferrersSubdir, UploadsSubdir, RepoCairnSubdir), each
// starting with '_', which no repository name component may; listings are
// split by ParseRepoPath (links, as EntryKind) and SplitRepoDir
// (directories).
//
// Paths are built by plain concatenation: GC builds hundreds of millions of
// them, and a generic path builder costs microseconds each. The Append
// forms append to a buffer without allocating. Callers pass validated
// names, tags and digests; the Parse functions split what listings return.
package layout

import (
	"errors"
	"fmt"
	"regexp"
	"strconv"
	"strings"

	"github.com/opencontainers/go-digest"
)

// Root is distribution's storage root; every path lives below it.
const Root = "/docker/registry/v2"

// Leaves of a blob's directory: the intact bytes and the dedup recipe.
const (
	BlobDataLeaf   = "data"
	BlobRecipeLeaf = "recipe"
)

// BlobsDir holds every blob.
const BlobsDir = Root + "/blobs"

// RepositoriesDir holds every repository.
const RepositoriesDir = Root + "/repositories"

// CairnDir holds cairn's own additions that are not per repository or
// per blob.
const CairnDir = Root + "/cairn"

// BlobDir is blob d's directory.
func BlobDir(d digest.Digest) string {
	hex := d.Encoded()
	return BlobsDir + "/" + string(d.Algorithm()) + "/" + hex[:2] + "/" + hex
}

// BlobData is the file holding blob d's bytes.
func BlobData(d digest.Digest) string { return BlobDir(d) + "/" + BlobDataLeaf }

// BlobRecipe is where dedup keeps the recipe that rebuilds blob d; in full
// mode it is the only file of the blob's directory.
func BlobRecipe(d digest.Digest) string { return BlobDir(d) + "/" + BlobRecipeLeaf }

// AppendBlobData appends blobs/<alg>/<hex[0:2]>/<hex>/data for the digest
// given as its algorithm and hex parts.
func AppendBlobData(b []byte, alg, hex string) []byte {
	b = appendFanned(append(b, BlobsDir+"/"...), alg, hex)
	return append(b, "/"+BlobDataLeaf...)
}

// appendFanned appends <alg>/<hex[0:2]>/<hex>.
func appendFanned(b []byte, alg, hex string) []byte {
	b = append(b, alg...)
	b = append(b, '/')
	b = append(b, hex[:2]...)
	b = append(b, '/')
	return append(b, hex...)
}

// Repo is repository repo's directory.
func Repo(repo string) string { return RepositoriesDir + "/" + repo }

// The directories of a repository, one per kind of entry. Each starts
// with '_', which no component of a repository name may: a listing tells
// where a repository's name ends by it.
const (
	LayersSubdir    = "_layers"    // blob links
	ManifestsSubdir = "_manifests" // revision and tag links
	ReferrersSubdir = "_referrers" // the referrers index (cairn)
	UploadsSubdir   = "_uploads"   // upload sessions
	RepoCairnSubdir = "_cairn"     // cairn's own files of the repository
)

// SplitRepoDir splits a directory a listing of RepositoriesDir returns
// whose last component starts with '_' into the repository and that
// component (LayersSubdir, ManifestsSubdir, ...); ok is false for any
// other path. repo is "" for such a directory right below
// RepositoriesDir, which belongs to no repository.
func SplitRepoDir(p string) (repo, subdir string, ok bool) {
	rest, found := strings.CutPrefix(p, RepositoriesDir+"/")
	if !found {
		return "", "", false
	}
	i := strings.LastIndexByte(rest, '/')
	repo, subdir = rest[:max(i, 0)], rest[i+1:]
	if !strings.HasPrefix(subdir, "_") {
		return "", "", false
	}
	return repo, subdir, true
}

// RepoPulls holds repo's pulls by tag (package retention's record).
func RepoPulls(repo string) string { return Repo(repo) + "/" + RepoCairnSubdir + "/pulls.json" }

// LayerLinkDir is the directory of repo's link to blob d.
func LayerLinkDir(repo string, d digest.Digest) string {
	return Repo(repo) + "/" + LayersSubdir + "/" + string(d.Algorithm()) + "/" + d.Encoded()
}

// LayerLink links blob d into repo.
func LayerLink(repo string, d digest.Digest) string { return LayerLinkDir(repo, d) + "/link" }

// ManifestsDir holds repo's revision and tag links.
func ManifestsDir(repo string) string { return Repo(repo) + "/" + ManifestsSubdir }

// RevisionDir is the directory of manifest d's revision link in repo.
func RevisionDir(repo string, d digest.Digest) string {
	return ManifestsDir(repo) + "/revisions/" + string(d.Algorithm()) + "/" + d.Encoded()
}

// RevisionLink makes manifest d a revision of repo.
func RevisionLink(repo string, d digest.Digest) string { return RevisionDir(repo, d) + "/link" }

// TagsDir holds repo's tags.
func TagsDir(repo string) string { return ManifestsDir(repo) + "/tags" }

// TagDir is tag's directory.
func TagDir(repo, tag string) string { return TagsDir(repo) + "/" + tag }

// TagCurrentLink names the manifest tag points at.
func TagCurrentLink(repo, tag string) string { return TagDir(repo, tag) + "/current/link" }

// TagIndexDir is the directory of tag's index entries; an entry's path is
// TagIndexDir + DigestLink(alg, hex). GC builds the two parts once per tag
// and once per manifest, and each of a tag's entries from them.
func TagIndexDir(repo, tag string) string { return TagDir(repo, tag) + "/index/" }

// TagIndexLink records that tag pointed at manifest d.
func TagIndexLink(repo, tag string, d digest.Digest) string {
	return TagIndexDir(repo, tag) + DigestLink(string(d.Algorithm()), d.Encoded())
}

// DigestLink is "<alg>/<hex>/link", the tail of every link path.
func DigestLink(alg, hex string) string { return alg + "/" + hex + "/link" }

// ReferrersDir holds one link per manifest of repo whose subject is d: the
// referrers index, cairn's addition (distribution has none).
func ReferrersDir(repo string, subject digest.Digest) string {
	return Repo(repo) + "/" + ReferrersSubdir + "/" + string(subject.Algorithm()) + "/" + subject.Encoded()
}

// ReferrerLink lists manifest d among subject's referrers in repo.
func ReferrerLink(repo string, subject, d digest.Digest) string {
	return ReferrersDir(repo, subject) + "/" + DigestLink(string(d.Algorithm()), d.Encoded())
}

// AppendRevisionLink appends the revision link of manifest alg:hex in repo.
func AppendRevisionLink(b []byte, repo, alg, hex string) []byte {
	b = appendRepo(b, repo)
	b = append(b, "/"+ManifestsSubdir+"/revisions/"...)
	return appendDigestLink(b, alg, hex)
}

// AppendLayerLink appends the _layers link of blob alg:hex in repo.
func AppendLayerLink(b []byte, repo, alg, hex string) []byte {
	b = appendRepo(b, repo)
	b = append(b, "/"+LayersSubdir+"/"...)
	return appendDigestLink(b, alg, hex)
}

// AppendTagIndexLink appends tag's index entry for manifest alg:hex.
func AppendTagIndexLink(b []byte, repo, tag, alg, hex string) []byte {
	b = appendRepo(b, repo)
	b = append(b, "/"+ManifestsSubdir+"/tags/"...)
	b = append(b, tag...)
	b = append(b, "/index/"...)
	return appendDigestLink(b, alg, hex)
}

// AppendReferrerLink appends the referrers-index link of manifest alg:hex
// under its subject subjAlg:subjHex.
func AppendReferrerLink(b []byte, repo, subjAlg, subjHex, alg, hex string) []byte {
	b = appendRepo(b, repo)
	b = append(b, "/"+ReferrersSubdir+"/"...)
	b = append(b, subjAlg...)
	b = append(b, '/')
	b = append(b, subjHex...)
	b = append(b, '/')
	return appendDigestLink(b, alg, hex)
}

func appendRepo(b []byte, repo string) []byte {
	b = append(b, RepositoriesDir+"/"...)
	return append(b, repo...)
}

func appendDigestLink(b []byte, alg, hex string) []byte {
	b = append(b, alg...)
	b = append(b, '/')
	b = append(b, hex...)
	return append(b, "/link"...)
}

// UploadsDir holds repo's upload sessions.
func UploadsDir(repo string) string { return Repo(repo) + "/" + UploadsSubdir }

// UploadDir is upload session id of repo.
func UploadDir(repo, id string) string { return UploadsDir(repo) + "/" + id }

// UploadStartedAt holds when session id started (RFC 3339).
func UploadStartedAt(repo, id string) string { return UploadDir(repo, id) + "/startedat" }

// UploadHead names what session id holds (see the registry's uploads).
func UploadHead(repo, id string) string { return UploadDir(repo, id) + "/head" }

// UploadChunksDir holds session id's chunk objects and records.
func UploadChunksDir(repo, id string) string { return UploadDir(repo, id) + "/chunks" }

// UploadChunk is a chunk object or record of session id.
func UploadChunk(repo, id, name string) string { return UploadChunksDir(repo, id) + "/" + name }

// The online GC's protocol lives under cairn/gc (package fence tells it).
const (
	// GCActiveDir holds one marker per running GC (GCRunPrefix+<id>) and
	// one fence per open sweep round (GCFencePrefix+<id>-<round>).
	GCActiveDir = CairnDir + "/gc/active"
	// GCJournalDir holds the records of writers' operations in progress.
	GCJournalDir  = CairnDir + "/gc/journal"
	GCRunPrefix   = "run-"
	GCFencePrefix = "fence-"
)

// GCRunMarker is the marker of GC run id.
func GCRunMarker(id string) string { return GCActiveDir + "/" + GCRunPrefix + id }

// GCFence is the fence of round n of GC run id.
func GCFence(id string, n int) string {
	return GCActiveDir + "/" + GCFencePrefix + id + "-" + strconv.Itoa(n)
}

// JournalRecord is the path of a writer's record about digest d of repo (a
// manifest when manifest is true, else a blob). nonce makes each
// operation's record its own file, so removing one never removes another's.
func JournalRecord(repo string, manifest bool, d digest.Digest, nonce string) string {
	kind := "/_blobs/"
	if manifest {
		kind = "/_manifests/"
	}
	return GCJournalDir + "/" + repo + kind + string(d.Algorithm()) + "/" + d.Encoded() + "/" + nonce
}

// StoreID holds the store's identity: a random id written at first use,
// which a metadata store records once it is a complete index of this store.
const StoreID = CairnDir + "/store-id"

// UIHistory holds the web page's storage story over time (samples of the
// stored figures, GC runs), small and bounded, so that a restart continues
// it.
const UIHistory = CairnDir + "/ui/history.json"

// ReplicationDir holds, per replication target, the record of what was
// replicated to or from its peer, one file per repository.
const ReplicationDir = CairnDir + "/replication"

// ReplicationRecord is target's record for repository repo. Its leaf
// starts with '_', which no repository name component may, so the record
// of a/b never collides with a directory of repository a/b/c.
func ReplicationRecord(target, repo string) string {
	return ReplicationDir + "/" + target + "/" + repo + "/_record.json"
}

// DedupIntakeDir holds the pushed images whose layers dedup could not
// record (its metadata store was down): retried until recorded.
const DedupIntakeDir = CairnDir + "/dedup/intake"

// DedupIntake is the intake record of manifest d.
func DedupIntake(d digest.Digest) string {
	return DedupIntakeDir + "/" + string(d.Algorithm()) + "-" + d.Encoded()
}

// ParseDedupIntake returns the manifest digest of a path DedupIntake built.
func ParseDedupIntake(p string) (digest.Digest, bool) {
	rest, ok := strings.CutPrefix(p, DedupIntakeDir+"/")
	alg, hex, cut := strings.Cut(rest, "-")
	d := digest.NewDigestFromEncoded(digest.Algorithm(alg), hex)
	if !ok || !cut || d.Validate() != nil {
		return "", false
	}
	return d, true
}

// FilesDir holds dedup's unique files.
const FilesDir = CairnDir + "/files"

// File is where dedup keeps the unique file with digest d.
func File(d digest.Digest) string {
	return string(AppendFile(nil, string(d.Algorithm()), d.Encoded()))
}

// AppendFile appends cairn/files/<alg>/<hex[0:2]>/<hex>.
func AppendFile(b []byte, alg, hex string) []byte {
	return appendFanned(append(b, FilesDir+"/"...), alg, hex)
}

// PacksDir holds dedup's packs.
const PacksDir = CairnDir + "/packs"

// Pack is the object of the pack with id (lower-case hex, at least two
// characters).
func Pack(id string) string { return PacksDir + "/" + id[:2] + "/" + id }

// ParsePackPath returns the id of a path Pack built; ok is false for any
// other path.
func ParsePackPath(p string) (id string, ok bool) {
	rest, found := strings.CutPrefix(p, PacksDir+"/")
	if !found || len(rest) < 5 || rest[2] != '/' {
		return "", false
	}
	id = rest[3:]
	if id[:2] != rest[:2] || strings.IndexByte(id, '/') >= 0 {
		return "", false
	}
	return id, true
}

// UnsyncedDir holds the markers of blobs stored without a sync on a
// filesystem, by cache epoch (boot id); see package registry's seal.go.
const UnsyncedDir = CairnDir + "/unsynced"

// UnsyncedBlobDir holds the markers of blob d stored in epoch.
func UnsyncedBlobDir(epoch string, d digest.Digest) string {
	return UnsyncedDir + "/" + epoch + "/" + string(d.Algorithm()) + "-" + d.Encoded()
}

// UnsyncedMarker is one commit's marker of blob d stored in epoch.
func UnsyncedMarker(epoch string, d digest.Digest, nonce string) string {
	return UnsyncedBlobDir(epoch, d) + "/" + nonce
}

// ParseUnsyncedMarker splits a path UnsyncedMarker built; ok is false for
// any other path.
func ParseUnsyncedMarker(p string) (epoch string, d digest.Digest, ok bool) {
	rest, found := strings.CutPrefix(p, UnsyncedDir+"/")
	if !found {
		return "", "", false
	}
	parts := strings.Split(rest, "/")
	if len(parts) != 3 || parts[0] == "" || parts[2] == "" {
		return "", "", false
	}
	alg, hex, cut := strings.Cut(parts[1], "-")
	d = digest.NewDigestFromEncoded(digest.Algorithm(alg), hex)
	if !cut || d.Validate() != nil {
		return "", "", false
	}
	return parts[0], d, true
}

// TmpDir holds partial writes that must not sit at their final,
// content-addressed paths; GC sweeps what is older than its delay.
const TmpDir = CairnDir + "/tmp"

// TmpFile is where dedup writes the unique file with digest d (with a
// random suffix) before moving it to File(d).
func TmpFile(d digest.Digest, suffix string) string {
	return string(appendFanned(append([]byte(nil), TmpDir+"/files/"...), string(d.Algorithm()), d.Encoded())) + "-" + suffix
}

// TmpPromote is where dedup rebuilds a layer's intact copy (with a random
// suffix) before moving it to BlobData.
func TmpPromote(d digest.Digest, suffix string) string {
	return TmpDir + "/promote/" + d.Encoded() + "-" + suffix
}

// ReadyProbe is the small object a node's readiness check writes and
// deletes to prove the store writable; id names the process, so that
// nodes sharing a store never delete each other's probe. Under TmpDir: a
// probe a crash left behind is swept by GC.
func ReadyProbe(id string) string { return TmpDir + "/ready/" + id }

// EntryKind classifies a path below RepositoriesDir.
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
	EntryReferrerLink                  // <repo>/_referrers/<subject alg>/<subject hex>/<alg>/<hex>/link
)

// RepoEntry is a path below RepositoriesDir split into its parts. The
// strings are slices of the path; Alg and Hex (and a referrer link's
// subject) are as found, not validated.
type RepoEntry struct {
	Kind     EntryKind
	Repo     string
	Tag      string
	Alg, Hex string
	// SubjectAlg and SubjectHex are a referrer link's subject.
	SubjectAlg, SubjectHex string
}

// ParseRepoPath splits a path from a listing of RepositoriesDir. A file
// that is not one of the link kinds, and a directory other than _uploads or
// _referrers, is EntryOther (with Repo set when it lies in a repository).
// A repository's own directory ends where its first segment starting with
// '_' begins: no repository name component may start with '_'.
func ParseRepoPath(p string) RepoEntry {
	rest, ok := strings.CutPrefix(p, RepositoriesDir+"/")
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
	const (
		layers    = LayersSubdir + "/"
		revisions = ManifestsSubdir + "/revisions/"
		tags      = ManifestsSubdir + "/tags/"
		referrers = ReferrersSubdir + "/"
	)
	switch {
	case rest == UploadsSubdir:
		e.Kind = EntryUploads
	case rest == ReferrersSubdir:
		e.Kind = EntryReferrers
	case strings.HasPrefix(rest, layers):
		if alg, hex, ok := digestLink(rest[len(layers):]); ok {
			e.Kind, e.Alg, e.Hex = EntryLayerLink, alg, hex
		}
	case strings.HasPrefix(rest, revisions):
		if alg, hex, ok := digestLink(rest[len(revisions):]); ok {
			e.Kind, e.Alg, e.Hex = EntryRevisionLink, alg, hex
		}
	case strings.HasPrefix(rest, referrers):
		// <subject alg>/<subject hex>/<alg>/<hex>/link
		rest = rest[len(referrers):]
		salg, rest, ok1 := strings.Cut(rest, "/")
		shex, rest, ok2 := strings.Cut(rest, "/")
		if alg, hex, ok := digestLink(rest); ok && ok1 && ok2 && salg != "" && shex != "" {
			e.Kind, e.SubjectAlg, e.SubjectHex, e.Alg, e.Hex = EntryReferrerLink, salg, shex, alg, hex
		}
	case strings.HasPrefix(rest, tags):
		rest = rest[len(tags):]
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
	if !ok || leaf != BlobDataLeaf {
		return "", "", false
	}
	return alg, hex, true
}

// ParseBlobPath splits blobs/<alg>/<xx>/<hex>/<leaf> where leaf is
// BlobDataLeaf or BlobRecipeLeaf; ok is false for any other path, and for
// a <xx> that is not the start of <hex>.
func ParseBlobPath(p string) (alg, hex, leaf string, ok bool) {
	rest, ok := strings.CutPrefix(p, BlobsDir+"/")
	if !ok {
		return "", "", "", false
	}
	i := strings.LastIndexByte(rest, '/')
	if i < 0 {
		return "", "", "", false
	}
	rest, leaf = rest[:i], rest[i+1:]
	if leaf != BlobDataLeaf && leaf != BlobRecipeLeaf {
		return "", "", "", false
	}
	alg, hex, ok = parseFanned(rest)
	return alg, hex, leaf, ok
}

// ParseFilePath splits cairn/files/<alg>/<xx>/<hex>.
func ParseFilePath(p string) (alg, hex string, ok bool) {
	rest, ok := strings.CutPrefix(p, FilesDir+"/")
	if !ok {
		return "", "", false
	}
	return parseFanned(rest)
}

// parseFanned splits <alg>/<hex[0:2]>/<hex>.
func parseFanned(s string) (alg, hex string, ok bool) {
	alg, rest, ok := strings.Cut(s, "/")
	if !ok || alg == "" {
		return "", "", false
	}
	pre, hex, ok := strings.Cut(rest, "/")
	if !ok || len(hex) < 2 || pre != hex[:2] || strings.IndexByte(hex, '/') >= 0 {
		return "", "", false
	}
	return alg, hex, true
}

// ParseJournalPath reads the repository, kind and digest parts of a record
// path; the digest parts are not validated.
func ParseJournalPath(p string) (repo string, manifest bool, alg, hex string, ok bool) {
	rest, ok := strings.CutPrefix(p, GCJournalDir+"/")
	if !ok {
		return "", false, "", "", false
	}
	i := strings.Index(rest, "/_")
	if i <= 0 {
		return "", false, "", "", false
	}
	repo, rest = rest[:i], rest[i+1:]
	switch {
	case strings.HasPrefix(rest, "_manifests/"):
		manifest, rest = true, rest[len("_manifests/"):]
	case strings.HasPrefix(rest, "_blobs/"):
		rest = rest[len("_blobs/"):]
	default:
		return "", false, "", "", false
	}
	parts := strings.Split(rest, "/")
	if len(parts) != 3 || parts[0] == "" || parts[1] == "" || parts[2] == "" {
		return "", false, "", "", false
	}
	return repo, manifest, parts[0], parts[1], true
}

// RepoPattern compiles a repository name pattern (access control,
// retention): "**" matches anything, "*" anything but "/", "?" one
// character but "/"; the rest is literal and must be what repository
// names hold (lower case, digits, ".", "_", "-", "/").
func RepoPattern(pattern string) (*regexp.Regexp, error) {
	if pattern == "" {
		return nil, errors.New("empty repository pattern")
	}
	var b strings.Builder
	b.WriteString("^")
	for i := 0; i < len(pattern); i++ {
		switch c := pattern[i]; {
		case c == '*' && i+1 < len(pattern) && pattern[i+1] == '*':
			b.WriteString(".*")
			i++
		case c == '*':
			b.WriteString("[^/]*")
		case c == '?':
			b.WriteString("[^/]")
		case 'a' <= c && c <= 'z', '0' <= c && c <= '9', c == '.', c == '_', c == '-', c == '/':
			b.WriteString(regexp.QuoteMeta(string(c)))
		default:
			return nil, fmt.Errorf("repository pattern %q: %q is not allowed (lower-case names, '/', '*', '**', '?')", pattern, c)
		}
	}
	b.WriteString("$")
	return regexp.Compile(b.String())
}
