package main

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/cairn-registry/cairn/internal/bench/dataset"
)

// TestLockWork: a second run on a work dir is refused, naming the first,
// until the first lets go; the defaults land under the cache dir.
func TestLockWork(t *testing.T) {
	cache, work := t.TempDir(), ""
	unlock, err := lockWork(&cache, &work, dataset.ProfileSmall)
	if err != nil {
		t.Fatal(err)
	}
	if want := filepath.Join(cache, "work-small"); work != want {
		t.Fatalf("work dir %q, want %q", work, want)
	}
	again := work
	_, err = lockWork(&cache, &again, dataset.ProfileSmall)
	if err == nil || !strings.Contains(err.Error(), "in use by another cairn-lab run (pid "+strconv.Itoa(os.Getpid())+")") {
		t.Fatalf("second lock: %v, want it refused naming pid %d", err, os.Getpid())
	}
	unlock()
	unlock, err = lockWork(&cache, &again, dataset.ProfileSmall)
	if err != nil {
		t.Fatalf("lock after unlock: %v", err)
	}
	unlock()
}
