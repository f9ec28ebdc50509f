package scrub

import (
	"testing"

	"github.com/opencontainers/go-digest"

	"github.com/cairn-registry/cairn/internal/layout"
	"github.com/cairn-registry/cairn/internal/storage/driver"
)

func TestMissingRecipe(t *testing.T) {
	t.Parallel()
	forStores(t, func(t *testing.T, d driver.Driver, s *store) {
		// A deduplicated layer whose recipe is gone: its link names nothing.
		s.remove(layout.BlobRecipe(s.lOwn))
		p := layerLink("app/full", s.lOwn)
		f := wantOne(t, s.scrub(d, Options{Repair: true}), "missing-blob "+p)
		if f.Digest != string(s.lOwn) || f.Repaired {
			t.Errorf("%+v", f)
		}
		wantDetail(t, f, "neither data nor a recipe")
	})
}

func TestMissingManifest(t *testing.T) {
	t.Parallel()
	forStores(t, func(t *testing.T, d driver.Driver, s *store) {
		s.remove(layout.BlobData(s.mIndex))
		p := revisionLink("app/index", s.mIndex)
		f := wantOne(t, s.scrub(d, Options{Repair: true}), "missing-manifest "+p)
		if f.Digest != string(s.mIndex) || f.Repaired {
			t.Errorf("%+v", f)
		}
	})
}

func TestDanglingTagRelinked(t *testing.T) {
	t.Parallel()
	forStores(t, func(t *testing.T, d driver.Driver, s *store) {
		s.remove(revisionLink("app/full", s.mFull))
		// Its layers' links too: the relinked revision's manifest is read
		// in the same run and they come back as well.
		s.remove(layerLink("app/full", s.cFull))
		tag := layout.TagCurrentLink("app/full", "v1")
		fs := want(t, s.scrub(d, Options{}), "dangling-tag "+tag)
		if f := fs["dangling-tag "+tag]; f.Digest != string(s.mFull) {
			t.Errorf("%+v", f)
		}
		fs = want(t, s.scrub(d, Options{Repair: true}), "dangling-tag "+tag, "missing-link "+layerLink("app/full", s.cFull))
		for _, f := range fs {
			if !f.Repaired {
				t.Errorf("not repaired: %+v", f)
			}
		}
		if string(s.get(revisionLink("app/full", s.mFull))) != string(s.mFull) {
			t.Error("revision link not rewritten")
		}
		want(t, s.scrub(d, Options{ReadLinks: true}))
	})
}

func TestDanglingTagWithoutData(t *testing.T) {
	t.Parallel()
	forStores(t, func(t *testing.T, d driver.Driver, s *store) {
		s.remove(revisionLink("app/full", s.mFull))
		s.remove(layout.BlobData(s.mFull))
		tag := layout.TagCurrentLink("app/full", "v1")
		f := wantOne(t, s.scrub(d, Options{Repair: true}), "dangling-tag "+tag)
		if f.Repaired {
			t.Errorf("repaired without data: %+v", f)
		}
		wantDetail(t, f, "data is not stored either", "data is not stored")
	})
}

func TestMissingLayerLinkRelinked(t *testing.T) {
	t.Parallel()
	forStores(t, func(t *testing.T, d driver.Driver, s *store) {
		s.remove(layerLink("app/index", s.lIndex))
		s.remove(layerLink("app/full", s.lOwn)) // deduplicated: only a recipe
		pIndex, pOwn := layerLink("app/index", s.lIndex), layerLink("app/full", s.lOwn)
		fs := want(t, s.scrub(d, Options{}), "missing-link "+pIndex, "missing-link "+pOwn)
		if f := fs["missing-link "+pIndex]; f.Digest != string(s.lIndex) || f.Ref != string(s.mIndex) {
			t.Errorf("%+v: want digest %s, ref %s", f, s.lIndex, s.mIndex)
		}
		for _, f := range want(t, s.scrub(d, Options{Repair: true}), "missing-link "+pIndex, "missing-link "+pOwn) {
			if !f.Repaired {
				t.Errorf("not repaired: %+v", f)
			}
		}
		want(t, s.scrub(d, Options{}))
	})
}

