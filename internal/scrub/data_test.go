package scrub

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"testing"

	"github.com/opencontainers/go-digest"

	"github.com/cairn-registry/cairn/internal/dedup"
	"github.com/cairn-registry/cairn/internal/layout"
	"github.com/cairn-registry/cairn/internal/storage/driver"
)

func TestCorruptBlob(t *testing.T) {
	t.Parallel()
	forStores(t, func(t *testing.T, d driver.Driver, s *store) {
		s.flip(layout.BlobData(s.cFull))
		s.flip(layout.BlobData(s.lIndex)) // index mode: its recipe can rebuild it
		rep := s.scrub(d, Options{})
		fs := want(t, rep,
			"corrupt-blob "+layout.BlobData(s.cFull),
			"corrupt-blob "+layout.BlobData(s.lIndex))
		f := fs["corrupt-blob "+layout.BlobData(s.cFull)]
		if f.Digest != string(s.cFull) {
			t.Errorf("digest %s, want %s", f.Digest, s.cFull)
		}
		wantDetail(t, f, "hashes to sha256:")

		rep = s.scrub(d, Options{Repair: true})
		fs = want(t, rep,
			"corrupt-blob "+layout.BlobData(s.cFull),
			"corrupt-blob "+layout.BlobData(s.lIndex))
		if f := fs["corrupt-blob "+layout.BlobData(s.cFull)]; f.Repaired {
			t.Errorf("a config without recipe repaired: %+v", f)
		} else {
			wantDetail(t, f, "no recipe")
		}
		if f := fs["corrupt-blob "+layout.BlobData(s.lIndex)]; !f.Repaired {
			t.Errorf("a layer with a recipe not repaired: %+v", f)
		}
		if rep.Repaired != 1 || rep.Remaining() != 1 {
			t.Errorf("repaired %d, remaining %d; want 1 and 1", rep.Repaired, rep.Remaining())
		}
		if !bytes.Equal(s.get(layout.BlobData(s.lIndex)), s.blobs[s.lIndex]) {
			t.Error("the rebuilt layer's data is not the original")
		}
		want(t, s.scrub(d, Options{}), "corrupt-blob "+layout.BlobData(s.cFull))
	})
}

func TestEmptyBlob(t *testing.T) {
	t.Parallel()
	forStores(t, func(t *testing.T, d driver.Driver, s *store) {
		e := s.blob("app/plain", nil)
		want(t, s.scrub(d, Options{}))
		s.put(layout.BlobData(e), []byte{0})
		want(t, s.scrub(d, Options{}), "corrupt-blob "+layout.BlobData(e))
	})
}

// fileBytes reads the stored file d as dedup does.
func (s *store) fileBytes(d digest.Digest) []byte {
	s.t.Helper()
	rc, err := s.ps.Open(context.Background(), d)
	if err != nil {
		s.t.Fatal(err)
	}
	defer rc.Close()
	b, err := io.ReadAll(rc)
	if err != nil {
		s.t.Fatalf("file %s: %v", d, err)
	}
	return b
}

func TestCorruptFileRepairedFromIntactLayer(t *testing.T) {
	t.Parallel()
	forStores(t, func(t *testing.T, d driver.Driver, s *store) {
		f0 := s.shared[0]
		old := s.loc(f0)
		p := s.flipFile(f0)
		rep := s.scrub(d, Options{})
		f := wantOne(t, rep, "corrupt-file "+p)
		if f.Digest != string(f0) || (f.Ref != string(s.lShared) && f.Ref != string(s.lIndex)) {
			t.Errorf("finding %+v: want digest %s and a recipe's blob as ref", f, f0)
		}
		wantDetail(t, f, fmt.Sprintf("its frame at offset %d (%d stored bytes)", old.Offset, old.Length))
		// lShared (full mode) cannot be pulled; lIndex still has its data.
		wantDetail(t, f, "named by 2 recipes, 1 of them")
		if rep.Counts.Rebuilt != 1 {
			t.Errorf("rebuilt %d recipes; the two naming the bad file are not rebuilt", rep.Counts.Rebuilt)
		}

		rep = s.scrub(d, Options{Repair: true})
		f = wantOne(t, rep, "corrupt-file "+p)
		if !f.Repaired {
			t.Fatalf("not repaired: %+v", f)
		}
		now := s.loc(f0)
		wantDetail(t, f, "rewritten from layer "+string(s.lIndex)+" into pack "+now.Pack)
		if now.Pack == old.Pack || !s.exists(layout.Pack(old.Pack)) {
			t.Errorf("file now at %+v, was at %+v: want a new pack, the old one kept", now, old)
		}
		if got := s.fileBytes(f0); digest.FromBytes(got) != f0 {
			t.Fatalf("repaired file hashes to %s", digest.FromBytes(got))
		}
		if rep.Requests["delete"]+rep.Requests["delete_files"] != 0 {
			t.Errorf("repair deleted: %v", rep.Requests)
		}
		// The corrupt copy is dead now: not read, not a finding.
		rep = s.scrub(d, Options{})
		want(t, rep)
		if rep.Counts.DeadFiles != 1 || rep.Counts.Rebuilt != 3 {
			t.Errorf("counts %+v: want the old frame dead, every recipe rebuilt", rep.Counts)
		}
		s.wantPulls(s.lShared, s.lOwn)
	})
}

