package gc

import (
	"context"
	"errors"
	"slices"
	"testing"

	"github.com/opencontainers/go-digest"
)

// forgetter records what a run told the descriptor cache.
type forgetter struct {
	calls [][]digest.Digest
	err   error
}

func (f *forgetter) ForgetBlobs(_ context.Context, ds []digest.Digest) error {
	f.calls = append(f.calls, slices.Clone(ds))
	return f.err
}

func (f *forgetter) all() map[digest.Digest]bool {
	m := map[digest.Digest]bool{}
	for _, c := range f.calls {
		for _, d := range c {
			m[d] = true
		}
	}
	return m
}

// A run tells Options.Forget every blob and link it deleted, after the
// delete, once per round, and nothing it kept.
func TestForgetTellsTheCacheWhatWasDeleted(t *testing.T) {
	f := newFixture(t)
	w := buildWorld(f)
	before := f.blobs()
	var fg forgetter
	rep := f.gc(Options{DeleteUntagged: true, Forget: &fg})
	after := f.blobs()
	if rep.Deleted.Blobs == 0 || rep.Deleted.LayerLinks == 0 {
		t.Fatalf("the world should lose blobs and links: %+v", rep.Deleted)
	}
	got := fg.all()
	for _, d := range before {
		if !slices.Contains(after, d) && !got[d] {
			t.Errorf("blob %s was deleted but not forgotten", d)
		}
	}
	// Still linked and stored: its entries are true.
	for _, d := range []digest.Digest{w.shared.Digest, w.keep.Digest, w.other.Digest, w.retag.Digest} {
		if got[d] {
			t.Errorf("%s was kept but forgotten", d)
		}
	}
	// The moved manifest's revision link went: an entry of it through the
	// blob endpoint would be false.
	if !got[w.moved.Digest] {
		t.Errorf("revision %s was deleted but not forgotten", w.moved.Digest)
	}
	for _, c := range fg.calls {
		seen := map[digest.Digest]bool{}
		for _, d := range c {
			if seen[d] {
				t.Errorf("a call repeats %s", d)
			}
			seen[d] = true
		}
	}
	if n := rep.Problems[ProblemCacheForget]; n != 0 {
		t.Errorf("%d forget problems", n)
	}
}

// A dry run deletes nothing and so forgets nothing; a failing cache is a
// problem in the report, not a failed run.
func TestForgetDryRunAndFailure(t *testing.T) {
	f := newFixture(t)
	buildWorld(f)
	var dry forgetter
	f.gc(Options{DeleteUntagged: true, DryRun: true, Forget: &dry})
	if len(dry.calls) != 0 {
		t.Errorf("a dry run forgot %v", dry.calls)
	}
	failing := forgetter{err: errors.New("redis is down")}
	rep := f.gc(Options{DeleteUntagged: true, Forget: &failing})
	if rep.Deleted.Blobs == 0 {
		t.Fatal("nothing was deleted")
	}
	if len(failing.calls) == 0 || rep.Problems[ProblemCacheForget] != int64(len(failing.calls)) {
		t.Errorf("%d calls failed, %d problems counted", len(failing.calls), rep.Problems[ProblemCacheForget])
	}
}
