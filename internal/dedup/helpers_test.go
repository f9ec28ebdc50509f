package dedup

import (
	"archive/tar"
	"bytes"
	stdgzip "compress/gzip"
	"context"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"math/rand/v2"
	"path/filepath"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/klauspost/compress/zstd"
	"github.com/opencontainers/go-digest"

	"github.com/cairn-registry/cairn/internal/dedup/pack"
	"github.com/cairn-registry/cairn/internal/layout"
	"github.com/cairn-registry/cairn/internal/manifest"
	"github.com/cairn-registry/cairn/internal/meta"
	"github.com/cairn-registry/cairn/internal/meta/bolt"
	"github.com/cairn-registry/cairn/internal/storage/driver"
	"github.com/cairn-registry/cairn/internal/storage/driver/filesystem"
	"github.com/cairn-registry/cairn/internal/storage/driver/inmemory"
	"github.com/cairn-registry/cairn/internal/testutil/layertest"
)

// Layer media types used by the tests.
const (
	mtOCIGzip    = layertest.OCIGzip
	mtOCIZstd    = layertest.OCIZstd
	mtOCITar     = layertest.OCITar
	mtDockerGzip = layertest.DockerGzip
	mtDockerTar  = layertest.DockerTar
	mtDockerZstd = layertest.DockerZstd
)

func fileBody(seed uint64, n int) []byte { return layertest.Body(seed, n) }

// tfile is one regular file of a test layer.
type tfile struct {
	name string
	body []byte
}

// sharedFiles are held by every layer sharedLayer builds.
func sharedFiles() []tfile {
	var fs []tfile
	for i := range 4 {
		fs = append(fs, tfile{fmt.Sprintf("usr/lib/libshared%d.so", i), fileBody(uint64(1000+i), 12_000+i*3_000)})
	}
	return fs
}

// ownFiles are unique to variant.
func ownFiles(variant int) []tfile {
	var fs []tfile
	for i := range 2 {
		seed := uint64(100*variant + i)
		fs = append(fs, tfile{fmt.Sprintf("app/v%d/data%d", variant, i), fileBody(seed, 5_000+i*4_000)})
	}
	return fs
}

// buildTar writes a tar with directories, the given files, an empty file,
// a symlink and a hard link (members without payloads) around them.
func buildTar(t testing.TB, files []tfile) []byte {
	t.Helper()
	w := layertest.NewWriter(t, tar.FormatPAX, time.Date(2025, 3, 1, 8, 0, 0, 0, time.UTC))
	for _, dir := range []string{"usr/", "usr/lib/", "app/", "etc/"} {
		w.Add(&tar.Header{Typeflag: tar.TypeDir, Name: dir, Mode: 0o755}, nil)
	}
	for _, f := range files {
		w.Add(&tar.Header{Typeflag: tar.TypeReg, Name: f.name, Mode: 0o644, Size: int64(len(f.body)), Uname: "root", Gname: "root"}, f.body)
	}
	w.Add(&tar.Header{Typeflag: tar.TypeReg, Name: "etc/empty", Mode: 0o644}, nil)
	w.Add(&tar.Header{Typeflag: tar.TypeSymlink, Name: "etc/link", Linkname: "../usr/lib"}, nil)
	if len(files) > 0 {
		w.Add(&tar.Header{Typeflag: tar.TypeLink, Name: "etc/hard", Linkname: files[0].name}, nil)
	}
	return w.Close()
}

// variantFiles is a layer's files: the shared ones, then its own.
func variantFiles(variant int) []tfile { return append(sharedFiles(), ownFiles(variant)...) }

// payloadDigests is the sorted distinct digests of the non-empty files: the
// file list dedup records for a layer holding them.
func payloadDigests(files []tfile) []digest.Digest {
	var out []digest.Digest
	for _, f := range files {
		if len(f.body) == 0 {
			continue
		}
		d := digest.FromBytes(f.body)
		if !slices.Contains(out, d) {
			out = append(out, d)
		}
	}
	slices.Sort(out)
	return out
}

func gzipStd(t testing.TB, raw []byte) []byte {
	return layertest.Gzip(t, raw, stdgzip.DefaultCompression)
}

