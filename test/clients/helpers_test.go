package clients

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"encoding/json"
	"fmt"
	"io/fs"
	"math/rand/v2"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/opencontainers/go-digest"
	ocispec "github.com/opencontainers/image-spec/specs-go/v1"

	"github.com/cairn-registry/cairn/internal/testutil/cairnproc"
	"github.com/cairn-registry/cairn/internal/testutil/clitool"
	"github.com/cairn-registry/cairn/internal/testutil/layertest"
	"github.com/cairn-registry/cairn/internal/testutil/regtest"
)

// Docker schema2 media types (the OCI ones come from image-spec).
const (
	dockerManifest = "application/vnd.docker.distribution.manifest.v2+json"
	dockerList     = "application/vnd.docker.distribution.manifest.list.v2+json"
	dockerConfig   = "application/vnd.docker.container.image.v1+json"
	dockerLayer    = "application/vnd.docker.image.rootfs.diff.tar.gzip"
)

// clientTest is one client tool's test: the tool, a fresh server, the
// registry API beside it as a witness of what the tool stored, and a
// session of the tool's own.
type clientTest struct {
	tool string // the tool's path
	srv  *cairnproc.Server
	api  registryAPI
	env  *clitool.Session
}

// startClientTest finds the tool (skipping the test without it) and
// starts a server for it.
func startClientTest(t *testing.T, tool string) *clientTest {
	t.Helper()
	bin := clitool.Path(t, tool)
	srv := cairnproc.Start(t, "")
	return &clientTest{tool: bin, srv: srv, api: registryAPI{base: srv.URL}, env: clitool.NewSession(t)}
}

// runner returns a function that runs the tool with the arguments it is
// given between before and after (the tool's flags), and must succeed.
func (c *clientTest) runner(before []string, after ...string) func(t *testing.T, args ...string) []byte {
	return func(t *testing.T, args ...string) []byte {
		t.Helper()
		return c.env.Run(t, c.tool, slices.Concat(before, args, after)...)
	}
}

// testImage is a single-platform image built in memory: random gzip layers
// (tar archives of random files), a config naming their diff IDs, and a
// manifest in OCI or Docker schema2 media types.
type testImage struct {
	Manifest []byte
	Desc     ocispec.Descriptor // of Manifest
	Config   []byte
	Layers   [][]byte // compressed layer blobs, manifest order
	DiffIDs  []digest.Digest
}

// Digest is the manifest digest.
func (m *testImage) Digest() digest.Digest { return m.Desc.Digest }

// blobs returns every blob of the image (not the manifest) by digest.
func (m *testImage) blobs() map[digest.Digest][]byte {
	b := map[digest.Digest][]byte{digest.FromBytes(m.Config): m.Config}
	for _, l := range m.Layers {
		b[digest.FromBytes(l)] = l
	}
	return b
}

// newImage builds an image whose content is a function of seed. layerSizes
// gives the random payload bytes of each layer; docker selects Docker schema2
// media types instead of OCI ones.
func newImage(t *testing.T, seed uint64, docker bool, layerSizes ...int) *testImage {
	t.Helper()
	rng := rand.New(rand.NewChaCha8(seedBytes(seed)))
	img := &testImage{}
	manifestMT, configMT, layerMT := ocispec.MediaTypeImageManifest, ocispec.MediaTypeImageConfig, ocispec.MediaTypeImageLayerGzip
	if docker {
		manifestMT, configMT, layerMT = dockerManifest, dockerConfig, dockerLayer
	}
	var layerDescs []ocispec.Descriptor
	for i, size := range layerSizes {
		raw := randomTar(t, rng, fmt.Sprintf("layer%d", i), size)
		gz := layertest.Gzip(t, raw, gzip.DefaultCompression)
		img.Layers = append(img.Layers, gz)
		img.DiffIDs = append(img.DiffIDs, digest.FromBytes(raw))
		layerDescs = append(layerDescs, ocispec.Descriptor{MediaType: layerMT, Digest: digest.FromBytes(gz), Size: int64(len(gz))})
	}
	cfg := map[string]any{
		"architecture": "amd64",
		"os":           "linux",
		"created":      "2024-01-01T00:00:00Z",
		"config":       map[string]any{"Env": []string{"PATH=/usr/bin:/bin"}, "Labels": map[string]string{"cairn.test.seed": fmt.Sprint(seed)}},
		"rootfs":       map[string]any{"type": "layers", "diff_ids": img.DiffIDs},
	}
	img.Config = mustJSON(t, cfg)
	m := map[string]any{
		"schemaVersion": 2,
		"mediaType":     manifestMT,
		"config":        ocispec.Descriptor{MediaType: configMT, Digest: digest.FromBytes(img.Config), Size: int64(len(img.Config))},
		"layers":        layerDescs,
	}
	img.Manifest = mustJSON(t, m)
	img.Desc = ocispec.Descriptor{MediaType: manifestMT, Digest: digest.FromBytes(img.Manifest), Size: int64(len(img.Manifest))}
	return img
}

