package registry

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/opencontainers/go-digest"
	ocispec "github.com/opencontainers/image-spec/specs-go/v1"

	"github.com/cairn-registry/cairn/internal/layout"
	"github.com/cairn-registry/cairn/internal/storage/driver"
	"github.com/cairn-registry/cairn/internal/storage/driver/filesystem"
	"github.com/cairn-registry/cairn/internal/testutil/drivertest"
)

// syncLog is a filesystem driver that logs Syncs and PutContents in order,
// can hold every Sync of a blob's data until released, and can fail them.
type syncLog struct {
	*filesystem.Driver
	hold chan struct{} // nil: Syncs go through

	mu     sync.Mutex
	fail   error
	events []string
}

func (s *syncLog) failWith(err error) {
	s.mu.Lock()
	s.fail = err
	s.mu.Unlock()
}

func (s *syncLog) log(e string) {
	s.mu.Lock()
	s.events = append(s.events, e)
	s.mu.Unlock()
}

func (s *syncLog) Sync(ctx context.Context, p string) error {
	if strings.HasSuffix(p, "/data") && s.hold != nil {
		<-s.hold
	}
	s.mu.Lock()
	fail := s.fail
	s.mu.Unlock()
	if fail != nil {
		return fail
	}
	err := s.Driver.Sync(ctx, p)
	s.log("sync " + p)
	return err
}

func (s *syncLog) PutContent(ctx context.Context, p string, b []byte) error {
	err := s.Driver.PutContent(ctx, p, b)
	s.log("put " + p)
	return err
}

func (s *syncLog) index(e string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Index(s.events, e)
}

func newSyncLog(t *testing.T, root string) *syncLog {
	t.Helper()
	d, err := filesystem.New(root)
	if err != nil {
		t.Fatal(err)
	}
	if d.CacheEpoch() == "" {
		t.Skip("no boot id on this system: every blob is synced before its 201")
	}
	return &syncLog{Driver: d}
}

// pushWhole uploads data as one blob into repo and returns its digest.
func pushWhole(t *testing.T, r *Registry, repo string, data []byte) digest.Digest {
	t.Helper()
	ctx := context.Background()
	d := digest.FromBytes(data)
	id, err := r.StartUpload(ctx, repo)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := r.FinishUpload(ctx, repo, id, d, bytes.NewReader(data), -1); err != nil {
		t.Fatal(err)
	}
	return d
}