func TestMissingFileRepaired(t *testing.T) {
	t.Parallel()
	forStores(t, func(t *testing.T, d driver.Driver, s *store) {
		// Two files the intact layer holds: one disassembly restores both.
		p1, p2 := s.loseFile(s.shared[1]), s.loseFile(s.shared[2])
		fs := want(t, s.scrub(d, Options{Repair: true}), "missing-file "+p1, "missing-file "+p2)
		for _, f := range fs {
			if !f.Repaired {
				t.Errorf("not repaired: %+v", f)
			}
			wantDetail(t, f, "not stored", "which is not stored", "named by 2 recipes")
		}
		if s.loc(s.shared[1]).Pack != s.loc(s.shared[2]).Pack {
			t.Error("files restored from one layer went into different packs")
		}
		want(t, s.scrub(d, Options{}))
		s.wantPulls(s.lShared)
	})
}

func TestBadFileWithoutIntactCopy(t *testing.T) {
	t.Parallel()
	forStores(t, func(t *testing.T, d driver.Driver, s *store) {
		// lOwn's files are in no layer with intact data.
		p0, p1 := s.flipFile(s.own[0]), s.loseFile(s.own[1])
		fs := want(t, s.scrub(d, Options{Repair: true}), "corrupt-file "+p0, "missing-file "+p1)
		for _, f := range fs {
			if f.Repaired || f.Ref != string(s.lOwn) {
				t.Errorf("%+v: want unrepaired, ref %s", f, s.lOwn)
			}
			wantDetail(t, f, "named by 1 recipes, 1 of them of layers without intact data", "no layer with intact data")
		}
	})
}

func TestCorruptFileNamedByNoRecipe(t *testing.T) {
	t.Parallel()
	forStores(t, func(t *testing.T, d driver.Driver, s *store) {
		stray := digest.FromString("a file no recipe names")
		p := filePath(t, stray)
		s.put(p, []byte("not zstd at all"))
		f := wantOne(t, s.scrub(d, Options{}), "corrupt-file "+p)
		wantDetail(t, f, "does not decompress", "no recipe names it")
	})
}

func TestBadRecipe(t *testing.T) {
	t.Parallel()
	forStores(t, func(t *testing.T, d driver.Driver, s *store) {
		p := layout.BlobRecipe(s.lOwn)
		s.put(p, []byte(`{"version": 1, "digest": "sha256:`))
		f := wantOne(t, s.scrub(d, Options{Repair: true}), "bad-recipe "+p)
		if f.Digest != string(s.lOwn) || f.Repaired {
			t.Errorf("%+v", f)
		}
		// A recipe of another blob is bad too.
		s.put(p, s.get(layout.BlobRecipe(s.lShared)))
		f = wantOne(t, s.scrub(d, Options{}), "bad-recipe "+p)
		wantDetail(t, f, "does not describe it")
	})
}

// editRecipe rewrites blob l's recipe through fn.
func (s *store) editRecipe(l digest.Digest, fn func(r *dedup.Recipe)) {
	s.t.Helper()
	p := layout.BlobRecipe(l)
	r, err := dedup.DecodeRecipe(l, s.get(p))
	if err != nil {
		s.t.Fatal(err)
	}
	fn(r)
	b, err := json.Marshal(r)
	if err != nil {
		s.t.Fatal(err)
	}
	s.put(p, b)
}

