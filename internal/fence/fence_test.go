package fence

import (
	"context"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/opencontainers/go-digest"

	"github.com/cairn-registry/cairn/internal/layout"
	"github.com/cairn-registry/cairn/internal/storage/driver/filesystem"
)

// TestRunLifecycle: a run's marker makes Running true, its fences are seen
// by writers, and Leftovers lists only what dead runs left.
func TestRunLifecycle(t *testing.T) {
	ctx := context.Background()
	root := t.TempDir()
	d, err := filesystem.New(root)
	if err != nil {
		t.Fatal(err)
	}
	if ok, err := Running(ctx, d); err != nil || ok {
		t.Fatalf("Running on an empty store = %v, %v", ok, err)
	}
	run, err := Begin(ctx, d, Marker{Delay: "1h"})
	if err != nil {
		t.Fatal(err)
	}
	defer run.Stop()
	if ok, _ := Running(ctx, d); !ok {
		t.Fatal("a fresh marker is not seen as a running GC")
	}
	if run.T0().IsZero() {
		t.Fatal("no T0")
	}
	f, err := run.OpenFence(ctx)
	if err != nil {
		t.Fatal(err)
	}
	s, err := readState(ctx, d)
	if err != nil || !slices.Contains(s.fences, f) {
		t.Fatalf("fence %s not seen: %+v, %v", f, s, err)
	}

	// A dead run's marker and an old fence of another run.
	dead := layout.GCRunMarker("dead")
	oldFence := layout.GCFence("dead", 3)
	for _, p := range []string{dead, oldFence} {
		if err := d.PutContent(ctx, p, nil); err != nil {
			t.Fatal(err)
		}
		old := time.Now().Add(-time.Hour)
		if err := os.Chtimes(filepath.Join(root, p), old, old); err != nil {
			t.Fatal(err)
		}
	}
	paths, others, err := run.Leftovers(ctx)
	if err != nil {
		t.Fatal(err)
	}
	slices.Sort(paths)
	if want := []string{oldFence, dead}; !slices.Equal(paths, want) || others {
		t.Fatalf("Leftovers = %v, %v; want %v, false", paths, others, want)
	}
	// A stale marker still keeps writers' records (see Protect), though no
	// run is running.
	run.CloseFence(ctx, f)
	if _, err := d.DeleteFiles(ctx, []string{run.Marker()}); err != nil {
		t.Fatal(err)
	}
	if ok, _ := Running(ctx, d); ok {
		t.Fatal("a stale marker counts as a running GC")
	}
	rec := &Record{Repo: "a/b", Manifest: true, Digest: digest.FromString("m"), Tags: []string{"v1"}}
	done, err := Protect(ctx, d, rec)
	if err != nil {
		t.Fatal(err)
	}
	done()
	var seen []Record
	err = WalkJournal(ctx, d, func(p string, _ time.Time, r Record, ok bool) error {
		b, err := d.GetContent(ctx, p)
		if err != nil || !ok {
			t.Fatalf("record %s: %v, ok %v", p, err, ok)
		}
		if err := DecodeBody(&r, b); err != nil {
			t.Fatal(err)
		}
		seen = append(seen, r)
		return nil
	})
	if err != nil || len(seen) != 1 || seen[0].Digest != rec.Digest || !slices.Equal(seen[0].Tags, rec.Tags) || seen[0].Repo != "a/b" {
		t.Fatalf("journal after done with a stale marker: %+v, %v", seen, err)
	}
	// With no marker at all, done removes the record.
	if _, err := d.DeleteFiles(ctx, []string{dead, oldFence}); err != nil {
		t.Fatal(err)
	}
	done, err = Protect(ctx, d, &Record{Repo: "a", Digest: digest.FromString("b")})
	if err != nil {
		t.Fatal(err)
	}
	done()
	n := 0
	WalkJournal(ctx, d, func(string, time.Time, Record, bool) error { n++; return nil })
	if n != 1 {
		t.Fatalf("%d records, want the first one only", n)
	}
}
