package gc

import (
	"context"
	"fmt"
	"slices"
	"testing"

	"github.com/opencontainers/go-digest"

	"github.com/cairn-registry/cairn/internal/meta"
	"github.com/cairn-registry/cairn/internal/meta/bolt"
)

// readableIndex is the test index with LayerFiles, as meta.Store has it:
// what a dry run reads to preview the real run's releases.
type readableIndex struct {
	*hookedIndex
	lf interface {
		LayerFiles(ctx context.Context, layer digest.Digest) ([]digest.Digest, error)
	}
}

func (r readableIndex) LayerFiles(ctx context.Context, layer digest.Digest) ([]digest.Digest, error) {
	return r.lf.LayerFiles(ctx, layer)
}

// TestDryRunPreviewsReleases: on an index it can read, a dry run counts
// the unique files the real run's releases free, changing neither storage
// nor the index.
func TestDryRunPreviewsReleases(t *testing.T) {
	for _, opts := range []Options{{}, {BatchSize: 1, Concurrency: 2}} {
		t.Run(fmt.Sprintf("batch%d", opts.BatchSize), func(t *testing.T) {
			var store *bolt.Store
			f := newDedupFixture(t, func(t *testing.T) testIndex {
				s := indexes[1].new(t)
				store = s.(*bolt.Store)
				return s
			}, nil)
			buildDedupWorld(f)
			before := f.files("/")
			names := []string{"s", "k", "m", "o1", "o2", "o3"}
			var infos []meta.FileInfo
			for _, n := range names {
				infos = append(infos, f.file(n))
			}
			dryOpts := opts
			dryOpts.DryRun, dryOpts.Dedup = true, readableIndex{f.idx, store}
			dry := f.gc(dryOpts)
			if after := f.files("/"); !slices.Equal(before, after) {
				t.Fatalf("dry run changed storage:\nbefore %v\nafter  %v", before, after)
			}
			for i, n := range names {
				if got := f.file(n); got != infos[i] {
					t.Errorf("dry run changed file %s: %+v, was %+v", n, got, infos[i])
				}
			}
			if len(f.idx.releasedLayers()) != 0 {
				t.Error("dry run released references")
			}
			real := f.gcWith(opts)
			if dry.Deleted != real.Deleted || real.Deleted.DedupFiles == 0 {
				t.Errorf("dry run would delete %+v, the run deleted %+v", dry.Deleted, real.Deleted)
			}
		})
	}
}
