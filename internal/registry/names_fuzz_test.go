package registry

import (
	"errors"
	"strings"
	"testing"

	"github.com/opencontainers/go-digest"

	"github.com/cairn-registry/cairn/internal/layout"
	"github.com/cairn-registry/cairn/internal/storage/driver"
)

// Fuzz targets for the names and references the registry parses from URLs.
// Each checks the parse against an independent statement of the grammar and
// against the layout the accepted strings are put into, not only that
// nothing panics.

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
func checkLayoutPath(t *testing.T, p string, want layout.RepoEntry) {
	t.Helper()
	if !driver.ValidPath(p) {
		t.Fatalf("layout path %q is not a valid storage path", p)
	}
	if got := layout.ParseRepoPath(p); got != want {
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
		checkLayoutPath(t, layout.LayerLink(name, d), layout.RepoEntry{Kind: layout.EntryLayerLink, Repo: name, Alg: alg, Hex: hex})
		checkLayoutPath(t, layout.RevisionLink(name, d), layout.RepoEntry{Kind: layout.EntryRevisionLink, Repo: name, Alg: alg, Hex: hex})
		checkLayoutPath(t, layout.TagCurrentLink(name, "latest"), layout.RepoEntry{Kind: layout.EntryTagCurrent, Repo: name, Tag: "latest"})
		checkLayoutPath(t, layout.TagIndexLink(name, "latest", d), layout.RepoEntry{Kind: layout.EntryTagIndex, Repo: name, Tag: "latest", Alg: alg, Hex: hex})
		checkLayoutPath(t, layout.UploadsDir(name), layout.RepoEntry{Kind: layout.EntryUploads, Repo: name})
		checkLayoutPath(t, layout.Repo(name)+"/"+layout.ReferrersSubdir, layout.RepoEntry{Kind: layout.EntryReferrers, Repo: name})
		checkLayoutPath(t, layout.ReferrerLink(name, d, d), layout.RepoEntry{Kind: layout.EntryReferrerLink, Repo: name, Alg: alg, Hex: hex, SubjectAlg: alg, SubjectHex: hex})
		if !driver.ValidPath(layout.UploadChunk(name, "u", "c")) || !driver.ValidPath(layout.UploadHead(name, "u")) {
			t.Fatalf("upload paths of %q are not valid storage paths", name)
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
			checkLayoutPath(t, layout.TagCurrentLink(repo, tag), layout.RepoEntry{Kind: layout.EntryTagCurrent, Repo: repo, Tag: tag})
		default:
			if string(d) != ref || d.Validate() != nil || !d.Algorithm().Available() {
				t.Fatalf("ParseReference(%q) accepted digest %q", ref, d)
			}
			if pd, perr := ParseDigest(ref); perr != nil || pd != d {
				t.Fatalf("ParseDigest(%q) = %q, %v; ParseReference gave %q", ref, pd, perr, d)
			}
			alg, hex := string(d.Algorithm()), d.Encoded()
			checkLayoutPath(t, layout.RevisionLink(repo, d), layout.RepoEntry{Kind: layout.EntryRevisionLink, Repo: repo, Alg: alg, Hex: hex})
			checkLayoutPath(t, layout.TagIndexLink(repo, "t", d), layout.RepoEntry{Kind: layout.EntryTagIndex, Repo: repo, Tag: "t", Alg: alg, Hex: hex})
			for _, p := range []string{layout.BlobData(d), layout.BlobRecipe(d)} {
				if !driver.ValidPath(p) {
					t.Fatalf("blob path %q is not a valid storage path", p)
				}
				ga, gh, leaf, ok := layout.ParseBlobPath(p)
				if !ok || ga != alg || gh != hex || p != layout.BlobsDir+"/"+alg+"/"+hex[:2]+"/"+hex+"/"+leaf {
					t.Fatalf("ParseBlobPath(%q) = %q %q %q %v", p, ga, gh, leaf, ok)
				}
			}
		}
	})
}
