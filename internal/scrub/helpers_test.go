package scrub

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/klauspost/compress/zstd"
	"github.com/opencontainers/go-digest"

	"github.com/cairn-registry/cairn/internal/dedup"
	"github.com/cairn-registry/cairn/internal/dedup/layer"
	"github.com/cairn-registry/cairn/internal/dedup/pack"
	"github.com/cairn-registry/cairn/internal/layout"
	"github.com/cairn-registry/cairn/internal/meta"
	"github.com/cairn-registry/cairn/internal/meta/bolt"
	"github.com/cairn-registry/cairn/internal/registry"
	"github.com/cairn-registry/cairn/internal/storage/driver"
	"github.com/cairn-registry/cairn/internal/storage/driver/inmemory"
	"github.com/cairn-registry/cairn/internal/testutil/drivertest"
	"github.com/cairn-registry/cairn/internal/testutil/layertest"
)

// Media types the fixture pushes.
const (
	mtManifest = "application/vnd.oci.image.manifest.v1+json"
	mtIndex    = "application/vnd.oci.image.index.v1+json"
	mtConfig   = "application/vnd.oci.image.config.v1+json"
)

// forStores runs fn over a fresh store on each serverless driver.
func forStores(t *testing.T, fn func(t *testing.T, d driver.Driver, s *store)) {
	drivertest.ForEach(t, func(t *testing.T, d driver.Driver) { fn(t, d, newStore(t, d)) })
}

// store is a registry filled as a server would fill it, with dedup run
// over some layers:
//
//	app/full   tag v1: manifest mFull, config cFull, layers lShared (gzip)
//	           and lOwn (zstd), both deduplicated in full mode (recipes,
//	           no data)
//	app/index  tag v1: manifest mIndex, config cIndex, layer lIndex (gzip),
//	           deduplicated in index mode (recipe and data); it holds the
//	           shared files of lShared
//	app/plain  tag v1: manifest mPlain (a plain tar layer lPlain), a
//	           referrer mRef whose subject is mPlain, and tag idx: an
//	           index mIdx naming mChild, pushed by digest only
type store struct {
	t    *testing.T
	d    driver.Driver
	reg  *registry.Registry
	meta *bolt.Store // the metadata store dedup used: open for the test
	ps   *pack.Store // reads files as dedup does

	cFull, cIndex, lShared, lOwn, lIndex, lPlain digest.Digest
	mFull, mIndex, mPlain, mRef, mChild, mIdx    digest.Digest
	shared, own, indexOwn                        []digest.Digest // file digests
	blobs                                        map[digest.Digest][]byte
}