func zstdKlaus(t testing.TB, raw []byte) []byte { return layertest.Zstd(t, raw, zstd.SpeedDefault) }

func gnuGzip(t testing.TB, raw []byte) []byte { return layertest.GNUGzip(t, raw) }

// tlayer is one layer blob and the files it holds.
type tlayer struct {
	name      string
	mediaType string
	files     []tfile
	blob      []byte
}

func (l tlayer) digest() digest.Digest { return digest.FromBytes(l.blob) }

// sharedLayers returns a gzip, a zstd and a plain tar layer; each holds the
// shared files and two of its own.
func sharedLayers(t testing.TB) []tlayer {
	t.Helper()
	f1, f2, f3 := variantFiles(1), variantFiles(2), variantFiles(3)
	return []tlayer{
		{"gzip", mtOCIGzip, f1, gzipStd(t, buildTar(t, f1))},
		{"zstd", mtOCIZstd, f2, zstdKlaus(t, buildTar(t, f2))},
		{"tar", mtOCITar, f3, buildTar(t, f3)},
	}
}

// fakeMetrics counts what the engine reports.
type fakeMetrics struct {
	mu        sync.Mutex
	lookups   map[string]int // "<cache>/hit" and "<cache>/miss"
	predicted map[string]int
	processed map[string]int
	failed    map[string]int
	saved     int64
}

func newFakeMetrics() *fakeMetrics {
	return &fakeMetrics{lookups: map[string]int{}, predicted: map[string]int{}, processed: map[string]int{}, failed: map[string]int{}}
}

func (m *fakeMetrics) CacheLookup(cache string, hit bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if hit {
		m.lookups[cache+"/hit"]++
	} else {
		m.lookups[cache+"/miss"]++
	}
}

func (m *fakeMetrics) SetDedupSavedBytes(n int64) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.saved = n
}

func (m *fakeMetrics) DedupPredicted(cache string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.predicted[cache]++
}

func (m *fakeMetrics) DedupProcessed(outcome string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.processed[outcome]++
}

func (m *fakeMetrics) DedupRebuildFailed(reason string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.failed[reason]++
}

// failures returns the rebuild failures counted for reason.
func (m *fakeMetrics) failures(reason string) int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.failed[reason]
}

func (m *fakeMetrics) lookup(key string) int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.lookups[key]
}

// snapshot copies the lookup counts.
func (m *fakeMetrics) snapshot() map[string]int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return maps.Clone(m.lookups)
}

func (m *fakeMetrics) predictions(cache string) int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.predicted[cache]
}

// env is an engine over a driver and a bolt store in a temp directory.
type env struct {
	t     *testing.T
	d     driver.Driver
	store *bolt.Store
	eng   *Engine
	m     *fakeMetrics
}

func newEnv(t *testing.T, d driver.Driver, opts Options) *env {
	t.Helper()
	if d == nil {
		d = inmemory.New()
	}
	store, err := bolt.OpenWith(filepath.Join(t.TempDir(), "meta.db"), bolt.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if opts.TempDir == "" {
		opts.TempDir = t.TempDir()
	}
	m := newFakeMetrics()
	eng, err := New(d, store, opts, nil, m)
	if err != nil {
		store.Close()
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := eng.Close(); err != nil {
			t.Errorf("engine close: %v", err)
		}
		store.Close()
	})
	return &env{t: t, d: d, store: store, eng: eng, m: m}
}

// drivers are the storage drivers the mode tests run over.
func drivers(t *testing.T) map[string]func() driver.Driver {
	return map[string]func() driver.Driver{
		"inmemory": func() driver.Driver { return inmemory.New() },
		"filesystem": func() driver.Driver {
			d, err := filesystem.New(t.TempDir())
			if err != nil {
				t.Fatal(err)
			}
			return d
		},
	}
}

// put stores blob as intact data and returns its digest.
func (v *env) put(blob []byte) digest.Digest {
	v.t.Helper()
	d := digest.FromBytes(blob)
	if err := v.d.PutContent(context.Background(), layout.BlobData(d), blob); err != nil {
		v.t.Fatal(err)
	}
	return d
}

