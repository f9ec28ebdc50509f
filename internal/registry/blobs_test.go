package registry

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"slices"
	"sync"
	"testing"

	"github.com/opencontainers/go-digest"

	"github.com/cairn-registry/cairn/internal/layout"
	"github.com/cairn-registry/cairn/internal/storage/driver"
	"github.com/cairn-registry/cairn/internal/storage/driver/inmemory"
)

// fakeDedup is a DedupSource serving the blobs in rebuilt, and counting
// OpenBlob calls. Its metadata holds the blobs in hinted as deduplicated,
// or, with down set, does not answer until asked no more. BlobSize sends
// on sized, when set and not full, as it starts.
type fakeDedup struct {
	mu      sync.Mutex // StatBlob asks Rebuilt and BlobSize in the background
	rebuilt map[digest.Digest][]byte
	hinted  map[digest.Digest]bool
	down    bool
	sized   chan digest.Digest
	opens   int
}

func (f *fakeDedup) Rebuilt(ctx context.Context, d digest.Digest) bool {
	f.mu.Lock()
	down, hinted := f.down, f.hinted[d]
	f.mu.Unlock()
	if down {
		<-ctx.Done()
		return false
	}
	return hinted
}

func (f *fakeDedup) BlobSize(_ context.Context, d digest.Digest) (int64, error) {
	f.mu.Lock()
	b, ok := f.rebuilt[d]
	sized := f.sized
	f.mu.Unlock()
	if sized != nil {
		// Never blocks: a StatBlob that returned early (a blob not linked)
		// leaves its BlobSize running, which may come after a later stat
		// installed its channel; a full channel already says "started".
		select {
		case sized <- d:
		default:
		}
	}
	if !ok {
		return 0, fmt.Errorf("recipe of %s: %w", d, driver.ErrNotFound)
	}
	return int64(len(b)), nil
}

func (f *fakeDedup) OpenBlob(_ context.Context, d digest.Digest, offset int64) (io.ReadCloser, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.opens++
	b, ok := f.rebuilt[d]
	if !ok {
		return nil, fmt.Errorf("recipe of %s: %w", d, driver.ErrNotFound)
	}
	return io.NopCloser(bytes.NewReader(b[offset:])), nil
}

func (f *fakeDedup) CachedBlob(digest.Digest, int64) io.ReadCloser { return nil }

