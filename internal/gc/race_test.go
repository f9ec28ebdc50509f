package gc

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/cairn-registry/cairn/internal/layout"
	"github.com/cairn-registry/cairn/internal/registry"
	"github.com/cairn-registry/cairn/internal/storage/driver"
)

// hookDriver runs a hook after a matching call returns, to place a
// registry operation at an exact point of a GC round.
type hookDriver struct {
	driver.Driver
	mu        sync.Mutex
	afterPut  func(p string)
	afterWalk func(p string)
}

func (d *hookDriver) PutContent(ctx context.Context, p string, b []byte) error {
	err := d.Driver.PutContent(ctx, p, b)
	d.call(&d.afterPut, p)
	return err
}

func (d *hookDriver) Walk(ctx context.Context, p string, fn driver.WalkFn) error {
	err := d.Driver.Walk(ctx, p, fn)
	d.call(&d.afterWalk, p)
	return err
}

// call calls the hook *h with p, if one is set.
func (d *hookDriver) call(h *func(string), p string) {
	d.mu.Lock()
	f := *h
	d.mu.Unlock()
	if f != nil {
		f(p)
	}
}

// retagDuringRound re-tags the untagged manifest "moved" while a GC round
// deletes it; hook places the push. It returns the push's error.
func retagDuringRound(t *testing.T, place func(hd *hookDriver, start func())) (*fixture, *world, error) {
	f := newFixture(t)
	w := buildWorld(f)
	content := mustGet(f, "a", w.moved.Digest)
	hd := &hookDriver{Driver: f.d}
	var (
		once    sync.Once
		pushErr = make(chan error, 1)
	)
	start := func() {
		once.Do(func() {
			go func() {
				// The writer uses the same store, not the hooks.
				_, err := f.reg.PutManifest(context.Background(), "a", "v3", "", content, nil)
				pushErr <- err
			}()
		})
	}
	place(hd, start)
	if _, err := Run(context.Background(), hd, Options{DeleteUntagged: true}); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-pushErr:
		return f, w, err
	case <-time.After(time.Minute):
		t.Fatal("the push never finished")
	}
	return nil, nil, nil
}

// TestPushSeenByRound: a re-tag whose record the round reads keeps the
// manifest whole; the push, which waited for the fence, succeeds.
func TestPushSeenByRound(t *testing.T) {
	f, w, err := retagDuringRound(t, func(hd *hookDriver, start func()) {
		hd.afterPut = func(p string) {
			if !strings.Contains(p, "/"+layout.GCFencePrefix) {
				return
			}
			start()
			// Return (and let the round read the journal) once the
			// writer's record is there.
			if !awaitRecord(hd.Driver) {
				t.Error("the writer wrote no record")
			}
		}
	})
	if err != nil {
		t.Fatalf("push during the round: %v", err)
	}
	f.pull("a", "v3")
	f.pull("a", w.sigGone.Digest.String())
}

// TestPushAfterJournalRead: a re-tag whose record the round did not read
// waits for the round's fence, then finds the manifest's blobs gone and
// fails cleanly; it never stores a manifest naming deleted blobs.
func TestPushAfterJournalRead(t *testing.T) {
	f, _, err := retagDuringRound(t, func(hd *hookDriver, start func()) {
		hd.afterWalk = func(p string) {
			if p != layout.GCJournalDir {
				return
			}
			start()
			// Give the writer time to check the blobs before the round
			// deletes them, were it not waiting for the fence.
			awaitRecord(hd.Driver)
			time.Sleep(50 * time.Millisecond)
		}
	})
	if !errors.Is(err, registry.ErrManifestBlobUnknown) {
		t.Fatalf("push after the journal read: %v, want %v", err, registry.ErrManifestBlobUnknown)
	}
	if _, err := f.reg.GetManifest(context.Background(), "a", "v3"); err == nil {
		t.Error("tag v3 exists after a failed push")
	}
}

func journalFiles(d driver.Driver) []string {
	var out []string
	_ = d.Walk(context.Background(), layout.GCJournalDir, func(fi driver.FileInfo) error {
		if !fi.IsDir {
			out = append(out, fi.Path)
		}
		return nil
	})
	return out
}

// awaitRecord waits up to a second for a writer's journal record and
// reports whether one appeared.
func awaitRecord(d driver.Driver) bool {
	for range 1000 {
		if len(journalFiles(d)) > 0 {
			return true
		}
		time.Sleep(time.Millisecond)
	}
	return false
}