func (v *env) exists(p string) bool {
	v.t.Helper()
	_, err := v.d.Stat(context.Background(), p)
	if err != nil && !errors.Is(err, driver.ErrNotFound) {
		v.t.Fatalf("stat %s: %v", p, err)
	}
	return err == nil
}

func (v *env) hasData(l digest.Digest) bool   { return v.exists(layout.BlobData(l)) }
func (v *env) hasRecipe(l digest.Digest) bool { return v.exists(layout.BlobRecipe(l)) }

// state returns l's summary and state (0: unknown).
func (v *env) state(l digest.Digest) (summary, meta.LayerState) {
	v.t.Helper()
	sum, st, err := v.eng.Worker.layerState(context.Background(), l)
	if err != nil {
		v.t.Fatal(err)
	}
	return sum, st
}

func (v *env) wantState(l digest.Digest, want meta.LayerState) {
	v.t.Helper()
	if _, st := v.state(l); st != want {
		v.t.Fatalf("layer %s: state %v, want %v", l.Encoded()[:12], st, want)
	}
}

// process runs Process and fails the test on an error or another outcome.
func (v *env) process(l digest.Digest, mode Mode, want outcome) {
	v.t.Helper()
	got, err := v.eng.Process(v.t.Context(), l, mode)
	if err != nil {
		v.t.Fatalf("Process(%s, %s): %v", l.Encoded()[:12], mode, err)
	}
	if got != want {
		v.t.Fatalf("Process(%s, %s) = %q, want %q", l.Encoded()[:12], mode, got, want)
	}
}

// read reads blob l through OpenBlob from offset.
func (v *env) read(l digest.Digest, offset int64) ([]byte, error) {
	rc, err := v.eng.OpenBlob(v.t.Context(), l, offset)
	if err != nil {
		return nil, err
	}
	defer rc.Close()
	return io.ReadAll(rc)
}

// wantBlob checks that OpenBlob and BlobSize serve exactly blob.
func (v *env) wantBlob(blob []byte) {
	v.t.Helper()
	l := digest.FromBytes(blob)
	size, err := v.eng.BlobSize(context.Background(), l)
	if err != nil || size != int64(len(blob)) {
		v.t.Fatalf("BlobSize(%s) = %d, %v; want %d", l.Encoded()[:12], size, err, len(blob))
	}
	got, err := v.read(l, 0)
	if err != nil {
		v.t.Fatalf("OpenBlob(%s): %v", l.Encoded()[:12], err)
	}
	if !bytes.Equal(got, blob) {
		v.t.Fatalf("OpenBlob(%s): %d bytes (%s), want %d (%s)", l.Encoded()[:12], len(got), digest.FromBytes(got), len(blob), l)
	}
}

// wantData checks the intact data of blob is stored byte for byte.
func (v *env) wantData(blob []byte) {
	v.t.Helper()
	l := digest.FromBytes(blob)
	got, err := v.d.GetContent(context.Background(), layout.BlobData(l))
	if err != nil {
		v.t.Fatalf("intact data of %s: %v", l.Encoded()[:12], err)
	}
	if !bytes.Equal(got, blob) {
		v.t.Fatalf("intact data of %s: %d bytes, want %d", l.Encoded()[:12], len(got), len(blob))
	}
}

// stored reports whether file d's bytes are stored: located in a pack
// whose object exists, or an object of its own (stores before packs).
func (v *env) stored(d digest.Digest) bool {
	v.t.Helper()
	infos, err := v.store.Files(context.Background(), []digest.Digest{d})
	if err != nil {
		v.t.Fatal(err)
	}
	if loc := infos[0].Location; !loc.IsZero() {
		return v.exists(layout.Pack(loc.Pack))
	}
	return v.exists(layout.File(d))
}

// loseFile makes file d's stored bytes unreadable, as damage or a GC
// racing a revive would: it is located in a recorded pack whose object
// was never written.
func (v *env) loseFile(d digest.Digest) {
	v.t.Helper()
	ctx := context.Background()
	id, err := pack.NewID()
	if err != nil {
		v.t.Fatal(err)
	}
	if err := v.store.BeginPack(ctx, id); err != nil {
		v.t.Fatal(err)
	}
	placed, err := v.store.PlaceFiles(ctx, id, 1<<20, []meta.Placement{{Digest: d, Offset: 8, Length: 100}})
	if err != nil || !placed[0] {
		v.t.Fatalf("placing %s in a lost pack: %v, %v", d, placed, err)
	}
}

