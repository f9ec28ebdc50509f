package registry

import (
	"errors"
	"strings"
	"testing"

	"github.com/opencontainers/go-digest"

	"github.com/cairn-registry/cairn/internal/storage/driver"
)

// Fuzz targets for the names, references and storage paths the registry
// parses. Each checks the parse against an inverse (the path builder) or an
// independent statement of the grammar, not only that nothing panics: these
// strings come from URLs and from listings of storage other tools may have
// written.

// nameOracle states the distribution-spec repository name grammar without a
// regexp: components of [a-z0-9]+ joined by ".", "_", "__" or "-"+, separated
// by "/", at most 255 bytes in all.
func nameOracle(name string) bool {
	if name == "" || len(name) > maxNameLength {
		return false
	}
	for _, c := range strings.Split(name, "/") {
		if !componentOracle(c) {
			return false
		}
	}
	return true
}

func componentOracle(c string) bool {
	alnum := func(b byte) bool { return b >= 'a' && b <= 'z' || b >= '0' && b <= '9' }
	i := 0
	for {
		j := i
		for j < len(c) && alnum(c[j]) {
			j++
		}
		if j == i {
			return false // empty component, or a separator not between alphanumerics
		}
		if j == len(c) {
			return true
		}
		k := j
		switch c[k] {
		case '.':
			k++
		case '_':
			k++
			if k < len(c) && c[k] == '_' {
				k++
			}
		case '-':
			for k < len(c) && c[k] == '-' {
				k++
			}
		default:
			return false
		}
		i = k
	}
}

// checkLayoutPath fails unless p is a path every driver accepts and
// ParseRepoPath splits it back into want.
func checkLayoutPath(t *testing.T, p string, want RepoEntry) {
	t.Helper()
	if !driver.ValidPath(p) {
		t.Fatalf("layout path %q is not a valid storage path", p)
	}
	if got := ParseRepoPath(p); got != want {
		t.Fatalf("ParseRepoPath(%q) = %+v, want %+v", p, got, want)
	}
}

// FuzzValidateName: ValidateName agrees with the grammar, and every path the
// layout builds for an accepted name is a valid storage path that parses
// back to that name (GC finds repositories by parsing listed paths).
func FuzzValidateName(f *testing.F) {
	for _, s := range []string{
		"a", "library/alpine", "a-b/c_d/e__f/g.h", "a--b", "0/1/2", "ghcr.io/owner/img",
		"", "A", "a/", "/a", "a//b", "a/../b", "..", "a/.", "a.", "-a", "a_", "a___b",
		"a/B", "a b", "a%2fb", "a/_layers", "a/_uploads/b", "a:b", "a@b", "a\x00b", "é",
		strings.Repeat("a", maxNameLength), strings.Repeat("a", maxNameLength+1),
		strings.Repeat("ab/", 84) + "abc",
	} {
		f.Add(s)
	}
	d := digest.FromString("fuzz")
	alg, hex := string(d.Algorithm()), d.Encoded()
	f.Fuzz(func(t *testing.T, name string) {
		err := ValidateName(name)
		if want := nameOracle(name); (err == nil) != want {
			t.Fatalf("ValidateName(%q) = %v, grammar says valid=%v", name, err, want)
		}
		if err != nil {
			if !errors.Is(err, ErrNameInvalid) {
				t.Fatalf("ValidateName(%q) = %v, want ErrNameInvalid", name, err)
			}
			return
		}
		checkLayoutPath(t, layerLinkPath(name, d), RepoEntry{Kind: EntryLayerLink, Repo: name, Alg: alg, Hex: hex})
		checkLayoutPath(t, revisionLinkPath(name, d), RepoEntry{Kind: EntryRevisionLink, Repo: name, Alg: alg, Hex: hex})
		checkLayoutPath(t, tagCurrentLinkPath(name, "latest"), RepoEntry{Kind: EntryTagCurrent, Repo: name, Tag: "latest"})
		checkLayoutPath(t, tagIndexLinkPath(name, "latest", d), RepoEntry{Kind: EntryTagIndex, Repo: name, Tag: "latest", Alg: alg, Hex: hex})
		checkLayoutPath(t, uploadsPath(name), RepoEntry{Kind: EntryUploads, Repo: name})
		checkLayoutPath(t, repoPath(name)+"/_referrers", RepoEntry{Kind: EntryReferrers, Repo: name})
		checkLayoutPath(t, referrerLinkPath(name, d, d), RepoEntry{Repo: name})
		if !driver.ValidPath(uploadDataPath(name, "u")) {
			t.Fatalf("upload path of %q is not a valid storage path", name)
		}
	})
}

