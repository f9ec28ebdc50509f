package bolt

import (
	"context"
	"crypto/sha256"
	"encoding/binary"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"testing"

	"github.com/opencontainers/go-digest"
	"go.etcd.io/bbolt"

	"github.com/cairn-registry/cairn/internal/meta"
)

// Sizes of the dedup workload TestBoltSizePerFile models: a real dataset of
// this shape made a 16 MiB file (451 bytes per unique file).
const (
	sizeUniqueFiles = 23_000
	sizeLayers      = 84
	sizePacks       = 60
	// sizeTarget is the most file a unique file may cost, in bytes.
	sizeTarget = 200
)

// sizeLayerLens are the layers' file counts: a few big layers, many medium
// and some small ones, about 4.5 references per unique file in all.
func sizeLayerLens(rng *rand.Rand) []int {
	lens := make([]int, sizeLayers)
	for i := range lens {
		switch {
		case i%4 == 0:
			lens[i] = 2000 + rng.IntN(2000) // 21 layers of thousands
		case i%4 == 3:
			lens[i] = 5 + rng.IntN(100) // 21 small ones
		default:
			lens[i] = 500 + rng.IntN(900)
		}
	}
	return lens
}

// buildSizeStore fills the store at path as the dedup worker would: per
// layer, AddLayerRefs, then the files it must write go into the open pack,
// which is begun before its first file and placed (PlaceFiles) when full.
// It returns the number of unique files.
func buildSizeStore(t testing.TB, path string) int {
	ctx := context.Background()
	rng := rand.New(rand.NewPCG(1, 2))
	pool := make([]digest.Digest, sizeUniqueFiles)
	for i := range pool {
		h := sha256.Sum256(binary.BigEndian.AppendUint64(nil, uint64(i)))
		pool[i] = digest.NewDigestFromBytes(digest.SHA256, h[:])
	}
	s := mustOpen(t, path)
	defer s.Close()
	lens := sizeLayerLens(rng)
	total := 0
	for _, n := range lens {
		total += n
	}
	perPack := sizeUniqueFiles / sizePacks
	var (
		packID  string
		packs   int
		offset  int64
		pending []meta.Placement
		unique  = map[digest.Digest]bool{}
	)
	flush := func() {
		if len(pending) == 0 {
			return
		}
		placed, err := s.PlaceFiles(ctx, packID, offset, pending)
		if err != nil {
			t.Fatal(err)
		}
		for i, ok := range placed {
			if !ok {
				t.Fatalf("%s not placed", pending[i].Digest)
			}
		}
		pending, packID = pending[:0], ""
	}
	for l, n := range lens {
		files := make([]digest.Digest, n)
		for i := range files {
			files[i] = pool[rng.IntN(len(pool))]
		}
		layer := digest.FromString(fmt.Sprint("layer ", l))
		refs, err := s.AddLayerRefs(ctx, layer, files)
		if err != nil {
			t.Fatal(err)
		}
		for _, r := range refs {
			if !r.Write {
				continue
			}
			unique[r.Digest] = true
			if packID == "" {
				var id [16]byte
				for i := range id {
					id[i] = byte(rng.Uint32())
				}
				packID, offset = fmt.Sprintf("%x", id), 8
				packs++
				if err := s.BeginPack(ctx, packID); err != nil {
					t.Fatal(err)
				}
			}
			length := 200 + rng.Int64N(200_000)
			pending = append(pending, meta.Placement{Digest: r.Digest, Offset: offset, Length: length})
			offset += length
			if len(pending) >= perPack {
				flush()
			}
		}
	}
	flush()
	t.Logf("%d layers, %d references, %d unique files (%.1f references each), %d packs",
		len(lens), total, len(unique), float64(total)/float64(len(unique)), packs)
	return len(unique)
}

// TestBoltSizePerFile: a store built by the dedup worker's calls costs less
// than sizeTarget bytes of file per unique file once reopened.
func TestBoltSizePerFile(t *testing.T) {
	path := filepath.Join(t.TempDir(), "meta.db")
	unique := buildSizeStore(t, path)
	fi, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("before reopen: file %d bytes, %d B/file", fi.Size(), fi.Size()/int64(unique))

	s := mustOpen(t, path)
	defer s.Close()
	if fi, err = os.Stat(path); err != nil {
		t.Fatal(err)
	}
	perFile := fi.Size() / int64(unique)
	pageSize := int64(s.db.Info().PageSize)
	var inUse, allocated int64
	err = s.db.View(func(tx *bbolt.Tx) error {
		return tx.ForEach(func(name []byte, b *bbolt.Bucket) error {
			bs := b.Stats()
			used := int64(bs.LeafInuse + bs.BranchInuse)
			alloc := int64(bs.LeafAlloc + bs.BranchAlloc)
			inUse, allocated = inUse+used, allocated+alloc
			if alloc >= pageSize {
				t.Logf("bucket %-10s %6d keys, %8d bytes used (%5.1f B/file), %8d allocated (%5.1f B/file)",
					name, bs.KeyN, used, float64(used)/float64(unique), alloc, float64(alloc)/float64(unique))
			}
			return nil
		})
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("after reopen: file %d bytes, %d B/file on disk; buckets use %d bytes (%d B/file) in %d bytes of pages (%d B/file)",
		fi.Size(), perFile, inUse, inUse/int64(unique), allocated, allocated/int64(unique))
	if perFile >= sizeTarget {
		t.Errorf("%d bytes of file per unique file, want < %d", perFile, sizeTarget)
	}
}
