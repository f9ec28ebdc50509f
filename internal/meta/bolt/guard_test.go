package bolt

import (
	"context"
	"errors"
	"path/filepath"
	"testing"

	"go.etcd.io/bbolt"

	"github.com/cairn-registry/cairn/internal/meta"
)

// TestBoltPanicBecomesError: a panic inside a transaction (what bbolt does
// on a damaged page) fails that call with ErrCorrupt, and the store goes on
// working: the transaction was rolled back and its lock released.
func TestBoltPanicBecomesError(t *testing.T) {
	ctx := context.Background()
	s, err := Open(filepath.Join(t.TempDir(), "meta.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	var none []byte
	boom := func(*bbolt.Tx) error { _ = none[3]; return nil }
	for name, run := range map[string]func(context.Context, func(*bbolt.Tx) error) error{
		"view": s.view, "update": s.update, "batch": s.batch,
	} {
		if err := run(ctx, boom); !errors.Is(err, meta.ErrCorrupt) {
			t.Errorf("%s of a panicking fn = %v, want meta.ErrCorrupt", name, err)
		} else {
			t.Logf("%s: %v", name, err)
		}
	}
	if err := s.SetStoreID(ctx, "after"); err != nil {
		t.Fatal(err)
	}
	if id, err := s.StoreID(ctx); err != nil || id != "after" {
		t.Fatalf("StoreID after the panics = %q, %v", id, err)
	}
}