// FuzzParseReference: a reference is a tag or a digest, never both; what is
// accepted is returned unchanged and every path built from it is valid and
// parses back; what is refused is refused with the error the server maps to
// TAG_INVALID or DIGEST_INVALID.
func FuzzParseReference(f *testing.F) {
	for _, s := range []string{
		"latest", "v1.0_rc-1", "_x", "a.b-c", strings.Repeat("t", 128), strings.Repeat("t", 129),
		string(digest.FromString("x")), string(digest.SHA384.FromString("x")), string(digest.SHA512.FromString("x")),
		"sha256:abc", "sha256:" + strings.Repeat("A", 64), "md5:d41d8cd98f00b204e9800998ecf8427e",
		"sha256+b64:" + strings.Repeat("a", 64), "SHA256:" + strings.Repeat("a", 64), ":", "", ".tag", "-tag",
		"a/b", "a:b", "latest\n", "sha256:" + strings.Repeat("a", 64) + "\n",
	} {
		f.Add(s)
	}
	const repo = "fuzz/repo"
	f.Fuzz(func(t *testing.T, ref string) {
		tag, d, err := ParseReference(ref)
		if err != nil {
			if !errors.Is(err, ErrTagInvalid) && !errors.Is(err, ErrDigestInvalid) {
				t.Fatalf("ParseReference(%q) = %v, want ErrTagInvalid or ErrDigestInvalid", ref, err)
			}
			if tag != "" || d != "" {
				t.Fatalf("ParseReference(%q) failed yet returned %q %q", ref, tag, d)
			}
			if ValidTag(ref) {
				t.Fatalf("ParseReference(%q) refused a valid tag", ref)
			}
			return
		}
		switch {
		case tag != "" && d != "", tag == "" && d == "":
			t.Fatalf("ParseReference(%q) = tag %q digest %q: want exactly one", ref, tag, d)
		case tag != "":
			if tag != ref || !ValidTag(tag) || strings.ContainsAny(tag, ":/") {
				t.Fatalf("ParseReference(%q) accepted tag %q", ref, tag)
			}
			checkLayoutPath(t, tagCurrentLinkPath(repo, tag), RepoEntry{Kind: EntryTagCurrent, Repo: repo, Tag: tag})
		default:
			if string(d) != ref || d.Validate() != nil || !d.Algorithm().Available() {
				t.Fatalf("ParseReference(%q) accepted digest %q", ref, d)
			}
			if pd, perr := ParseDigest(ref); perr != nil || pd != d {
				t.Fatalf("ParseDigest(%q) = %q, %v; ParseReference gave %q", ref, pd, perr, d)
			}
			alg, hex := string(d.Algorithm()), d.Encoded()
			checkLayoutPath(t, revisionLinkPath(repo, d), RepoEntry{Kind: EntryRevisionLink, Repo: repo, Alg: alg, Hex: hex})
			checkLayoutPath(t, tagIndexLinkPath(repo, "t", d), RepoEntry{Kind: EntryTagIndex, Repo: repo, Tag: "t", Alg: alg, Hex: hex})
			for _, p := range []string{blobDataPath(d), blobRecipePath(d)} {
				if !driver.ValidPath(p) {
					t.Fatalf("blob path %q is not a valid storage path", p)
				}
				ga, gh, leaf, ok := ParseBlobPath(p)
				if !ok || ga != alg || gh != hex || p != rootPath+"/blobs/"+alg+"/"+hex[:2]+"/"+hex+"/"+leaf {
					t.Fatalf("ParseBlobPath(%q) = %q %q %q %v", p, ga, gh, leaf, ok)
				}
			}
		}
	})
}

