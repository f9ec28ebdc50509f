package layout

import (
	"testing"

	"github.com/opencontainers/go-digest"
)

func TestLayoutAppendMatchesPaths(t *testing.T) {
	d := digest.FromString("x")
	alg, hex := string(d.Algorithm()), d.Encoded()
	for _, c := range []struct{ got, want string }{
		{string(AppendBlobData(nil, alg, hex)), BlobData(d)},
		{string(AppendRevisionLink(nil, "a/b", alg, hex)), RevisionLink("a/b", d)},
		{string(AppendLayerLink(nil, "a/b", alg, hex)), LayerLink("a/b", d)},
		{string(AppendTagIndexLink(nil, "a/b", "v1", alg, hex)), TagIndexLink("a/b", "v1", d)},
		{TagIndexDir("a/b", "v1") + DigestLink(alg, hex), TagIndexLink("a/b", "v1", d)},
		{string(AppendReferrerLink(nil, "a/b", alg, hex, alg, hex)), ReferrerLink("a/b", d, d)},
	} {
		if c.got != c.want {
			t.Errorf("got %s, want %s", c.got, c.want)
		}
	}
}

func TestParseRepoPath(t *testing.T) {
	d := digest.FromString("x")
	hex := d.Encoded()
	for p, want := range map[string]RepoEntry{
		LayerLink("a/b", d):                 {Kind: EntryLayerLink, Repo: "a/b", Alg: "sha256", Hex: hex},
		RevisionLink("a", d):                {Kind: EntryRevisionLink, Repo: "a", Alg: "sha256", Hex: hex},
		TagCurrentLink("a/b/c", "_x.y"):     {Kind: EntryTagCurrent, Repo: "a/b/c", Tag: "_x.y"},
		TagIndexLink("a", "v1", d):          {Kind: EntryTagIndex, Repo: "a", Tag: "v1", Alg: "sha256", Hex: hex},
		UploadsDir("a"):                     {Kind: EntryUploads, Repo: "a"},
		Root + "/repositories/a/_referrers": {Kind: EntryReferrers, Repo: "a"},
		ReferrerLink("a/b", digest.FromString("s"), d): {Kind: EntryReferrerLink, Repo: "a/b",
			SubjectAlg: "sha256", SubjectHex: digest.FromString("s").Encoded(), Alg: "sha256", Hex: hex},
		Root + "/repositories/a/_referrers/sha256/x/link":                                  {Repo: "a"},
		Root + "/repositories/a/_referrers/sha256/x/y/z/w/link":                            {Repo: "a"},
		Root + "/repositories/a/_layers":                                                   {Repo: "a"},
		Root + "/repositories/a/_layers/x/link":                                            {Repo: "a"},
		Root + "/repositories/a/_manifests/revisions/sha256/" + hex + "/signatures/x/link": {Repo: "a"},
		Root + "/repositories/a":                                                           {},
		Root + "/blobs/sha256":                                                             {},
	} {
		if got := ParseRepoPath(p); got != want {
			t.Errorf("%s: got %+v, want %+v", p, got, want)
		}
	}
}

func TestSplitRepoDir(t *testing.T) {
	for _, c := range []struct {
		p, repo, subdir string
		ok              bool
	}{
		{ManifestsDir("a/b"), "a/b", ManifestsSubdir, true},
		{UploadsDir("a"), "a", UploadsSubdir, true},
		{RepositoriesDir + "/_x", "", "_x", true},
		{Repo("a/b"), "", "", false},
		{RepositoriesDir, "", "", false},
		{BlobsDir + "/_x", "", "", false},
	} {
		repo, subdir, ok := SplitRepoDir(c.p)
		if repo != c.repo || subdir != c.subdir || ok != c.ok {
			t.Errorf("SplitRepoDir(%q) = %q %q %v, want %q %q %v", c.p, repo, subdir, ok, c.repo, c.subdir, c.ok)
		}
	}
}

func TestParseBlobDataPath(t *testing.T) {
	d := digest.FromString("x")
	if alg, hex, ok := ParseBlobDataPath(BlobData(d)); !ok || alg != "sha256" || hex != d.Encoded() {
		t.Errorf("got %s %s %v", alg, hex, ok)
	}
	for _, p := range []string{
		Root + "/blobs/sha256/zz/" + d.Encoded() + "/data",
		Root + "/blobs/sha256/" + d.Encoded() + "/data",
		Root + "/blobs/sha256/ab/ab/x/data",
		BlobData(d) + "x",
	} {
		if _, _, ok := ParseBlobDataPath(p); ok {
			t.Errorf("%s parsed", p)
		}
	}
}

func TestJournalPaths(t *testing.T) {
	d := digest.FromString("x")
	repo, manifest, alg, hex, ok := ParseJournalPath(JournalRecord("a/b", true, d, "n1"))
	if !ok || repo != "a/b" || !manifest || alg != "sha256" || hex != d.Encoded() {
		t.Errorf("got %s %v %s %s %v", repo, manifest, alg, hex, ok)
	}
	if _, manifest, _, _, ok := ParseJournalPath(JournalRecord("a/b", false, d, "n1")); !ok || manifest {
		t.Error("blob record")
	}
	for _, p := range []string{GCJournalDir + "/a", GCJournalDir + "/a/_x/sha256/h/n", GCJournalDir + "/a/_blobs/sha256/h"} {
		if _, _, _, _, ok := ParseJournalPath(p); ok {
			t.Errorf("%s parsed", p)
		}
	}
}

func TestPaths(t *testing.T) {
	d := digest.Digest("sha256:abcdef0000000000000000000000000000000000000000000000000000000000")
	cases := map[string]string{
		BlobData(d):                "/docker/registry/v2/blobs/sha256/ab/abcdef0000000000000000000000000000000000000000000000000000000000/data",
		LayerLink("a/b", d):        "/docker/registry/v2/repositories/a/b/_layers/sha256/abcdef0000000000000000000000000000000000000000000000000000000000/link",
		RevisionLink("a", d):       "/docker/registry/v2/repositories/a/_manifests/revisions/sha256/abcdef0000000000000000000000000000000000000000000000000000000000/link",
		TagCurrentLink("a", "v1"):  "/docker/registry/v2/repositories/a/_manifests/tags/v1/current/link",
		TagIndexLink("a", "v1", d): "/docker/registry/v2/repositories/a/_manifests/tags/v1/index/sha256/abcdef0000000000000000000000000000000000000000000000000000000000/link",
		UploadStartedAt("a", "u"):  "/docker/registry/v2/repositories/a/_uploads/u/startedat",
		UploadHead("a", "u"):       "/docker/registry/v2/repositories/a/_uploads/u/head",
		UploadChunk("a", "u", "c"): "/docker/registry/v2/repositories/a/_uploads/u/chunks/c",
	}
	for got, want := range cases {
		if got != want {
			t.Errorf("got %s\nwant %s", got, want)
		}
	}
}
