package layout

import (
	"strings"
	"testing"

	"github.com/opencontainers/go-digest"
)

// FuzzParseRepoPath: whatever a listing holds, ParseRepoPath, ParseBlobPath
// and ParseFilePath either call it "other" or split it into parts from which
// the builders rebuild exactly that path. GC deletes the paths it
// rebuilds, so a split that does not round-trip would delete another file.
func FuzzParseRepoPath(f *testing.F) {
	d := digest.FromString("x")
	for _, s := range []string{
		LayerLink("a/b", d), RevisionLink("a", d), TagCurrentLink("a/b/c", "_x.y"),
		TagIndexLink("a", "v1", d), UploadsDir("a"), Repo("a") + "/_referrers",
		ReferrerLink("a", d, d), Repo("a") + "/_referrers/sha256/x/y/z/link", Repo("a") + "/_referrers//x/y/z/link",
		UploadHead("a", "u"), BlobData(d), BlobRecipe(d), File(d),
		Repo("a") + "/_layers/x/link", Repo("a") + "/_manifests/tags//current/link",
		Repo("a") + "/_manifests/revisions/sha256/" + d.Encoded() + "/signatures/x/link",
		Repo("") + "/_uploads", Repo("/a") + "/_uploads", Repo("_") + "/_uploads", BlobsDir + "/sha256/ab/ab/data",
		BlobsDir + "/sha256//" + "/data", BlobsDir + "/a/b/c/d/data", FilesDir + "/sha256/ab/abc",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, p string) {
		e := ParseRepoPath(p)
		var rebuilt string
		switch e.Kind {
		case EntryOther:
			if e.Tag != "" || e.Alg != "" || e.Hex != "" || e.SubjectAlg != "" || e.SubjectHex != "" {
				t.Fatalf("ParseRepoPath(%q) = %+v: parts of an entry it did not recognise", p, e)
			}
		case EntryLayerLink:
			rebuilt = string(AppendLayerLink(nil, e.Repo, e.Alg, e.Hex))
		case EntryRevisionLink:
			rebuilt = string(AppendRevisionLink(nil, e.Repo, e.Alg, e.Hex))
		case EntryTagCurrent:
			rebuilt = TagCurrentLink(e.Repo, e.Tag)
		case EntryTagIndex:
			rebuilt = string(AppendTagIndexLink(nil, e.Repo, e.Tag, e.Alg, e.Hex))
			if alt := TagIndexDir(e.Repo, e.Tag) + DigestLink(e.Alg, e.Hex); alt != rebuilt {
				t.Fatalf("TagIndexDir+DigestLink %q != AppendTagIndexLink %q", alt, rebuilt)
			}
		case EntryUploads:
			rebuilt = UploadsDir(e.Repo)
		case EntryReferrers:
			rebuilt = Repo(e.Repo) + "/" + ReferrersSubdir
		case EntryReferrerLink:
			rebuilt = string(AppendReferrerLink(nil, e.Repo, e.SubjectAlg, e.SubjectHex, e.Alg, e.Hex))
		default:
			t.Fatalf("ParseRepoPath(%q): unknown kind %d", p, e.Kind)
		}
		if e.Kind != EntryReferrerLink && (e.SubjectAlg != "" || e.SubjectHex != "") {
			t.Fatalf("ParseRepoPath(%q) = %+v: a subject outside a referrer link", p, e)
		}
		if r, sub, ok := SplitRepoDir(p); ok && (!strings.HasPrefix(sub, "_") || strings.Contains(sub, "/") || Repo(r)+"/"+sub != p && r != "") {
			t.Fatalf("SplitRepoDir(%q) = %q %q", p, r, sub)
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
			if leaf != BlobDataLeaf && leaf != BlobRecipeLeaf || len(hex) < 2 {
				t.Fatalf("ParseBlobPath(%q) = %q %q %q", p, alg, hex, leaf)
			}
			b := AppendBlobData(nil, alg, hex)
			rebuilt := strings.TrimSuffix(string(b), "/"+BlobDataLeaf) + "/" + leaf
			if rebuilt != p {
				t.Fatalf("ParseBlobPath(%q) = %q %q %q, which rebuilds as %q", p, alg, hex, leaf, rebuilt)
			}
		}
		da, dh, dok := ParseBlobDataPath(p)
		if dok != (ok && leaf == BlobDataLeaf) || dok && (da != alg || dh != hex) {
			t.Fatalf("ParseBlobDataPath(%q) = %q %q %v, ParseBlobPath = %q %q %q %v", p, da, dh, dok, alg, hex, leaf, ok)
		}
		if fa, fh, ok := ParseFilePath(p); ok && string(AppendFile(nil, fa, fh)) != p {
			t.Fatalf("ParseFilePath(%q) = %q %q, which rebuilds as %q", p, fa, fh, AppendFile(nil, fa, fh))
		}
	})
}
