package pack

import (
	"context"
	"errors"
	"fmt"

	"github.com/opencontainers/go-digest"

	"github.com/cairn-registry/cairn/internal/meta"
	"github.com/cairn-registry/cairn/internal/storage/driver"
)

// AdoptIndex is what Adopt needs of the metadata store.
type AdoptIndex interface {
	Files(ctx context.Context, digests []digest.Digest) ([]meta.FileInfo, error)
	BeginPack(ctx context.Context, id string) error
	PlaceFiles(ctx context.Context, id string, size int64, files []meta.Placement) ([]bool, error)
}

// Adoption is what Adopt found in one pack object.
type Adoption struct {
	// Entries is how many files the pack's own index lists; Placed how
	// many of them the metadata now locates in it (referenced files it
	// located nowhere).
	Entries, Placed int
	// PlacedBytes is the stored bytes of the placed files.
	PlacedBytes int64
}

// Adopt reads the index of the pack object id (size bytes, as listed) and
// locates in it every file the metadata knows as referenced but locates
// nowhere: the pack's record is made (BeginPack) and its files placed, as
// its writer would have. This is how a metadata store rebuilt from storage
// learns where files are, and how GC keeps an unrecorded pack that still
// holds what recipes name instead of deleting it as an orphan. A file
// already located elsewhere keeps its location (this pack's copy is dead
// bytes); a pack with nothing to place is left unrecorded. A tombstoned
// pack (GC is deleting it) fails with meta.ErrPackGone.
func Adopt(ctx context.Context, d driver.Driver, idx AdoptIndex, id string, size int64) (Adoption, error) {
	entries, dataEnd, err := ObjectIndex(ctx, d, id, size)
	if err != nil {
		return Adoption{}, err
	}
	a := Adoption{Entries: len(entries)}
	const batch = 4096
	var place []meta.Placement
	for i := 0; i < len(entries); i += batch {
		es := entries[i:min(i+batch, len(entries))]
		ds := make([]digest.Digest, len(es))
		for j, e := range es {
			ds[j] = e.Digest
		}
		infos, err := idx.Files(ctx, ds)
		if err != nil {
			return a, fmt.Errorf("pack %s: adopt: %w", id, err)
		}
		for j, fi := range infos {
			if fi.Exists && fi.Refs > 0 && !fi.Tombstoned && fi.Location.IsZero() {
				place = append(place, meta.Placement{Digest: es[j].Digest, Offset: es[j].Offset, Length: es[j].Length})
			}
		}
	}
	if len(place) == 0 {
		return a, nil
	}
	if err := idx.BeginPack(ctx, id); err != nil {
		return a, fmt.Errorf("pack %s: adopt: %w", id, err)
	}
	placed, err := idx.PlaceFiles(ctx, id, dataEnd, place)
	if err != nil {
		if errors.Is(err, meta.ErrPackGone) {
			return a, err
		}
		return a, fmt.Errorf("pack %s: adopt: %w", id, err)
	}
	for i, ok := range placed {
		if ok {
			a.Placed++
			a.PlacedBytes += place[i].Length
		}
	}
	return a, nil
}