func TestRebuildFailed(t *testing.T) {
	t.Parallel()
	forStores(t, func(t *testing.T, d driver.Driver, s *store) {
		// Another encoder level: the recipe parses, every file is there,
		// and the rebuild makes other bytes.
		s.editRecipe(s.lShared, func(r *dedup.Recipe) {
			for i := range r.Compression.Members {
				r.Compression.Members[i].Encoder = "stdlib/1"
			}
		})
		p := layout.BlobRecipe(s.lShared)
		f := wantOne(t, s.scrub(d, Options{Recipes: RecipesAll}), "rebuild-failed "+p)
		if f.Digest != string(s.lShared) {
			t.Errorf("%+v", f)
		}
		// Without rebuilds only the cheap checks run.
		rep := s.scrub(d, Options{Recipes: RecipesNone})
		want(t, rep)
		if rep.Counts.Rebuilt != 0 || rep.Counts.Recipes != 3 {
			t.Errorf("counts %+v: want 3 recipes read, none rebuilt", rep.Counts)
		}
	})
}

func TestSampleFollowsSeed(t *testing.T) {
	t.Parallel()
	s := newStore(t, newMemDriver())
	d := newFaultDriver(s.d)
	// The sampled recipe is read twice: checked, then rebuilt.
	sampled := func(seed uint64) string {
		d.mu.Lock()
		clear(d.gets)
		d.mu.Unlock()
		rep := s.scrub(d, Options{Recipes: RecipesSample, Sample: 1, Seed: seed})
		if rep.Counts.Rebuilt != 1 || rep.Sample != 1 || rep.Seed != seed {
			t.Fatalf("report %+v: want one recipe rebuilt with seed %d", rep, seed)
		}
		d.mu.Lock()
		defer d.mu.Unlock()
		for p, n := range d.gets {
			if n == 2 && len(p) > 7 && p[len(p)-7:] == "/recipe" {
				return p
			}
		}
		t.Fatal("no recipe read twice")
		return ""
	}
	seen := map[string]bool{}
	for seed := range uint64(12) {
		first := sampled(seed)
		if again := sampled(seed); again != first {
			t.Fatalf("seed %d sampled %s, then %s", seed, first, again)
		}
		seen[first] = true
	}
	if len(seen) < 2 {
		t.Errorf("12 seeds sampled only %v", seen)
	}
}

func TestUnreadable(t *testing.T) {
	t.Parallel()
	forStores(t, func(t *testing.T, d driver.Driver, s *store) {
		fd := newFaultDriver(d)
		fd.failGet[layout.BlobData(s.lPlain)] = true
		fd.failGet[layout.BlobRecipe(s.lOwn)] = true
		fs := want(t, s.scrub(fd, Options{}),
			"unreadable "+layout.BlobData(s.lPlain),
			"unreadable "+layout.BlobRecipe(s.lOwn))
		wantDetail(t, fs["unreadable "+layout.BlobData(s.lPlain)], "injected storage failure")
	})
}

func TestSHA512Blobs(t *testing.T) {
	t.Parallel()
	forStores(t, func(t *testing.T, d driver.Driver, s *store) {
		ctx := context.Background()
		good, bad := []byte("sha512 addressed"), []byte("sha512 addressed, then changed")
		dg, db := digest.SHA512.FromBytes(good), digest.SHA512.FromBytes(bad)
		s.put(layout.BlobData(dg), good)
		s.put(layout.BlobData(db), append(bad[:0:0], bad[1:]...))
		for _, x := range []digest.Digest{dg, db} {
			if ok, err := s.reg.MountBlob(ctx, "app/plain", x, ""); err != nil || !ok {
				t.Fatal(ok, err)
			}
		}
		gone := digest.SHA512.FromString("never stored")
		s.put(layerLink("app/plain", gone), []byte(gone))
		fs := want(t, s.scrub(d, Options{ReadLinks: true}),
			"corrupt-blob "+layout.BlobData(db),
			"missing-blob "+layerLink("app/plain", gone))
		if f := fs["missing-blob "+layerLink("app/plain", gone)]; f.Digest != string(gone) {
			t.Errorf("%+v: want digest %s", f, gone)
		}
	})
}
