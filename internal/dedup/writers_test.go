package dedup

import (
	"testing"
	"time"

	"github.com/opencontainers/go-digest"
)

// TestUnlocatedWaitsForLocalWriters: a layer sharing a file another layer
// of this process is writing waits for that write for as long as it lasts
// (no second copy, whatever the layer's size), and a file no worker here
// writes, with a metadata store only this process uses, is handed back at
// once rather than after awaitWriters.
func TestUnlocatedWaitsForLocalWriters(t *testing.T) {
	v := newEnv(t, nil, Options{})
	f := digest.FromString("shared file")
	if _, err := v.store.AddLayerRefs(t.Context(), digest.FromString("layer A"), []digest.Digest{f}); err != nil {
		t.Fatal(err)
	}

	start := time.Now()
	need, err := v.eng.unlocated(t.Context(), []digest.Digest{f}, true)
	if err != nil {
		t.Fatal(err)
	}
	if !need[f] || time.Since(start) > awaitWriters/2 {
		t.Fatalf("unclaimed file: need %v after %s, want it at once", need, time.Since(start))
	}

	claim := v.eng.writers.claim([]digest.Digest{f})
	done := make(chan map[digest.Digest]bool, 1)
	go func() {
		need, err := v.eng.unlocated(t.Context(), []digest.Digest{f}, true)
		if err != nil {
			t.Error(err)
		}
		done <- need
	}()
	select {
	case need := <-done:
		t.Fatalf("unlocated returned %v while the file is being written", need)
	case <-time.After(300 * time.Millisecond):
	}
	claim.keep(map[digest.Digest]bool{f: true}) // still written
	select {
	case need := <-done:
		t.Fatalf("unlocated returned %v while the file is being written", need)
	case <-time.After(200 * time.Millisecond):
	}
	// The writer gave up without placing it: the waiter writes it.
	claim.release()
	claim.release()
	select {
	case need := <-done:
		if !need[f] {
			t.Errorf("need %v after the writer gave up, want the file", need)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("unlocated still waits after the writer released the file")
	}
	if busy, _ := v.eng.writers.writing([]digest.Digest{f}); busy {
		t.Error("file still claimed after release")
	}
}
