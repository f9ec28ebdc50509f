package scrub

import (
	"bytes"
	"context"
	"encoding/binary"
	"path/filepath"
	"strings"
	"testing"

	"github.com/opencontainers/go-digest"

	"github.com/cairn-registry/cairn/internal/dedup"
	"github.com/cairn-registry/cairn/internal/dedup/pack"
	"github.com/cairn-registry/cairn/internal/layout"
	"github.com/cairn-registry/cairn/internal/meta"
	"github.com/cairn-registry/cairn/internal/meta/bolt"
	"github.com/cairn-registry/cairn/internal/storage/driver"
)

// indexPack returns the pack lIndex's own files were written to, and the
// keys of the frames files are located at in it: all of them files of
// lIndex, whose intact data can restore them.
func (s *store) indexPack() (string, []string) {
	s.t.Helper()
	ctx := context.Background()
	id := s.loc(s.indexOwn[0]).Pack
	fi, err := s.d.Stat(ctx, layout.Pack(id))
	if err != nil {
		s.t.Fatal(err)
	}
	entries, _, err := pack.ObjectIndex(ctx, s.d, id, fi.Size)
	if err != nil {
		s.t.Fatal(err)
	}
	var keys []string
	for _, e := range entries {
		loc := meta.Location{Pack: id, Offset: e.Offset, Length: e.Length}
		if s.loc(e.Digest) == loc {
			keys = append(keys, frameKey(loc))
		}
	}
	if len(keys) < len(s.indexOwn) {
		s.t.Fatalf("pack %s locates %d files, want at least lIndex's own %d", id, len(keys), len(s.indexOwn))
	}
	return id, keys
}

func prefixed(kind string, keys []string) []string {
	out := make([]string, len(keys))
	for i, k := range keys {
		out[i] = kind + " " + k
	}
	return out
}

// A pack object gone while the metadata store still locates files in it:
// each such file is missing, and restored from intact data into a new pack.
func TestPackGone(t *testing.T) {
	t.Parallel()
	forStores(t, func(t *testing.T, d driver.Driver, s *store) {
		id, frames := s.indexPack()
		s.remove(layout.Pack(id))
		rep := s.scrub(d, Options{})
		for _, f := range want(t, rep, prefixed("missing-file", frames)...) {
			wantDetail(t, f, "located in pack "+id, "which is not stored")
		}
		rep = s.scrub(d, Options{Repair: true})
		for _, f := range want(t, rep, prefixed("missing-file", frames)...) {
			if !f.Repaired {
				t.Errorf("not repaired: %+v", f)
			}
			wantDetail(t, f, "rewritten from layer "+string(s.lIndex)+" into pack ")
		}
		rep = s.scrub(d, Options{})
		want(t, rep)
		if rep.Counts.Rebuilt != 3 {
			t.Errorf("rebuilt %d recipes after the repair, want 3", rep.Counts.Rebuilt)
		}
		s.wantPulls(s.lShared, s.lOwn)
	})
}

// A pack whose index is damaged: a finding of its own, and the files
// located in it are missing (no index lists them). Repair moves them out;
// the pack, with nothing located in it, is then dead, for GC to delete.
func TestDamagedPackIndex(t *testing.T) {
	t.Parallel()
	forStores(t, func(t *testing.T, d driver.Driver, s *store) {
		id, frames := s.indexPack()
		p := layout.Pack(id)
		b := s.get(p)
		index := binary.BigEndian.Uint64(b[len(b)-32:]) // the footer's index offset
		b[index+2] ^= 0x01
		s.put(p, b)

		all := append(prefixed("missing-file", frames), "damaged-pack "+p)
		fs := want(t, s.scrub(d, Options{}), all...)
		wantDetail(t, fs["damaged-pack "+p], "its index cannot be read", "checksum", "stored bytes of files in it")
		for _, k := range frames {
			wantDetail(t, fs["missing-file "+k], "located in pack "+id, "whose index cannot be read")
		}

		rep := s.scrub(d, Options{Repair: true})
		fs = want(t, rep, all...)
		for k, f := range fs {
			if !f.Repaired {
				t.Errorf("%s not repaired: %+v", k, f)
			}
		}
		wantDetail(t, fs["damaged-pack "+p], "no file is located in it, and GC deletes it")
		if rep.Requests["delete"]+rep.Requests["delete_files"] != 0 {
			t.Errorf("repair deleted: %v", rep.Requests)
		}

		rep = s.scrub(d, Options{})
		want(t, rep)
		if rep.Counts.DeadPacks != 1 {
			t.Errorf("counts %+v: want the damaged pack dead", rep.Counts)
		}
		if !s.exists(p) {
			t.Error("the damaged pack was deleted")
		}
		s.wantPulls(s.lShared, s.lOwn)
	})
}

