package meta

import (
	"context"
	"crypto/sha256"
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"github.com/opencontainers/go-digest"
)

// TestBoltCompactedAtOpen: a store that released most of what it held is
// copied into a compact file at the next open; everything left reads the
// same, and what is left costs under 200 bytes of file per unique file.
func TestBoltCompactedAtOpen(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "meta.db")
	s, err := Open(path)
	if err != nil {
		t.Fatal(err)
	}
	const layers, perLayer = 120, 500
	layerOf := func(l int) digest.Digest { return digest.FromString(fmt.Sprint("layer ", l)) }
	var kept []digest.Digest
	for l := range layers {
		var files []digest.Digest
		for i := range perLayer {
			h := sha256.Sum256(fmt.Appendf(nil, "%d-%d", l, i))
			files = append(files, digest.NewDigestFromBytes(digest.SHA256, h[:]))
		}
		if _, err := s.AddLayerRefs(ctx, layerOf(l), files); err != nil {
			t.Fatal(err)
		}
		id := fmt.Sprintf("%032x", l)
		if err := s.BeginPack(ctx, id); err != nil {
			t.Fatal(err)
		}
		var pl []Placement
		for i, f := range files {
			pl = append(pl, Placement{Digest: f, Offset: int64(8 + i*1000), Length: 1000})
		}
		if _, err := s.PlaceFiles(ctx, id, int64(8+perLayer*1000), pl); err != nil {
			t.Fatal(err)
		}
		if l%10 == 0 {
			kept = append(kept, files...)
		}
	}
	// GC releases nine layers in ten.
	for l := range layers {
		if l%10 == 0 {
			continue
		}
		zero, err := s.ReleaseLayers(ctx, []digest.Digest{layerOf(l)})
		if err != nil {
			t.Fatal(err)
		}
		tomb, err := s.TombstoneFiles(ctx, zero)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := s.DropFileEntries(ctx, tomb); err != nil {
			t.Fatal(err)
		}
	}
	before, _ := s.FileSize()
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}

	s, err = Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	after, _ := s.FileSize()
	fi, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("file %d bytes before, %d after (%d on disk): %d bytes per unique file left", before, after, fi.Size(), fi.Size()/int64(len(kept)))
	if fi.Size()*2 > before || fi.Size() > int64(200*len(kept)) {
		t.Fatalf("file %d bytes for %d files (was %d): not compacted", fi.Size(), len(kept), before)
	}
	infos, err := s.Files(ctx, kept)
	if err != nil {
		t.Fatal(err)
	}
	for _, fi := range infos {
		if !fi.Exists || fi.Refs != 1 || fi.Location.IsZero() {
			t.Fatalf("after compaction %+v", fi)
		}
	}
	if _, err := os.Stat(path + ".compact"); !os.IsNotExist(err) {
		t.Fatalf("the copy was left: %v", err)
	}
}