// imageOf is an OCI image manifest naming config and layers.
func imageOf(t *testing.T, config digest.Digest, configSize int64, layers ...[]byte) []byte {
	t.Helper()
	m := ocispec.Manifest{
		MediaType: ocispec.MediaTypeImageManifest,
		Config:    ocispec.Descriptor{MediaType: ocispec.MediaTypeImageConfig, Digest: config, Size: configSize},
	}
	m.SchemaVersion = 2
	for _, l := range layers {
		m.Layers = append(m.Layers, ocispec.Descriptor{MediaType: ocispec.MediaTypeImageLayerGzip, Digest: digest.FromBytes(l), Size: int64(len(l))})
	}
	b, err := json.Marshal(m)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func markers(t *testing.T, d driver.Driver) []string {
	t.Helper()
	var got []string
	err := d.Walk(context.Background(), layout.UnsyncedDir, func(fi driver.FileInfo) error {
		if !fi.IsDir {
			got = append(got, fi.Path)
		}
		return nil
	})
	if err != nil && !errors.Is(err, driver.ErrNotFound) {
		t.Fatal(err)
	}
	return got
}

// TestSealAtManifest: a blob's upload completes with its bytes unsynced and
// a marker naming it; the manifest that names it is stored only after its
// bytes and link were synced, and the marker is gone then.
func TestSealAtManifest(t *testing.T) {
	ctx := context.Background()
	d := newSyncLog(t, t.TempDir())
	d.hold = make(chan struct{})
	r := New(d, Options{})

	config := []byte(`{"architecture":"amd64","os":"linux"}`)
	layer := randomBytes(t, 200<<10)
	cd, ld := pushWhole(t, r, "a", config), pushWhole(t, r, "a", layer)
	if got := markers(t, d); len(got) != 2 {
		t.Fatalf("after two uploads, markers %q; want one per blob", got)
	}
	wantBlob(t, r, ld, layer) // served before it is durable
	if d.index("sync "+layout.BlobData(ld)) >= 0 {
		t.Fatal("the blob was synced while its Syncs were held")
	}

	manifest := imageOf(t, cd, int64(len(config)), layer)
	md := digest.FromBytes(manifest)
	done := make(chan error, 1)
	go func() {
		_, err := r.PutManifest(ctx, "a", "v1", ocispec.MediaTypeImageManifest, manifest, nil)
		done <- err
	}()
	close(d.hold)
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	stored := d.index("put " + layout.RevisionLink("a", md))
	for _, p := range []string{layout.BlobData(ld), layout.LayerLink("a", ld), layout.BlobData(cd), layout.LayerLink("a", cd)} {
		if i := d.index("sync " + p); i < 0 || i > stored {
			t.Errorf("%s synced at event %d, the manifest's revision link stored at %d: want it synced first", p, i, stored)
		}
	}
	if got := markers(t, d); len(got) != 0 {
		t.Errorf("markers %q left after the manifest", got)
	}
	if drivertest.Exists(t, d, layout.UnsyncedDir) {
		t.Error("the markers' directory was not pruned")
	}
}

// TestSealFailure: a blob whose bytes cannot be synced is removed with its
// link, and a manifest naming it is refused.
func TestSealFailure(t *testing.T) {
	ctx := context.Background()
	d := newSyncLog(t, t.TempDir())
	d.hold = make(chan struct{})
	r := New(d, Options{})
	layer, config := randomBytes(t, 10<<10), []byte(`{}`)
	ld, cd := pushWhole(t, r, "a", layer), pushWhole(t, r, "a", config)
	d.failWith(errors.New("EIO from the test"))
	close(d.hold)
	if _, err := r.PutManifest(ctx, "a", "v1", ocispec.MediaTypeImageManifest, imageOf(t, cd, int64(len(config)), layer), nil); err == nil {
		t.Fatal("a manifest naming a blob that could not be synced was stored")
	}
	if r.SealAll(ctx); drivertest.Exists(t, d, layout.BlobData(ld)) || drivertest.Exists(t, d, layout.LayerLink("a", ld)) {
		t.Error("the blob whose sync failed, or its link, is still there")
	}
	if got := markers(t, d); len(got) != 0 {
		t.Errorf("markers %q left after failed seals", got)
	}
}

// TestSyncBlobs: with SyncBlobs the bytes are synced before the upload
// completes, and nothing is marked.
func TestSyncBlobs(t *testing.T) {
	d := newSyncLog(t, t.TempDir())
	r := New(d, Options{SyncBlobs: true})
	data := randomBytes(t, 10<<10)
	dg := pushWhole(t, r, "a", data)
	if got := markers(t, d); len(got) != 0 {
		t.Errorf("markers %q with SyncBlobs", got)
	}
	d.mu.Lock()
	synced := slices.ContainsFunc(d.events, func(e string) bool {
		return strings.HasPrefix(e, "sync ") && strings.Contains(e, "/_uploads/")
	})
	d.mu.Unlock()
	if !synced {
		t.Errorf("no sync of the upload's bytes before they became blob %s: %q", dg, d.events)
	}
}

// TestRecover: after a restart, blobs an earlier process left unsynced are
// sealed when the boot is the same; after a crash (another boot) they are
// checked: intact ones stay (a torn link is written again), torn ones go
// with their links, so that a client pushes them again.
func TestRecover(t *testing.T) {
	ctx := context.Background()
	root := t.TempDir()
	crashed := newSyncLog(t, root)
	crashed.hold = make(chan struct{}) // the seals never ran before the crash
	r1 := New(crashed, Options{})
	t.Cleanup(func() {
		close(crashed.hold)
		r1.SealAll(ctx)
	})
	intact, torn := randomBytes(t, 100<<10), randomBytes(t, 100<<10)
	di, dt := pushWhole(t, r1, "a", intact), pushWhole(t, r1, "b", torn)

	// The crash: one blob's bytes never reached the disk, one link tore.
	if err := os.WriteFile(filepath.Join(root, filepath.FromSlash(layout.BlobData(dt))), make([]byte, 4096), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(root, filepath.FromSlash(layout.LayerLink("a", di))), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	d2, _ := filesystem.New(root)
	r2 := New(d2, Options{})
	r2.epoch = "another-boot"
	rec, err := r2.Recover(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if rec != (Recovered{Verified: 1, Lost: 1}) {
		t.Errorf("Recover = %+v, want 1 verified, 1 lost", rec)
	}
	wantBlob(t, r2, di, intact)
	if got, err := r2.readLink(ctx, layout.LayerLink("a", di)); err != nil || got != di {
		t.Errorf("torn link of %s after Recover: %q, %v", di, got, err)
	}
	if drivertest.Exists(t, d2, layout.BlobData(dt)) || drivertest.Exists(t, d2, layout.LayerLink("b", dt)) {
		t.Error("the torn blob, or its link, survived Recover")
	}
	if got := markers(t, d2); len(got) != 0 {
		t.Errorf("markers %q left after Recover", got)
	}

	// The same boot: a restarted process seals what the last one left.
	d3 := newSyncLog(t, root)
	d3.hold = make(chan struct{})
	r3 := New(d3, Options{})
	again := randomBytes(t, 1000)
	da := pushWhole(t, r3, "a", again)
	close(d3.hold)
	r3.SealAll(ctx)
	d4 := newSyncLog(t, root)
	// A marker as a process killed before its seal leaves it.
	if err := d4.PutContent(ctx, layout.UnsyncedMarker(d4.CacheEpoch(), da, "killed"), []byte(layout.LayerLink("a", da))); err != nil {
		t.Fatal(err)
	}
	rec, err = New(d4, Options{}).Recover(ctx)
	if err != nil || rec != (Recovered{Sealed: 1}) {
		t.Errorf("Recover in the same boot = %+v, %v; want 1 sealed", rec, err)
	}
	if d4.index("sync "+layout.BlobData(da)) < 0 {
		t.Error("the blob left unsynced in this boot was not synced")
	}
}