// TestOpenBlobRebuilt: a blob StatBlob found rebuilt is read from the dedup
// source without trying its missing data file first, and from its data
// file when it was promoted back since; an intact one is read from its
// data file, or from the dedup source when it was deduplicated since.
func TestOpenBlobRebuilt(t *testing.T) {
	ctx := context.Background()
	d := driver.NewCounting(inmemory.New())
	dd := &fakeDedup{rebuilt: map[digest.Digest][]byte{}}
	r := New(d, Options{Dedup: dd})
	content := []byte("layer bytes")
	b := digest.FromBytes(content)
	if err := r.writeLink(ctx, layout.LayerLink("repo", b), b); err != nil {
		t.Fatal(err)
	}
	dd.rebuilt[b] = content

	read := func(info BlobInfo, offset int64) (string, error) {
		t.Helper()
		rc, err := r.OpenBlob(ctx, b, info, offset)
		if err != nil {
			return "", err
		}
		defer rc.Close()
		got, err := io.ReadAll(rc)
		return string(got), err
	}
	readers := func() int64 { return d.Counts()["reader"] }

	info, err := r.StatBlob(ctx, "repo", b)
	if err != nil || !info.Rebuilt || info.Size != int64(len(content)) {
		t.Fatalf("StatBlob = %+v, %v; want rebuilt, %d bytes", info, err, len(content))
	}
	if got, err := read(info, 6); err != nil || got != "bytes" {
		t.Fatalf("OpenBlob(rebuilt, 6) = %q, %v; want %q", got, err, "bytes")
	}
	if n := readers(); n != 0 || dd.opens != 1 {
		t.Errorf("OpenBlob(rebuilt) read the data file %d times and the dedup source %d times, want 0 and 1", n, dd.opens)
	}

	// Promoted back to intact after StatBlob: the data file serves it.
	delete(dd.rebuilt, b)
	if err := d.PutContent(ctx, layout.BlobData(b), content); err != nil {
		t.Fatal(err)
	}
	if got, err := read(info, 0); err != nil || got != string(content) {
		t.Fatalf("OpenBlob(rebuilt, promoted since) = %q, %v; want %q", got, err, content)
	}
	if n := readers(); n != 1 || dd.opens != 2 {
		t.Errorf("OpenBlob(promoted since) read the data file %d times and the dedup source %d times, want 1 and 2", n, dd.opens)
	}

	// Intact: only the data file is read.
	if info, err = r.StatBlob(ctx, "repo", b); err != nil || info.Rebuilt {
		t.Fatalf("StatBlob = %+v, %v; want intact", info, err)
	}
	if got, err := read(info, 0); err != nil || got != string(content) {
		t.Fatalf("OpenBlob(intact) = %q, %v; want %q", got, err, content)
	}
	if n := readers(); n != 2 || dd.opens != 2 {
		t.Errorf("OpenBlob(intact) read the data file %d times in all and the dedup source %d times, want 2 and 2", n, dd.opens)
	}

	// Deduplicated after StatBlob: the dedup source serves it.
	dd.rebuilt[b] = content
	if _, err := d.DeleteFiles(ctx, []string{layout.BlobData(b)}); err != nil {
		t.Fatal(err)
	}
	if got, err := read(info, 0); err != nil || got != string(content) {
		t.Fatalf("OpenBlob(intact, deduplicated since) = %q, %v; want %q", got, err, content)
	}

	// Gone from both: unknown, whatever StatBlob said.
	delete(dd.rebuilt, b)
	for _, info := range []BlobInfo{{Size: info.Size}, {Size: info.Size, Rebuilt: true}} {
		if _, err := read(info, 0); !errors.Is(err, ErrBlobUnknown) {
			t.Errorf("OpenBlob(%+v) of a blob gone = %v, want ErrBlobUnknown", info, err)
		}
	}
}

// TestStatBlobRebuiltHint: a blob dedup's metadata holds as deduplicated,
// the hint come by the time the link check ends, is described from its
// recipe without a stat of its data file; one made intact again since is
// described by its data file; a blob the metadata lost, or holds while it
// does not answer, is still found rebuilt after its data file's stat; and
// a blob the repository does not link is unknown.
func TestStatBlobRebuiltHint(t *testing.T) {
	ctx := context.Background()
	d := &statFiler{Driver: inmemory.New()}
	content := []byte("layer bytes")
	b := digest.FromBytes(content)
	dd := &fakeDedup{rebuilt: map[digest.Digest][]byte{b: content}, hinted: map[digest.Digest]bool{b: true}}
	r := New(d, Options{Dedup: dd})
	if err := r.writeLink(ctx, layout.LayerLink("repo", b), b); err != nil {
		t.Fatal(err)
	}
	// stat reports whether StatBlob statted the data file. With hinted,
	// the link check waits for the recipe to be asked, as an object
	// store's HEAD outlasts a metadata read.
	stat := func(repo string, hinted bool) (BlobInfo, bool, error) {
		t.Helper()
		d.statFiles, d.before = nil, nil
		if hinted {
			sized := make(chan digest.Digest, 1)
			dd.mu.Lock()
			dd.sized = sized
			dd.mu.Unlock()
			link := layout.LayerLink(repo, b)
			d.before = func(p string) {
				if p == link {
					<-sized
				}
			}
		}
		info, err := r.StatBlob(ctx, repo, b)
		return info, slices.Contains(d.statFiles, layout.BlobData(b)), err
	}
	set := func(f func()) {
		dd.mu.Lock()
		defer dd.mu.Unlock()
		dd.sized = nil
		f()
	}

	info, statted, err := stat("repo", true)
	if err != nil || !info.Rebuilt || info.Size != int64(len(content)) {
		t.Fatalf("StatBlob(hinted) = %+v, %v; want rebuilt, %d bytes", info, err, len(content))
	}
	if statted {
		t.Error("StatBlob(hinted) statted the data file")
	}

	// Linked elsewhere only: unknown here.
	if _, _, err := stat("other", false); !errors.Is(err, ErrBlobUnknown) {
		t.Errorf("StatBlob(not linked) = %v, want ErrBlobUnknown", err)
	}

	// The metadata does not answer: not waited for, the data file and
	// then the recipe answer.
	set(func() { dd.down = true })
	if info, statted, err = stat("repo", false); err != nil || !info.Rebuilt || !statted {
		t.Errorf("StatBlob(metadata down) = %+v, %v, data file statted %v; want rebuilt after it", info, err, statted)
	}
	set(func() { dd.down = false })

	// Made intact again: the hint is stale, the data file answers.
	set(func() { delete(dd.rebuilt, b) })
	if err := d.PutContent(ctx, layout.BlobData(b), content); err != nil {
		t.Fatal(err)
	}
	if info, statted, err = stat("repo", true); err != nil || info.Rebuilt || !statted {
		t.Errorf("StatBlob(hinted, intact) = %+v, %v, data file statted %v; want intact from it", info, err, statted)
	}

	// The metadata lost it: found rebuilt after the data file's stat.
	set(func() {
		delete(dd.hinted, b)
		dd.rebuilt[b] = content
	})
	if _, err := d.DeleteFiles(ctx, []string{layout.BlobData(b)}); err != nil {
		t.Fatal(err)
	}
	if info, statted, err = stat("repo", false); err != nil || !info.Rebuilt || !statted {
		t.Errorf("StatBlob(not hinted, rebuilt) = %+v, %v, data file statted %v; want rebuilt after it", info, err, statted)
	}
}

