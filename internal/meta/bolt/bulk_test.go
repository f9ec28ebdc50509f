package bolt_test

import (
	"path/filepath"
	"testing"

	"github.com/opencontainers/go-digest"

	"github.com/cairn-registry/cairn/internal/meta/bolt"
	"github.com/cairn-registry/cairn/internal/meta/metatest"
)

func TestBoltReleaseLayersInconsistent(t *testing.T) {
	s, err := bolt.Open(filepath.Join(t.TempDir(), "meta.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	metatest.ReleaseLayersInconsistent(t, s, func(t *testing.T, d digest.Digest) {
		if err := bolt.DropFileEntry(s, d); err != nil {
			t.Fatal(err)
		}
	})
}

func TestBoltOldFileEntries(t *testing.T) {
	s, err := bolt.Open(filepath.Join(t.TempDir(), "meta.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	metatest.OldFileEntries(t, s, func(t *testing.T, d digest.Digest, refs int64) {
		if err := bolt.PutOldFileEntry(s, d, refs); err != nil {
			t.Fatal(err)
		}
	})
}