func seedBytes(seed uint64) [32]byte {
	var s [32]byte
	for i := range 8 {
		s[i] = byte(seed >> (8 * i))
	}
	return s
}

// randomTar returns an uncompressed tar with a directory and a few files of
// random bytes, size bytes of payload in total.
func randomTar(t *testing.T, rng *rand.Rand, dir string, size int) []byte {
	t.Helper()
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	mod := time.Date(2024, 1, 1, 0, 0, 0, 0, time.UTC)
	if err := tw.WriteHeader(&tar.Header{Typeflag: tar.TypeDir, Name: dir + "/", Mode: 0o755, ModTime: mod}); err != nil {
		t.Fatal(err)
	}
	files := 3
	for i := range files {
		n := size / files
		if i == files-1 {
			n = size - (files-1)*(size/files)
		}
		data := make([]byte, n)
		for j := range data {
			data[j] = byte(rng.Uint32())
		}
		hdr := &tar.Header{Typeflag: tar.TypeReg, Name: fmt.Sprintf("%s/file%d", dir, i), Mode: 0o644, Size: int64(n), ModTime: mod}
		if err := tw.WriteHeader(hdr); err != nil {
			t.Fatal(err)
		}
		if _, err := tw.Write(data); err != nil {
			t.Fatal(err)
		}
	}
	if err := tw.Close(); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

// newIndex builds an OCI image index over imgs, one platform per image.
func newIndex(t *testing.T, imgs ...*testImage) (raw []byte, desc ocispec.Descriptor) {
	t.Helper()
	archs := []string{"amd64", "arm64", "s390x", "ppc64le"}
	var ms []ocispec.Descriptor
	for i, img := range imgs {
		d := img.Desc
		d.Platform = &ocispec.Platform{OS: "linux", Architecture: archs[i%len(archs)]}
		ms = append(ms, d)
	}
	raw = mustJSON(t, map[string]any{"schemaVersion": 2, "mediaType": ocispec.MediaTypeImageIndex, "manifests": ms})
	return raw, ocispec.Descriptor{MediaType: ocispec.MediaTypeImageIndex, Digest: digest.FromBytes(raw), Size: int64(len(raw))}
}

func mustJSON(t *testing.T, v any) []byte {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// ociLayout writes OCI image layouts.
type ociLayout struct {
	t     *testing.T
	dir   string
	index []ocispec.Descriptor
}

func newLayout(t *testing.T, dir string) *ociLayout {
	t.Helper()
	if err := os.MkdirAll(filepath.Join(dir, "blobs", "sha256"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, ocispec.ImageLayoutFile), []byte(`{"imageLayoutVersion":"1.0.0"}`), 0o644); err != nil {
		t.Fatal(err)
	}
	l := &ociLayout{t: t, dir: dir}
	l.writeIndex()
	return l
}

func (l *ociLayout) blob(b []byte) {
	l.t.Helper()
	d := digest.FromBytes(b)
	if err := os.WriteFile(filepath.Join(l.dir, "blobs", d.Algorithm().String(), d.Encoded()), b, 0o644); err != nil {
		l.t.Fatal(err)
	}
}

// addImage stores img's blobs and manifest and names it tag in index.json.
func (l *ociLayout) addImage(img *testImage, tag string) {
	l.t.Helper()
	for _, b := range img.blobs() {
		l.blob(b)
	}
	l.blob(img.Manifest)
	l.tag(img.Desc, tag)
}

// addIndex stores the images, the index over them, and names the index tag.
func (l *ociLayout) addIndex(raw []byte, desc ocispec.Descriptor, tag string, imgs ...*testImage) {
	l.t.Helper()
	for _, img := range imgs {
		for _, b := range img.blobs() {
			l.blob(b)
		}
		l.blob(img.Manifest)
	}
	l.blob(raw)
	l.tag(desc, tag)
}

func (l *ociLayout) tag(d ocispec.Descriptor, tag string) {
	l.t.Helper()
	d.Annotations = map[string]string{ocispec.AnnotationRefName: tag}
	l.index = append(l.index, d)
	l.writeIndex()
}

func (l *ociLayout) writeIndex() {
	l.t.Helper()
	ms := l.index
	if ms == nil {
		ms = []ocispec.Descriptor{}
	}
	idx := mustJSON(l.t, map[string]any{"schemaVersion": 2, "mediaType": ocispec.MediaTypeImageIndex, "manifests": ms})
	if err := os.WriteFile(filepath.Join(l.dir, ocispec.ImageIndexFile), idx, 0o644); err != nil {
		l.t.Fatal(err)
	}
}

// imageAndIndex writes a layout holding img tagged v1 and an index of amd
// and arm tagged multi, and returns its directory and the index.
func imageAndIndex(t *testing.T, img, amd, arm *testImage) (dir string, idxRaw []byte, idxDesc ocispec.Descriptor) {
	t.Helper()
	idxRaw, idxDesc = newIndex(t, amd, arm)
	l := newLayout(t, filepath.Join(t.TempDir(), "src"))
	l.addImage(img, "v1")
	l.addIndex(idxRaw, idxDesc, "multi", amd, arm)
	return l.dir, idxRaw, idxDesc
}

// tarDir writes the contents of dir as a tar archive (an oci-archive when dir
// is an OCI layout) to path.
func tarDir(t *testing.T, dir, path string) {
	t.Helper()
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	tw := tar.NewWriter(f)
	if err := tw.AddFS(os.DirFS(dir)); err != nil {
		t.Fatal(err)
	}
	if err := tw.Close(); err != nil {
		t.Fatal(err)
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
}

// manifestRefs is the union of the fields of image manifests and indexes
// (OCI and Docker) that reference other content.
type manifestRefs struct {
	MediaType    string               `json:"mediaType"`
	ArtifactType string               `json:"artifactType"`
	Config       *ocispec.Descriptor  `json:"config"`
	Layers       []ocispec.Descriptor `json:"layers"`
	Manifests    []ocispec.Descriptor `json:"manifests"`
	Subject      *ocispec.Descriptor  `json:"subject"`
}

func parseManifest(t *testing.T, raw []byte) manifestRefs {
	t.Helper()
	var m manifestRefs
	if err := json.Unmarshal(raw, &m); err != nil {
		t.Fatalf("parse manifest: %v\n%s", err, raw)
	}
	return m
}

// checkLayout asserts that the OCI layout in dir lists a manifest with digest
// want in index.json, and that every manifest and blob reachable from it is
// present and hashes to its digest and size. It returns the manifest bytes.
func checkLayout(t *testing.T, dir string, want digest.Digest) []byte {
	t.Helper()
	idxRaw, err := os.ReadFile(filepath.Join(dir, ocispec.ImageIndexFile))
	if err != nil {
		t.Fatalf("layout %s: %v", dir, err)
	}
	idx := parseManifest(t, idxRaw)
	var found *ocispec.Descriptor
	for i := range idx.Manifests {
		if idx.Manifests[i].Digest == want {
			found = &idx.Manifests[i]
		}
	}
	if found == nil {
		t.Fatalf("layout %s: index.json does not list %s:\n%s", dir, want, idxRaw)
	}
	read := func(d ocispec.Descriptor) []byte {
		b, err := os.ReadFile(filepath.Join(dir, "blobs", d.Digest.Algorithm().String(), d.Digest.Encoded()))
		if err != nil {
			t.Fatalf("layout %s: blob %s: %v", dir, d.Digest, err)
		}
		return b
	}
	walkManifest(t, *found, read, read)
	return read(*found)
}

// walkManifest reads the manifest d with readManifest and everything it
// references (child manifests with readManifest, config and layers with
// readBlob), checking each against its descriptor's digest and size.
func walkManifest(t *testing.T, d ocispec.Descriptor, readManifest, readBlob func(ocispec.Descriptor) []byte) {
	t.Helper()
	raw := readManifest(d)
	checkBytes(t, d, raw)
	m := parseManifest(t, raw)
	if d.MediaType != "" && m.MediaType != "" && d.MediaType != m.MediaType {
		t.Errorf("manifest %s: descriptor media type %q, manifest says %q", d.Digest, d.MediaType, m.MediaType)
	}
	for _, c := range m.Manifests {
		walkManifest(t, c, readManifest, readBlob)
	}
	if m.Config != nil {
		checkBytes(t, *m.Config, readBlob(*m.Config))
	}
	for _, l := range m.Layers {
		checkBytes(t, l, readBlob(l))
	}
}

func checkBytes(t *testing.T, d ocispec.Descriptor, b []byte) {
	t.Helper()
	if got := d.Digest.Algorithm().FromBytes(b); got != d.Digest {
		t.Errorf("content of %s hashes to %s", d.Digest, got)
	}
	if int64(len(b)) != d.Size {
		t.Errorf("content of %s: %d bytes, descriptor says %d", d.Digest, len(b), d.Size)
	}
}

// registryAPI talks plain HTTP to the server under test, as an independent
// witness of what the clients stored.
type registryAPI struct {
	base string // http://host:port
}

// get GETs path with headers given as key, value pairs.
func (r registryAPI) get(t *testing.T, path string, hdr ...string) regtest.Response {
	t.Helper()
	return regtest.Do(t, http.DefaultClient, http.MethodGet, r.base+path, nil, hdr...)
}

// manifest fetches repo's manifest ref and checks status, digest header and,
// when want is set, the digest of the body.
func (r registryAPI) manifest(t *testing.T, repo, ref string, want digest.Digest) (raw []byte, mediaType string) {
	t.Helper()
	resp := r.get(t, "/v2/"+repo+"/manifests/"+ref, "Accept", regtest.ManifestAccept)
	b := resp.Body
	if resp.Status != http.StatusOK {
		t.Fatalf("GET manifest %s:%s: status %d: %s", repo, ref, resp.Status, b)
	}
	got := digest.FromBytes(b)
	if want != "" && got != want {
		t.Fatalf("GET manifest %s:%s: body hashes to %s, want %s", repo, ref, got, want)
	}
	if h := resp.Header.Get("Docker-Content-Digest"); h != "" && h != got.String() {
		t.Errorf("GET manifest %s:%s: Docker-Content-Digest %s, body hashes to %s", repo, ref, h, got)
	}
	mt := resp.Header.Get("Content-Type")
	if m := parseManifest(t, b); m.MediaType != "" && m.MediaType != mt {
		t.Errorf("GET manifest %s:%s: Content-Type %q, manifest mediaType %q", repo, ref, mt, m.MediaType)
	}
	return b, mt
}

// checkImage asserts the registry serves manifest ref of repo with digest
// want, and every manifest and blob it references, byte-exact. It returns the
// manifest bytes and media type.
func (r registryAPI) checkImage(t *testing.T, repo, ref string, want digest.Digest) ([]byte, string) {
	t.Helper()
	raw, mt := r.manifest(t, repo, ref, want)
	readManifest := func(d ocispec.Descriptor) []byte {
		t.Helper()
		if d.Digest == want {
			return raw
		}
		b, _ := r.manifest(t, repo, d.Digest.String(), d.Digest)
		return b
	}
	readBlob := func(d ocispec.Descriptor) []byte {
		t.Helper()
		resp := r.get(t, "/v2/"+repo+"/blobs/"+d.Digest.String())
		if resp.Status != http.StatusOK {
			t.Fatalf("GET blob %s@%s: status %d: %s", repo, d.Digest, resp.Status, resp.Body)
		}
		return resp.Body
	}
	walkManifest(t, ocispec.Descriptor{MediaType: mt, Digest: want, Size: int64(len(raw))}, readManifest, readBlob)
	return raw, mt
}

// tags returns the tag list of repo.
func (r registryAPI) tags(t *testing.T, repo string) []string {
	t.Helper()
	resp := r.get(t, "/v2/"+repo+"/tags/list")
	b := resp.Body
	if resp.Status != http.StatusOK {
		t.Fatalf("GET tags of %s: status %d: %s", repo, resp.Status, b)
	}
	var tl struct {
		Tags []string `json:"tags"`
	}
	if err := json.Unmarshal(b, &tl); err != nil {
		t.Fatalf("tags of %s: %v\n%s", repo, err, b)
	}
	return tl.Tags
}

// lines splits command output into trimmed, non-empty lines.
func lines(b []byte) []string {
	var out []string
	for l := range strings.SplitSeq(string(b), "\n") {
		if l = strings.TrimSpace(l); l != "" {
			out = append(out, l)
		}
	}
	return out
}

// wantSet fails unless got contains every string of want.
func wantSet(t *testing.T, what string, got []string, want ...string) {
	t.Helper()
	for _, w := range want {
		if !slices.Contains(got, w) {
			t.Errorf("%s: %q missing from %q", what, w, got)
		}
	}
}

// compareFiles fails unless every file in want exists in dir with the same bytes.
func compareFiles(t *testing.T, dir string, want map[string][]byte) {
	t.Helper()
	for name, w := range want {
		got, err := os.ReadFile(filepath.Join(dir, name))
		if err != nil {
			t.Errorf("pulled file %s: %v", name, err)
			continue
		}
		if !bytes.Equal(got, w) {
			t.Errorf("pulled file %s: %d bytes (sha256 %s), want %d bytes (sha256 %s)",
				name, len(got), digest.FromBytes(got), len(w), digest.FromBytes(w))
		}
	}
}

// listFiles returns the regular files under dir, relative, sorted.
func listFiles(t *testing.T, dir string) []string {
	t.Helper()
	var out []string
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.Type().IsRegular() {
			rel, _ := filepath.Rel(dir, p)
			out = append(out, rel)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	slices.Sort(out)
	return out
}