func TestMissingBlobOfManifest(t *testing.T) {
	t.Parallel()
	forStores(t, func(t *testing.T, d driver.Driver, s *store) {
		s.remove(layerLink("app/plain", s.lPlain))
		s.remove(layout.BlobData(s.lPlain))
		p := layout.BlobData(s.lPlain)
		// Three manifests name it: one finding.
		f := wantOne(t, s.scrub(d, Options{Repair: true}), "missing-blob "+p)
		if f.Repaired || f.Digest != string(s.lPlain) {
			t.Errorf("%+v", f)
		}
	})
}

func TestSparseSkipsReferences(t *testing.T) {
	t.Parallel()
	forStores(t, func(t *testing.T, d driver.Driver, s *store) {
		s.remove(layerLink("app/plain", s.lPlain))
		s.remove(layout.BlobData(s.lPlain))
		s.remove(revisionLink("app/plain", s.mChild))
		want(t, s.scrub(d, Options{Sparse: true}))
	})
}

func TestIndexChildRelinked(t *testing.T) {
	t.Parallel()
	forStores(t, func(t *testing.T, d driver.Driver, s *store) {
		p := revisionLink("app/plain", s.mChild)
		s.remove(p)
		want(t, s.scrub(d, Options{IndexChildrenOptional: true}))
		f := wantOne(t, s.scrub(d, Options{}), "missing-link "+p)
		if f.Digest != string(s.mChild) || f.Ref != string(s.mIdx) {
			t.Errorf("%+v", f)
		}
		f = wantOne(t, s.scrub(d, Options{Repair: true}), "missing-link "+p)
		if !f.Repaired {
			t.Errorf("%+v", f)
		}
		want(t, s.scrub(d, Options{}))

		s.remove(p)
		s.remove(layout.BlobData(s.mChild))
		dp := layout.BlobData(s.mChild)
		f = wantOne(t, s.scrub(d, Options{Repair: true}), "missing-manifest "+dp)
		if f.Repaired || f.Ref != string(s.mIdx) {
			t.Errorf("%+v", f)
		}
	})
}

func TestReferrerLinks(t *testing.T) {
	t.Parallel()
	forStores(t, func(t *testing.T, d driver.Driver, s *store) {
		p := referrerLinkPath("app/plain", s.mPlain, s.mRef)
		s.remove(p)
		f := wantOne(t, s.scrub(d, Options{Repair: true}), "missing-link "+p)
		if !f.Repaired || f.Digest != string(s.mRef) || f.Ref != string(s.mPlain) {
			t.Errorf("%+v", f)
		}
		want(t, s.scrub(d, Options{}))

		// A referrers link naming no revision: reported, never removed.
		ghost := digest.FromString("a manifest deleted long ago")
		g := referrerLinkPath("app/plain", s.mPlain, ghost)
		s.put(g, []byte(ghost))
		f = wantOne(t, s.scrub(d, Options{Repair: true}), "dangling-referrer "+g)
		if f.Repaired || f.Digest != string(ghost) || f.Ref != string(s.mPlain) {
			t.Errorf("%+v", f)
		}
		if !s.exists(g) {
			t.Error("repair deleted the dangling referrers link")
		}
	})
}

func TestBadLinks(t *testing.T) {
	t.Parallel()
	forStores(t, func(t *testing.T, d driver.Driver, s *store) {
		tag := layout.TagCurrentLink("app/index", "v1")
		s.put(tag, []byte("not a digest"))
		ll := layerLink("app/full", s.lOwn)
		s.put(ll, []byte(s.lShared))
		tl := layout.TagIndexDir("app/plain", "v1") + layout.DigestLink("sha256", s.mPlain.Encoded())
		s.put(tl, []byte("garbage"))
		bad := layout.RepositoriesDir + "/app/plain/_layers/sha256/NOTHEX/link"
		s.put(bad, []byte("x"))

		// Without ReadLinks only the tag's link (always read) is checked.
		fs := want(t, s.scrub(d, Options{}), "bad-link "+tag, "bad-path "+bad)
		wantDetail(t, fs["bad-link "+tag], `"not a digest"`)

		fs = want(t, s.scrub(d, Options{ReadLinks: true, Repair: true}), "bad-link "+tag, "bad-path "+bad, "bad-link "+ll, "bad-link "+tl)
		if fs["bad-link "+tag].Repaired || !fs["bad-link "+ll].Repaired || !fs["bad-link "+tl].Repaired {
			t.Errorf("repairs: %+v", fs)
		}
		want(t, s.scrub(d, Options{ReadLinks: true}), "bad-link "+tag, "bad-path "+bad)
	})
}

