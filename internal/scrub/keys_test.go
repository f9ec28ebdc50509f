package scrub

import (
	"testing"
	"unsafe"

	"github.com/opencontainers/go-digest"

	"github.com/cairn-registry/cairn/internal/digestkey"
)

// The sets of every blob and every file are what scrub's memory grows with.
func TestSetEntrySizes(t *testing.T) {
	t.Parallel()
	if n := unsafe.Sizeof(blobEntry{}); n != 34 {
		t.Errorf("a blob costs %d bytes, want 34", n)
	}
	if n := unsafe.Sizeof(key{}); n != 33 {
		t.Errorf("a file costs %d bytes, want 33", n)
	}
}

func TestBlobSetMergesOutOfOrder(t *testing.T) {
	t.Parallel()
	k := func(s string) key {
		k, ok := digestkey.Of(digest.FromString(s))
		if !ok {
			t.Fatal("key")
		}
		return k
	}
	a, b, c := k("a"), k("b"), k("c")
	var s blobSet
	s.add(a, bData)
	s.add(a, bRecipe)
	s.add(c, bData)
	s.add(b, bRecipe)
	s.add(c, bRecipe) // a listing out of order: c's recipe after b
	s.seal()
	if len(s) != 3 || s.flags(a) != bData|bRecipe || s.flags(b) != bRecipe || s.flags(c) != bData|bRecipe {
		t.Errorf("set %v", s)
	}
	if s.flags(k("d")) != 0 {
		t.Error("a blob never added has flags")
	}
	long := digest.SHA512.FromString("long")
	lk, ok := digestkey.Parse("sha512", long.Encoded())
	if !ok || lk.Whole() {
		t.Fatal("sha512 key")
	}
	if _, ok := digestkey.Parse("sha256", long.Encoded()); ok {
		t.Error("a sha512 hex under sha256/ parsed")
	}
	if _, ok := digestkey.Parse("sha256", "ABCD"); ok {
		t.Error("upper-case hex parsed")
	}
}