// statFiler is a driver with a StatFile of its own; it counts the paths
// each of Stat and StatFile were asked about.
type statFiler struct {
	driver.Driver
	stats, statFiles []string
	// before, when set, is called with each path StatFile is asked for.
	before func(p string)
}

func (s *statFiler) Stat(ctx context.Context, p string) (driver.FileInfo, error) {
	s.stats = append(s.stats, p)
	return s.Driver.Stat(ctx, p)
}

func (s *statFiler) StatFile(ctx context.Context, p string) (driver.FileInfo, error) {
	if s.before != nil {
		s.before(p)
	}
	s.statFiles = append(s.statFiles, p)
	fi, err := s.Driver.Stat(ctx, p)
	if err == nil && fi.IsDir {
		return driver.FileInfo{}, driver.PathNotFoundError{Path: p, Driver: s.Name()}
	}
	return fi, err
}

// TestBlobStatsAreFileStats: StatBlob of a missing blob, and of a rebuilt
// one, stats only files, with StatFile (on an object store, Stat of a
// missing path lists too); RepositoryExists stats a directory with Stat.
func TestBlobStatsAreFileStats(t *testing.T) {
	ctx := context.Background()
	d := &statFiler{Driver: inmemory.New()}
	content := []byte("layer bytes")
	b := digest.FromBytes(content)
	r := New(d, Options{Dedup: &fakeDedup{rebuilt: map[digest.Digest][]byte{b: content}}})
	if _, err := r.StatBlob(ctx, "repo", b); !errors.Is(err, ErrBlobUnknown) {
		t.Fatalf("StatBlob(unlinked) = %v, want ErrBlobUnknown", err)
	}
	if err := r.writeLink(ctx, layout.LayerLink("repo", b), b); err != nil {
		t.Fatal(err)
	}
	if info, err := r.StatBlob(ctx, "repo", b); err != nil || !info.Rebuilt {
		t.Fatalf("StatBlob = %+v, %v; want rebuilt", info, err)
	}
	want := []string{
		layout.LayerLink("repo", b), layout.RevisionLink("repo", b),
		layout.LayerLink("repo", b), layout.BlobData(b),
	}
	if fmt.Sprint(d.statFiles) != fmt.Sprint(want) || len(d.stats) != 0 {
		t.Errorf("StatBlob: StatFile of %q and Stat of %q, want StatFile of %q only", d.statFiles, d.stats, want)
	}
	if ok, err := r.RepositoryExists(ctx, "repo"); err != nil || !ok {
		t.Errorf("RepositoryExists = %v, %v; want true", ok, err)
	}
	if len(d.stats) != 1 || d.stats[0] != layout.Repo("repo") {
		t.Errorf("RepositoryExists: Stat of %q, want of %q", d.stats, layout.Repo("repo"))
	}
}
