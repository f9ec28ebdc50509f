package gc

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/json"
	"errors"
	"slices"
	"strings"
	"testing"

	"github.com/opencontainers/go-digest"
	ocispec "github.com/opencontainers/image-spec/specs-go/v1"

	"github.com/cairn-registry/cairn/internal/layout"
	"github.com/cairn-registry/cairn/internal/manifest"
	"github.com/cairn-registry/cairn/internal/registry"
	"github.com/cairn-registry/cairn/internal/storage/driver"
	"github.com/cairn-registry/cairn/internal/storage/driver/inmemory"
	"github.com/cairn-registry/cairn/internal/testutil/drivertest"
)

// fixture is a registry over a driver, filled through the registry's own
// API, as a server would.
type fixture struct {
	t   *testing.T
	d   driver.Driver
	reg *registry.Registry
}

func newFixture(t *testing.T) *fixture {
	return newFixtureOn(t, inmemory.New())
}

func newFixtureOn(t *testing.T, d driver.Driver) *fixture {
	return &fixture{t: t, d: d, reg: registry.New(d, registry.Options{DeleteEnabled: true})}
}

func randData(t *testing.T, n int) []byte {
	b := make([]byte, n)
	if _, err := rand.Read(b); err != nil {
		t.Fatal(err)
	}
	return b
}

// blob uploads data to repo and returns its descriptor.
func (f *fixture) blob(repo string, data []byte, mt string) ocispec.Descriptor {
	f.t.Helper()
	return f.blobAlg(repo, data, mt, digest.SHA256)
}

func (f *fixture) blobAlg(repo string, data []byte, mt string, alg digest.Algorithm) ocispec.Descriptor {
	f.t.Helper()
	ctx := context.Background()
	id, err := f.reg.StartUpload(ctx, repo)
	if err != nil {
		f.t.Fatal(err)
	}
	d := alg.FromBytes(data)
	if _, err := f.reg.FinishUpload(ctx, repo, id, d, bytes.NewReader(data), 0); err != nil {
		f.t.Fatalf("upload %s: %v", d, err)
	}
	return ocispec.Descriptor{MediaType: mt, Digest: d, Size: int64(len(data))}
}

// image pushes a config and layers and returns an image manifest (not yet
// pushed) naming them; extra options set subject or artifact type.
func (f *fixture) image(repo string, layers ...ocispec.Descriptor) []byte {
	f.t.Helper()
	cfg := f.blob(repo, randData(f.t, 64), ocispec.MediaTypeImageConfig)
	return f.manifestJSON(cfg, layers, nil)
}

func (f *fixture) manifestJSON(cfg ocispec.Descriptor, layers []ocispec.Descriptor, subject *ocispec.Descriptor) []byte {
	f.t.Helper()
	if layers == nil {
		layers = []ocispec.Descriptor{}
	}
	m := ocispec.Manifest{MediaType: ocispec.MediaTypeImageManifest, Config: cfg, Layers: layers, Subject: subject}
	m.SchemaVersion = 2
	b, err := json.Marshal(m)
	if err != nil {
		f.t.Fatal(err)
	}
	return b
}

func (f *fixture) layer(repo string) ocispec.Descriptor {
	return f.blob(repo, randData(f.t, 256), ocispec.MediaTypeImageLayerGzip)
}

// put pushes a manifest under ref (a tag or "" for its digest).
func (f *fixture) put(repo, ref string, content []byte) ocispec.Descriptor {
	f.t.Helper()
	d := digest.FromBytes(content)
	if ref == "" {
		ref = d.String()
	}
	var m struct {
		MediaType string `json:"mediaType"`
	}
	_ = json.Unmarshal(content, &m)
	if _, err := f.reg.PutManifest(context.Background(), repo, ref, m.MediaType, content, nil); err != nil {
		f.t.Fatalf("put manifest %s:%s: %v", repo, ref, err)
	}
	return ocispec.Descriptor{MediaType: m.MediaType, Digest: d, Size: int64(len(content))}
}