// Without the metadata store packs are verified all the same; layers whose
// files are in packs cannot be rebuilt (said once), nor packed files
// repaired.
func TestWithoutMetadata(t *testing.T) {
	t.Parallel()
	forStores(t, func(t *testing.T, d driver.Driver, s *store) {
		rep := scrub(t, d, Options{})
		want(t, rep)
		c := rep.Counts
		if rep.Metadata || c.Files != 7 || c.Packs < 2 || c.Rebuilt != 0 || c.RebuildSkipped != 3 {
			t.Errorf("counts %+v: want 7 files verified in packs, 3 recipes not rebuilt", c)
		}
		if len(rep.Notes) != 1 || !strings.Contains(rep.Notes[0], "3 recipes were not rebuilt") {
			t.Errorf("notes %q: want one saying why 3 recipes were not rebuilt", rep.Notes)
		}

		frame := s.flipFile(s.shared[0])
		f := wantOne(t, scrub(t, d, Options{Repair: true}), "corrupt-file "+frame)
		if f.Repaired {
			t.Errorf("repaired without a metadata store: %+v", f)
		}
		wantDetail(t, f, "its frame at offset", "rewritten into a new pack", "scrub ran without one")

		// A rebuild of a corrupt blob needs the files located too.
		s.flip(layout.BlobData(s.lIndex))
		fs := want(t, scrub(t, d, Options{Repair: true}), "corrupt-file "+frame, "corrupt-blob "+layout.BlobData(s.lIndex))
		if f := fs["corrupt-blob "+layout.BlobData(s.lIndex)]; f.Repaired {
			t.Errorf("repaired without a metadata store: %+v", f)
		} else {
			wantDetail(t, f, "only the metadata store locates")
		}
	})
}

// A damaged pack without the metadata store is found, and not repaired.
func TestDamagedPackWithoutMetadata(t *testing.T) {
	t.Parallel()
	s := newStore(t, newMemDriver())
	p := layout.Pack(s.loc(s.own[0]).Pack) // lOwn's files only
	b := s.get(p)
	b[len(b)-1] ^= 0x01 // the footer's tag
	s.put(p, b)
	var missing []string
	for _, f := range s.own {
		missing = append(missing, "missing-file "+filePath(t, f))
	}
	fs := want(t, scrub(t, s.d, Options{Repair: true}), append(missing, "damaged-pack "+p)...)
	if f := fs["damaged-pack "+p]; f.Repaired {
		t.Errorf("repaired: %+v", f)
	} else {
		wantDetail(t, f, "no footer", "needs the metadata store")
	}
	for _, k := range missing {
		wantDetail(t, fs[k], "in no pack, and no object of its own")
	}
}

// A store deduplicated before packs: every file an object of its own, the
// metadata store's entries without a location. Scrub and repair work on
// those objects as they did, with or without the metadata store.
func TestStoreBeforePacks(t *testing.T) {
	t.Parallel()
	forStores(t, func(t *testing.T, d driver.Driver, s *store) {
		ctx := context.Background()
		all := append(append(append([]digest.Digest{}, s.shared...), s.own...), s.indexOwn...)
		for _, f := range all {
			b := s.fileBytes(f)
			if err := s.ps.Legacy().Put(ctx, f, int64(len(b)), bytes.NewReader(b)); err != nil {
				t.Fatal(err)
			}
		}
		if err := d.Delete(ctx, layout.PacksDir); err != nil {
			t.Fatal(err)
		}
		old, err := bolt.OpenWith(filepath.Join(t.TempDir(), "old.db"), bolt.Options{})
		if err != nil {
			t.Fatal(err)
		}
		defer old.Close()
		for _, l := range []digest.Digest{s.lShared, s.lOwn, s.lIndex} {
			r, err := dedup.DecodeRecipe(l, s.get(layout.BlobRecipe(l)))
			if err != nil {
				t.Fatal(err)
			}
			var ds []digest.Digest
			for _, f := range r.Tar.Files {
				ds = append(ds, f.Digest)
			}
			if _, err := old.AddLayerRefs(ctx, l, ds); err != nil {
				t.Fatal(err)
			}
		}

		for _, m := range []Meta{old, nil} {
			rep := scrub(t, d, Options{Meta: m, Recipes: RecipesAll})
			want(t, rep)
			if c := rep.Counts; c.Files != 7 || c.Packs != 0 || c.Rebuilt != 3 || c.RebuildSkipped != 0 || len(rep.Notes) != 0 {
				t.Errorf("metadata %v: counts %+v, notes %q: want 7 files, no pack, 3 recipes rebuilt", m != nil, c, rep.Notes)
			}
		}

		p0, p1 := filePath(t, s.shared[0]), filePath(t, s.shared[1])
		for _, m := range []Meta{old, nil} {
			s.flip(p0)
			s.remove(p1)
			fs := want(t, scrub(t, d, Options{Meta: m, Repair: true}), "corrupt-file "+p0, "missing-file "+p1)
			for k, f := range fs {
				if !f.Repaired || f.Offset != 0 || strings.Contains(f.Repair, "pack") {
					t.Errorf("metadata %v: %s: %+v: want repaired as an object of its own", m != nil, k, f)
				}
			}
			want(t, scrub(t, d, Options{Meta: m}))
		}
		if s.exists(layout.PacksDir) {
			t.Error("repair wrote a pack into a store from before packs")
		}
	})
}