// FuzzParseRepoPath: whatever a listing holds, ParseRepoPath and
// ParseBlobPath either call it "other" or split it into parts from which the
// layout's builders rebuild exactly that path. GC deletes the paths it
// rebuilds, so a split that does not round-trip would delete another file.
func FuzzParseRepoPath(f *testing.F) {
	d := digest.FromString("x")
	for _, s := range []string{
		layerLinkPath("a/b", d), revisionLinkPath("a", d), tagCurrentLinkPath("a/b/c", "_x.y"),
		tagIndexLinkPath("a", "v1", d), uploadsPath("a"), repoPath("a") + "/_referrers",
		referrerLinkPath("a", d, d), uploadDataPath("a", "u"), blobDataPath(d), blobRecipePath(d),
		repoPath("a") + "/_layers/x/link", repoPath("a") + "/_manifests/tags//current/link",
		repoPath("a") + "/_manifests/revisions/sha256/" + d.Encoded() + "/signatures/x/link",
		repoPath("") + "/_uploads", repoPath("/a") + "/_uploads", rootPath + "/blobs/sha256/ab/ab/data",
		rootPath + "/blobs/sha256//" + "/data", rootPath + "/blobs/a/b/c/d/data",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, p string) {
		e := ParseRepoPath(p)
		var rebuilt string
		switch e.Kind {
		case EntryOther:
			if e.Tag != "" || e.Alg != "" || e.Hex != "" {
				t.Fatalf("ParseRepoPath(%q) = %+v: parts of an entry it did not recognise", p, e)
			}
		case EntryLayerLink:
			rebuilt = string(AppendLayerLinkPath(nil, e.Repo, e.Alg, e.Hex))
		case EntryRevisionLink:
			rebuilt = string(AppendRevisionLinkPath(nil, e.Repo, e.Alg, e.Hex))
		case EntryTagCurrent:
			rebuilt = TagCurrentLinkPath(e.Repo, e.Tag)
		case EntryTagIndex:
			rebuilt = string(AppendTagIndexLinkPath(nil, e.Repo, e.Tag, e.Alg, e.Hex))
			if alt := TagIndexDir(e.Repo, e.Tag) + DigestLink(e.Alg, e.Hex); alt != rebuilt {
				t.Fatalf("TagIndexDir+DigestLink %q != AppendTagIndexLinkPath %q", alt, rebuilt)
			}
		case EntryUploads:
			rebuilt = uploadsPath(e.Repo)
		case EntryReferrers:
			rebuilt = repoPath(e.Repo) + "/_referrers"
		default:
			t.Fatalf("ParseRepoPath(%q): unknown kind %d", p, e.Kind)
		}
		if e.Kind != EntryOther {
			if e.Repo == "" || strings.Contains(e.Repo, "/_") || strings.HasPrefix(e.Repo, "_") {
				t.Fatalf("ParseRepoPath(%q) = %+v: repository part %q", p, e, e.Repo)
			}
			if rebuilt != p {
				t.Fatalf("ParseRepoPath(%q) = %+v, which rebuilds as %q", p, e, rebuilt)
			}
		}

		alg, hex, leaf, ok := ParseBlobPath(p)
		if ok {
			if leaf != BlobData && leaf != BlobRecipe || len(hex) < 2 {
				t.Fatalf("ParseBlobPath(%q) = %q %q %q", p, alg, hex, leaf)
			}
			b := AppendBlobDataPath(nil, alg, hex)
			rebuilt := strings.TrimSuffix(string(b), "/"+BlobData) + "/" + leaf
			if rebuilt != p {
				t.Fatalf("ParseBlobPath(%q) = %q %q %q, which rebuilds as %q", p, alg, hex, leaf, rebuilt)
			}
		}
		da, dh, dok := ParseBlobDataPath(p)
		if dok != (ok && leaf == BlobData) || dok && (da != alg || dh != hex) {
			t.Fatalf("ParseBlobDataPath(%q) = %q %q %v, ParseBlobPath = %q %q %q %v", p, da, dh, dok, alg, hex, leaf, ok)
		}
	})
}