func (f *fixture) index(children ...ocispec.Descriptor) []byte {
	f.t.Helper()
	idx := ocispec.Index{MediaType: ocispec.MediaTypeImageIndex, Manifests: children}
	idx.SchemaVersion = 2
	b, err := json.Marshal(idx)
	if err != nil {
		f.t.Fatal(err)
	}
	return b
}

// artifact returns a referrer manifest of subject.
func (f *fixture) artifact(repo string, subject ocispec.Descriptor) []byte {
	f.t.Helper()
	cfg := f.blob(repo, []byte("{}"), "application/vnd.example.sig.config+json")
	return f.manifestJSON(cfg, []ocispec.Descriptor{f.layer(repo)}, &subject)
}

func (f *fixture) gc(opts Options) *Report {
	f.t.Helper()
	rep, err := Run(context.Background(), f.d, opts)
	if err != nil {
		f.t.Fatalf("gc: %v", err)
	}
	return rep
}

func (f *fixture) exists(p string) bool {
	f.t.Helper()
	return drivertest.Exists(f.t, f.d, p)
}

func (f *fixture) hasBlob(d digest.Digest) bool { return f.exists(layout.BlobData(d)) }

func (f *fixture) hasRevision(repo string, d digest.Digest) bool {
	return f.exists(string(layout.AppendRevisionLink(nil, repo, string(d.Algorithm()), d.Encoded())))
}

func (f *fixture) hasLayerLink(repo string, d digest.Digest) bool {
	return f.exists(string(layout.AppendLayerLink(nil, repo, string(d.Algorithm()), d.Encoded())))
}

func (f *fixture) hasTagIndex(repo, tag string, d digest.Digest) bool {
	return f.exists(string(layout.AppendTagIndexLink(nil, repo, tag, string(d.Algorithm()), d.Encoded())))
}

// files lists every file below dir.
func (f *fixture) files(dir string) []string {
	f.t.Helper()
	var out []string
	err := f.d.Walk(context.Background(), dir, func(fi driver.FileInfo) error {
		if !fi.IsDir {
			out = append(out, fi.Path)
		}
		return nil
	})
	if err != nil && !errors.Is(err, driver.ErrNotFound) {
		f.t.Fatal(err)
	}
	return out
}

// blobs returns the digests stored in blobs/.
func (f *fixture) blobs() []digest.Digest {
	var out []digest.Digest
	for _, p := range f.files(layout.BlobsDir) {
		alg, hex, ok := layout.ParseBlobDataPath(p)
		if !ok {
			f.t.Fatalf("stray file %s", p)
		}
		out = append(out, digest.Digest(alg+":"+hex))
	}
	slices.Sort(out)
	return out
}

// pull reads ref back and every blob it names, through the registry.
func (f *fixture) pull(repo, ref string) {
	f.t.Helper()
	ctx := context.Background()
	m, err := f.reg.GetManifest(ctx, repo, ref)
	if err != nil {
		f.t.Fatalf("pull %s:%s: %v", repo, ref, err)
	}
	refs, _, err := manifest.ParseRefs(m.Content)
	if err != nil {
		f.t.Fatal(err)
	}
	for _, d := range refs.Blobs {
		if _, err := f.reg.StatBlob(ctx, repo, d); err != nil {
			f.t.Errorf("pull %s:%s: blob %s: %v", repo, ref, d, err)
		}
	}
	for _, d := range refs.Manifests {
		f.pull(repo, d.String())
	}
}

func sortedDigests(ds ...digest.Digest) []digest.Digest {
	out := slices.Clone(ds)
	slices.Sort(out)
	return slices.Compact(out)
}

func joinDigests(ds []digest.Digest) string {
	s := make([]string, len(ds))
	for i, d := range ds {
		s[i] = d.Encoded()[:12]
	}
	return strings.Join(s, " ")
}
