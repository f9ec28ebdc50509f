package scrub

import (
	"strings"
	"testing"

	"github.com/cairn-registry/cairn/internal/layout"
	"github.com/cairn-registry/cairn/internal/storage/driver"
	"github.com/cairn-registry/cairn/internal/testutil/drivertest"
)

func TestCleanStore(t *testing.T) {
	t.Parallel()
	forStores(t, func(t *testing.T, d driver.Driver, s *store) {
		fd := newFaultDriver(d)
		rep := s.scrub(fd, Options{Repair: true, ReadLinks: true})
		want(t, rep)
		c := rep.Counts
		// Data: 4 configs and the empty one, lIndex, lPlain, 6 manifests.
		if c.Blobs != 13 || c.Recipes != 3 || c.Rebuilt != 3 || c.Files != 7 {
			t.Errorf("counts %+v: want 13 blobs, 3 recipes all rebuilt, 7 files", c)
		}
		if c.Repositories != 3 || c.Manifests != 6 || c.Tags != 4 {
			t.Errorf("counts %+v: want 3 repositories, 6 manifests, 4 tags", c)
		}
		if c.BlobBytes < int64(len(s.blobs[s.lIndex])) || c.FileBytes == 0 || c.RebuiltBytes == 0 || c.PackBytes == 0 {
			t.Errorf("counts %+v: bytes not counted", c)
		}
		// One pack per layer that had files of its own to store.
		if c.Packs < 2 || c.Packs > 3 || c.DeadPacks != 0 || c.DeadFiles != 0 || !rep.Metadata || len(rep.Notes) != 0 {
			t.Errorf("counts %+v, notes %q: want 2 or 3 packs, nothing dead", c, rep.Notes)
		}
		for _, k := range []string{"put", "writer", "move", "delete", "delete_files"} {
			if rep.Requests[k] != 0 {
				t.Errorf("a clean store got %d %s requests: %v", rep.Requests[k], k, rep.Requests)
			}
		}
		if len(fd.deleted) != 0 {
			t.Errorf("deleted %v", fd.deleted)
		}
		if rep.Remaining() != 0 {
			t.Errorf("remaining %d", rep.Remaining())
		}
	})
}

func TestEmptyStore(t *testing.T) {
	t.Parallel()
	drivertest.ForEach(t, func(t *testing.T, d driver.Driver) {
		rep := scrub(t, d, Options{})
		want(t, rep)
		if rep.Counts.Blobs != 0 || rep.Counts.Repositories != 0 {
			t.Errorf("counts %+v on an empty store", rep.Counts)
		}
	})
}

func TestUploadsIgnored(t *testing.T) {
	t.Parallel()
	forStores(t, func(t *testing.T, d driver.Driver, s *store) {
		s.put(layout.RepositoriesDir+"/app/full/_uploads/abc/data", []byte("half an upload"))
		s.put(layout.RepositoriesDir+"/app/full/_uploads/abc/startedat", []byte("not a time"))
		s.put(layout.RepositoriesDir+"/fresh/_uploads/xyz/data", []byte("a repository's first upload"))
		rep := s.scrub(d, Options{ReadLinks: true})
		want(t, rep)
		if rep.Counts.Repositories != 3 {
			t.Errorf("%d repositories, want 3 (one that holds only an upload is none yet)", rep.Counts.Repositories)
		}
	})
}

func wantDetail(t *testing.T, f Finding, parts ...string) {
	t.Helper()
	for _, p := range parts {
		if !strings.Contains(f.Detail+" | "+f.Repair, p) {
			t.Errorf("%s %s: detail %q, repair %q: want %q", f.Kind, f.Path, f.Detail, f.Repair, p)
		}
	}
}