// replaceFile stores content under file digest d, in a pack of its own:
// other bytes than d's when content is not d's.
func (v *env) replaceFile(d digest.Digest, content []byte) {
	v.t.Helper()
	ctx := context.Background()
	w := v.eng.files.NewWriter(0)
	if err := w.Put(ctx, d, int64(len(content)), bytes.NewReader(content)); err != nil {
		v.t.Fatal(err)
	}
	if err := w.Flush(ctx); err != nil {
		v.t.Fatal(err)
	}
}

// flipFileByte flips one bit in the middle of file d's stored bytes.
func (v *env) flipFileByte(d digest.Digest) {
	v.t.Helper()
	ctx := context.Background()
	infos, err := v.store.Files(ctx, []digest.Digest{d})
	if err != nil {
		v.t.Fatal(err)
	}
	loc := infos[0].Location
	p, mid := layout.Pack(loc.Pack), loc.Offset+loc.Length/2
	if loc.IsZero() {
		p, mid = layout.File(d), -1
	}
	b, err := v.d.GetContent(ctx, p)
	if err != nil {
		v.t.Fatal(err)
	}
	if mid < 0 {
		mid = int64(len(b) / 2)
	}
	b[mid] ^= 0x01
	if err := v.d.PutContent(ctx, p, b); err != nil {
		v.t.Fatal(err)
	}
}

// gcMarker writes a fresh GC run marker and returns its path.
func (v *env) gcMarker() string {
	v.t.Helper()
	var rnd [6]byte
	for i := range rnd {
		rnd[i] = byte(rand.Uint32())
	}
	p := layout.GCActiveDir + "/" + layout.GCRunPrefix + hex.EncodeToString(rnd[:])
	if err := v.d.PutContent(context.Background(), p, []byte(`{"id":"test"}`)); err != nil {
		v.t.Fatal(err)
	}
	return p
}

// eventually polls cond until it holds. It sets no deadline of its own: a
// busy machine is slow, not wrong. A wait that never ends is stopped by the
// test binary's -timeout; shortly before that, this fails naming what it
// waited for.
func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline, ok := t.Deadline()
	for !cond() {
		if ok && time.Until(deadline) < hangMargin {
			t.Fatalf("still waiting for %s as the test binary's -timeout nears", what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// hangMargin is how long before the test binary's -timeout a wait gives up
// with a message, rather than let the binary panic with every stack.
const hangMargin = 10 * time.Second

// imageManifest returns an image manifest naming config and layers.
func imageManifest(t testing.TB, docker bool, config digest.Digest, layers []tlayer) []byte {
	t.Helper()
	type desc struct {
		MediaType string        `json:"mediaType"`
		Digest    digest.Digest `json:"digest"`
		Size      int64         `json:"size"`
	}
	m := struct {
		SchemaVersion int    `json:"schemaVersion"`
		MediaType     string `json:"mediaType"`
		Config        desc   `json:"config"`
		Layers        []desc `json:"layers"`
	}{SchemaVersion: 2, MediaType: "application/vnd.oci.image.manifest.v1+json",
		Config: desc{"application/vnd.oci.image.config.v1+json", config, 2}}
	if docker {
		m.MediaType = "application/vnd.docker.distribution.manifest.v2+json"
		m.Config.MediaType = "application/vnd.docker.container.image.v1+json"
	}
	for _, l := range layers {
		m.Layers = append(m.Layers, desc{l.mediaType, l.digest(), int64(len(l.blob))})
	}
	b, err := json.Marshal(m)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// parsed parses manifest content as the registry hands it to the engine.
func parsed(t testing.TB, d digest.Digest, content []byte) *manifest.Manifest {
	t.Helper()
	m, err := manifest.Parse(d, content)
	if err != nil {
		t.Fatal(err)
	}
	return m
}