func TestBadManifest(t *testing.T) {
	t.Parallel()
	forStores(t, func(t *testing.T, d driver.Driver, s *store) {
		junk := []byte("this is no manifest")
		m := digest.FromBytes(junk)
		s.put(layout.BlobData(m), junk)
		s.put(revisionLink("app/plain", m), []byte(m))
		p := layout.BlobData(m)
		f := wantOne(t, s.scrub(d, Options{}), "bad-manifest "+p)
		wantDetail(t, f, "not JSON")
	})
}

// A blob stored after the listing (a push racing the scrub) is not missing.
func TestListingRaceConfirmed(t *testing.T) {
	t.Parallel()
	forStores(t, func(t *testing.T, d driver.Driver, s *store) {
		fd := newFaultDriver(d)
		fd.hide[layout.BlobData(s.lPlain)] = true
		fd.hide[layout.BlobData(s.mChild)] = true
		fd.hide[layout.Pack(s.loc(s.own[0]).Pack)] = true // its files look missing
		rep := s.scrub(fd, Options{})
		want(t, rep)
		if rep.Counts.Manifests != 6 {
			t.Errorf("%d manifests read, want 6 (one listed without data, found stored since)", rep.Counts.Manifests)
		}
		// A revision and a layer link pushed after their repository was
		// listed: the tag and the manifest naming them find them stored.
		fd.hide[revisionLink("app/full", s.mFull)] = true
		fd.hide[layerLink("app/index", s.lIndex)] = true
		want(t, s.scrub(fd, Options{}))
	})
}

// Repair deletes nothing but its own temporary files and journal records.
func TestRepairNeverDeletes(t *testing.T) {
	t.Parallel()
	forStores(t, func(t *testing.T, d driver.Driver, s *store) {
		s.flipFile(s.shared[0])
		s.loseFile(s.shared[1])
		s.remove(revisionLink("app/full", s.mFull))
		s.remove(layerLink("app/index", s.cIndex))
		s.remove(referrerLinkPath("app/plain", s.mPlain, s.mRef))
		s.put(layerLink("app/full", s.lOwn), []byte("wrong"))
		fd := newFaultDriver(d)
		rep := s.scrub(fd, Options{Repair: true, ReadLinks: true})
		if rep.Remaining() != 0 || rep.Repaired != 6 {
			t.Errorf("repaired %d, remaining %d; want 6, 0: %+v", rep.Repaired, rep.Remaining(), rep.Findings)
		}
		for _, p := range fd.deleted {
			if !hasPrefix(p, layout.GCJournalDir+"/") && !hasPrefix(p, layout.TmpDir+"/") {
				t.Errorf("repair deleted %s", p)
			}
		}
		want(t, s.scrub(d, Options{ReadLinks: true}))
	})
}

func hasPrefix(s, p string) bool { return len(s) >= len(p) && s[:len(p)] == p }

func TestMaxFindings(t *testing.T) {
	t.Parallel()
	s := newStore(t, newMemDriver())
	s.flip(layout.BlobData(s.cFull))
	s.flip(layout.BlobData(s.cIndex))
	s.flip(layout.BlobData(s.lPlain))
	rep := s.scrub(s.d, Options{MaxFindings: 2})
	if len(rep.Findings) != 2 || rep.Dropped != 1 || rep.ByKind[KindCorruptBlob] != 3 || rep.Remaining() != 3 {
		t.Errorf("report %+v: want 2 findings kept, 1 dropped, 3 counted", rep)
	}
}