func newStore(t *testing.T, d driver.Driver) *store {
	t.Helper()
	ctx := context.Background()
	s := &store{t: t, d: d, reg: registry.New(d, registry.Options{DeleteEnabled: true}), blobs: map[digest.Digest][]byte{}}
	var sharedFiles, ownFiles, indexOwn []layertest.File
	for i := range 3 {
		sharedFiles = append(sharedFiles, layertest.File{Name: fmt.Sprintf("usr/lib/shared%d", i), Body: layertest.Body(uint64(10+i), 9_000+i*1000)})
	}
	for i := range 2 {
		ownFiles = append(ownFiles, layertest.File{Name: fmt.Sprintf("app/own%d", i), Body: layertest.Body(uint64(20+i), 7_000+i*500)})
		indexOwn = append(indexOwn, layertest.File{Name: fmt.Sprintf("srv/idx%d", i), Body: layertest.Body(uint64(30+i), 6_000+i*500)})
	}
	for _, f := range sharedFiles {
		s.shared = append(s.shared, digest.FromBytes(f.Body))
	}
	for _, f := range ownFiles {
		s.own = append(s.own, digest.FromBytes(f.Body))
	}
	for _, f := range indexOwn {
		s.indexOwn = append(s.indexOwn, digest.FromBytes(f.Body))
	}
	shared := layertest.Gzip(t, layertest.Tar(t, sharedFiles...), 6)
	own := layertest.Zstd(t, layertest.Tar(t, ownFiles...), zstd.SpeedDefault)
	index := layertest.Gzip(t, layertest.Tar(t, append(append([]layertest.File{}, sharedFiles...), indexOwn...)...), 6)
	plain := layertest.Tar(t, layertest.File{Name: "etc/plain", Body: []byte("plain layer\n")})

	s.cFull = s.blob("app/full", []byte(`{"architecture":"amd64","os":"linux","rootfs":{"type":"layers"},"n":1}`))
	s.lShared = s.blob("app/full", shared)
	s.lOwn = s.blob("app/full", own)
	s.mFull = s.manifest("app/full", "v1", s.cFull, nil, layertest.OCIGzip, s.lShared, layertest.OCIZstd, s.lOwn)

	s.cIndex = s.blob("app/index", []byte(`{"architecture":"amd64","os":"linux","rootfs":{"type":"layers"},"n":2}`))
	s.lIndex = s.blob("app/index", index)
	s.mIndex = s.manifest("app/index", "v1", s.cIndex, nil, layertest.OCIGzip, s.lIndex)

	cPlain := s.blob("app/plain", []byte(`{"architecture":"amd64","os":"linux","rootfs":{"type":"layers"},"n":3}`))
	s.lPlain = s.blob("app/plain", plain)
	s.mPlain = s.manifest("app/plain", "v1", cPlain, nil, layertest.OCITar, s.lPlain)
	empty := s.blob("app/plain", []byte("{}"))
	s.mRef = s.manifest("app/plain", "", empty, &s.mPlain, layertest.OCITar, s.lPlain)
	cChild := s.blob("app/plain", []byte(`{"architecture":"arm64","os":"linux","rootfs":{"type":"layers"},"n":4}`))
	s.mChild = s.manifest("app/plain", "", cChild, nil, layertest.OCITar, s.lPlain)
	s.mIdx = s.index("app/plain", "idx", s.mChild)

	store, err := bolt.OpenWith(filepath.Join(t.TempDir(), "meta.db"), bolt.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { store.Close() })
	s.meta = store
	if s.ps, err = pack.NewStore(d, store, pack.Options{}, nil); err != nil {
		t.Fatal(err)
	}
	eng, err := dedup.New(d, store, dedup.Options{TempDir: t.TempDir()}, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer eng.Close()
	pctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	for l, mode := range map[digest.Digest]dedup.Mode{s.lIndex: dedup.ModeIndex, s.lShared: dedup.ModeFull, s.lOwn: dedup.ModeFull} {
		if _, err := eng.Process(pctx, l, mode); err != nil {
			t.Fatalf("dedup %s: %v", l, err)
		}
	}
	for _, l := range []digest.Digest{s.lShared, s.lOwn} {
		if s.exists(layout.BlobData(l)) || !s.exists(layout.BlobRecipe(l)) {
			t.Fatalf("layer %s not deduplicated in full mode", l)
		}
	}
	if !s.exists(layout.BlobData(s.lIndex)) || !s.exists(layout.BlobRecipe(s.lIndex)) {
		t.Fatalf("layer %s not deduplicated in index mode", s.lIndex)
	}
	return s
}

// blob stores data as a finished upload to repo would.
func (s *store) blob(repo string, data []byte) digest.Digest {
	s.t.Helper()
	d := digest.FromBytes(data)
	s.put(layout.BlobData(d), data)
	if ok, err := s.reg.MountBlob(context.Background(), repo, d, ""); err != nil || !ok {
		s.t.Fatalf("link %s into %s: %v, %v", d, repo, ok, err)
	}
	s.blobs[d] = data
	return d
}

// desc is a descriptor as the fixture's manifests write it.
type desc struct {
	MediaType string        `json:"mediaType"`
	Digest    digest.Digest `json:"digest"`
	Size      int64         `json:"size"`
}

// manifest pushes an image manifest as repo:tag (by digest when tag is
// ""); layers alternate media types and digests.
func (s *store) manifest(repo, tag string, config digest.Digest, subject *digest.Digest, layers ...any) digest.Digest {
	s.t.Helper()
	m := struct {
		SchemaVersion int    `json:"schemaVersion"`
		MediaType     string `json:"mediaType"`
		Config        desc   `json:"config"`
		Layers        []desc `json:"layers"`
		Subject       *desc  `json:"subject,omitempty"`
	}{SchemaVersion: 2, MediaType: mtManifest, Config: desc{mtConfig, config, int64(len(s.blobs[config]))}}
	for i := 0; i < len(layers); i += 2 {
		d := layers[i+1].(digest.Digest)
		m.Layers = append(m.Layers, desc{layers[i].(string), d, int64(len(s.blobs[d]))})
	}
	if subject != nil {
		m.Subject = &desc{mtManifest, *subject, 1}
	}
	return s.push(repo, tag, mtManifest, m)
}

// index pushes an index naming children as repo:tag.
func (s *store) index(repo, tag string, children ...digest.Digest) digest.Digest {
	s.t.Helper()
	m := struct {
		SchemaVersion int    `json:"schemaVersion"`
		MediaType     string `json:"mediaType"`
		Manifests     []desc `json:"manifests"`
	}{SchemaVersion: 2, MediaType: mtIndex}
	for _, c := range children {
		m.Manifests = append(m.Manifests, desc{mtManifest, c, int64(len(s.blobs[c]))})
	}
	return s.push(repo, tag, mtIndex, m)
}

func (s *store) push(repo, tag, mt string, m any) digest.Digest {
	s.t.Helper()
	b, err := json.Marshal(m)
	if err != nil {
		s.t.Fatal(err)
	}
	d := digest.FromBytes(b)
	ref := tag
	if ref == "" {
		ref = d.String()
	}
	if _, err := s.reg.PutManifest(context.Background(), repo, ref, mt, b, nil); err != nil {
		s.t.Fatalf("push %s:%s: %v", repo, ref, err)
	}
	s.blobs[d] = b
	return d
}

func (s *store) put(p string, b []byte) {
	s.t.Helper()
	if err := s.d.PutContent(context.Background(), p, b); err != nil {
		s.t.Fatal(err)
	}
}

func (s *store) get(p string) []byte {
	s.t.Helper()
	b, err := s.d.GetContent(context.Background(), p)
	if err != nil {
		s.t.Fatal(err)
	}
	return b
}

func (s *store) exists(p string) bool {
	s.t.Helper()
	return drivertest.Exists(s.t, s.d, p)
}

func (s *store) remove(p string) {
	s.t.Helper()
	if _, err := s.d.DeleteFiles(context.Background(), []string{p}); err != nil {
		s.t.Fatal(err)
	}
}

// flip changes one byte in the middle of the file at p.
func (s *store) flip(p string) {
	s.t.Helper()
	b := s.get(p)
	b[len(b)/2] ^= 0x40
	s.put(p, b)
}

// loc is where the metadata store locates file d.
func (s *store) loc(d digest.Digest) meta.Location {
	s.t.Helper()
	infos, err := s.meta.Files(context.Background(), []digest.Digest{d})
	if err != nil {
		s.t.Fatal(err)
	}
	if infos[0].Location.IsZero() {
		s.t.Fatalf("file %s has no location", d)
	}
	return infos[0].Location
}

// frameKey is how want names the frame at loc: its pack's path @ offset.
func frameKey(loc meta.Location) string {
	return fmt.Sprintf("%s@%d", layout.Pack(loc.Pack), loc.Offset)
}

// flipFile flips one byte in the middle of file d's frame in its pack and
// returns the frame's key.
func (s *store) flipFile(d digest.Digest) string {
	s.t.Helper()
	loc := s.loc(d)
	p := layout.Pack(loc.Pack)
	b := s.get(p)
	b[loc.Offset+loc.Length/2] ^= 0x40
	s.put(p, b)
	return frameKey(loc)
}

// loseFile locates file d in a pack whose object was never written, as
// when storage lost it, and returns that frame's key.
func (s *store) loseFile(d digest.Digest) string {
	s.t.Helper()
	ctx := context.Background()
	id, err := pack.NewID()
	if err != nil {
		s.t.Fatal(err)
	}
	if err := s.meta.BeginPack(ctx, id); err != nil {
		s.t.Fatal(err)
	}
	placed, err := s.meta.PlaceFiles(ctx, id, 1<<20, []meta.Placement{{Digest: d, Offset: 8, Length: 100}})
	if err != nil || !placed[0] {
		s.t.Fatalf("placing %s in a lost pack: %v, %v", d, placed, err)
	}
	return frameKey(s.loc(d))
}

func filePath(t *testing.T, d digest.Digest) string {
	t.Helper()
	p, err := layer.FilePath(d)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

func revisionLink(repo string, d digest.Digest) string {
	return string(layout.AppendRevisionLink(nil, repo, string(d.Algorithm()), d.Encoded()))
}

func layerLink(repo string, d digest.Digest) string {
	return string(layout.AppendLayerLink(nil, repo, string(d.Algorithm()), d.Encoded()))
}

func referrerLinkPath(repo string, subject, d digest.Digest) string {
	return string(layout.AppendReferrerLink(nil, repo, string(subject.Algorithm()), subject.Encoded(), string(d.Algorithm()), d.Encoded()))
}

// scrub runs a scrub over d (s.d, or a driver over it) with the store's
// metadata store, every recipe rebuilt unless opts says otherwise.
func (s *store) scrub(d driver.Driver, opts Options) *Report {
	s.t.Helper()
	if opts.Meta == nil {
		opts.Meta = s.meta
	}
	return scrub(s.t, d, opts)
}

// scrub runs a scrub with every recipe rebuilt unless opts says otherwise,
// with the metadata store opts names (none by default).
func scrub(t *testing.T, d driver.Driver, opts Options) *Report {
	t.Helper()
	if opts.Recipes == "" {
		opts.Recipes = RecipesAll
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	rep, err := Run(ctx, d, opts)
	if err != nil {
		t.Fatalf("scrub: %v", err)
	}
	return rep
}

// want checks that rep holds exactly the findings described, as
// "kind path" pairs (path@offset for a file in a pack: frameKey), and
// returns them by that key.
func want(t *testing.T, rep *Report, findings ...string) map[string]Finding {
	t.Helper()
	got := make(map[string]Finding)
	var lines []string
	for _, f := range rep.Findings {
		k := string(f.Kind) + " " + f.Path
		if f.Offset != 0 {
			k += fmt.Sprintf("@%d", f.Offset)
		}
		got[k] = f
		lines = append(lines, fmt.Sprintf("%s %s ref=%s: %s [repaired=%v: %s]", k, f.Digest, f.Ref, f.Detail, f.Repaired, f.Repair))
	}
	ok := len(got) == len(findings) && len(rep.Findings) == len(findings)
	for _, w := range findings {
		if _, has := got[w]; !has {
			ok = false
		}
	}
	if !ok {
		t.Fatalf("findings:\n  %s\nwant:\n  %s", strings.Join(lines, "\n  "), strings.Join(findings, "\n  "))
	}
	return got
}

// wantOne checks that finding ("kind path") is rep's only one and returns
// it.
func wantOne(t *testing.T, rep *Report, finding string) Finding {
	t.Helper()
	return want(t, rep, finding)[finding]
}

// faultDriver fails reads of chosen paths, hides chosen paths from
// listings, and records deletes.
type faultDriver struct {
	driver.Driver
	mu      sync.Mutex
	failGet map[string]bool
	hide    map[string]bool
	deleted []string
	gets    map[string]int
}

func newFaultDriver(d driver.Driver) *faultDriver {
	return &faultDriver{Driver: d, failGet: map[string]bool{}, hide: map[string]bool{}, gets: map[string]int{}}
}

var errInjected = errors.New("injected storage failure")

func (f *faultDriver) GetContent(ctx context.Context, p string) ([]byte, error) {
	f.mu.Lock()
	fail := f.failGet[p]
	f.gets[p]++
	f.mu.Unlock()
	if fail {
		return nil, errInjected
	}
	return f.Driver.GetContent(ctx, p)
}

func (f *faultDriver) Reader(ctx context.Context, p string, off int64) (io.ReadCloser, error) {
	f.mu.Lock()
	fail := f.failGet[p]
	f.mu.Unlock()
	if fail {
		return nil, errInjected
	}
	return f.Driver.Reader(ctx, p, off)
}

func (f *faultDriver) Walk(ctx context.Context, p string, fn driver.WalkFn) error {
	return f.Driver.Walk(ctx, p, func(fi driver.FileInfo) error {
		f.mu.Lock()
		hidden := f.hide[fi.Path]
		f.mu.Unlock()
		if hidden {
			return nil
		}
		return fn(fi)
	})
}

func (f *faultDriver) Delete(ctx context.Context, p string) error {
	f.mu.Lock()
	f.deleted = append(f.deleted, p)
	f.mu.Unlock()
	return f.Driver.Delete(ctx, p)
}

func (f *faultDriver) DeleteFiles(ctx context.Context, paths []string) (int, error) {
	f.mu.Lock()
	f.deleted = append(f.deleted, paths...)
	f.mu.Unlock()
	return f.Driver.DeleteFiles(ctx, paths)
}

func newMemDriver() driver.Driver { return inmemory.New() }

// wantPulls rebuilds each deduplicated layer as a pull would, through the
// metadata store, and checks it is the blob pushed.
func (s *store) wantPulls(layers ...digest.Digest) {
	s.t.Helper()
	src := dedup.NewSource(s.d, s.ps, nil)
	for _, l := range layers {
		rc, err := src.OpenBlob(context.Background(), l, 0)
		if err != nil {
			s.t.Fatalf("layer %s: %v", l, err)
		}
		b, err := io.ReadAll(rc)
		rc.Close()
		if err != nil || !bytes.Equal(b, s.blobs[l]) {
			s.t.Errorf("layer %s: rebuilt %d bytes (%v), want the %d pushed", l, len(b), err, len(s.blobs[l]))
		}
	}
}
