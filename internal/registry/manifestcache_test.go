package registry

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/opencontainers/go-digest"
	ocispec "github.com/opencontainers/image-spec/specs-go/v1"

	"github.com/cairn-registry/cairn/internal/storage/driver/inmemory"
)

// sparseManifest returns an image manifest whose blobs need not exist
// (the registries below accept sparse manifests); n makes it unique.
func sparseManifest(n int) []byte {
	d := digest.FromString(fmt.Sprint("config ", n))
	return fmt.Appendf(nil, `{"schemaVersion":2,"mediaType":%q,"config":{"mediaType":"application/vnd.oci.image.config.v1+json","digest":%q,"size":%d},"layers":[]}`,
		ocispec.MediaTypeImageManifest, d, 10+n)
}

func pushManifest(t *testing.T, r *Registry, repo, ref string, content []byte) digest.Digest {
	t.Helper()
	res, err := r.PutManifest(context.Background(), repo, ref, ocispec.MediaTypeImageManifest, content, nil)
	if err != nil {
		t.Fatal(err)
	}
	return res.Digest
}

func wantManifest(t *testing.T, r *Registry, repo, ref string, want digest.Digest) {
	t.Helper()
	m, err := r.GetManifest(context.Background(), repo, ref)
	if err != nil {
		t.Fatalf("GET %s:%s: %v", repo, ref, err)
	}
	if m.Digest != want || digest.FromBytes(m.Content) != want || m.MediaType != ocispec.MediaTypeImageManifest {
		t.Fatalf("GET %s:%s = %s (%s), want %s", repo, ref, m.Digest, m.MediaType, want)
	}
}

func wantUnknown(t *testing.T, r *Registry, repo, ref string) {
	t.Helper()
	if _, err := r.GetManifest(context.Background(), repo, ref); !errors.Is(err, ErrManifestUnknown) {
		t.Fatalf("GET %s:%s: %v, want MANIFEST_UNKNOWN", repo, ref, err)
	}
}

// TestManifestCacheNodes: two Registries over one store are two nodes.
// Writes through a node are seen by it at once; writes through the other
// are seen within TagTTL, and a node with TagTTL 0 sees them at once.
func TestManifestCacheNodes(t *testing.T) {
	ctx := context.Background()
	d := inmemory.New()
	const ttl = 200 * time.Millisecond
	opts := Options{SparseManifests: true, DeleteEnabled: true, ManifestCacheSize: 1 << 20, TagTTL: time.Hour}
	a := New(d, opts)
	opts.TagTTL = ttl
	b := New(d, opts)
	opts.TagTTL = time.Hour
	slow := New(d, opts)
	opts.TagTTL = 0
	now := New(d, opts)

	d1 := pushManifest(t, a, "app", "v1", sparseManifest(1))
	for _, n := range []*Registry{a, b, slow, now} {
		wantManifest(t, n, "app", "v1", d1) // now cached where links are
	}

	// The tag moves through a: a sees it at once (its write voids what it
	// cached), as does the node that trusts no link; b by its bound, slow
	// not before an hour.
	d2 := pushManifest(t, a, "app", "v1", sparseManifest(2))
	moved := time.Now()
	wantManifest(t, a, "app", "v1", d2)
	wantManifest(t, now, "app", "v1", d2)
	wantManifest(t, slow, "app", "v1", d1)
	time.Sleep(ttl - time.Since(moved))
	wantManifest(t, b, "app", "v1", d2)
	// What the GC in slow's process deleted or moved, slow is told of.
	slow.ForgetLinks(ctx)
	wantManifest(t, slow, "app", "v1", d2)

	// A write through slow itself voids what it cached of the repository.
	d3 := pushManifest(t, slow, "app", "v1", sparseManifest(3))
	moved = time.Now()
	wantManifest(t, slow, "app", "v1", d3)

	// Deletes: a tag, then a manifest by digest.
	time.Sleep(ttl - time.Since(moved))
	wantManifest(t, b, "app", "v1", d3)
	wantManifest(t, b, "app", string(d3), d3)
	if err := a.DeleteManifest(ctx, "app", "v1"); err != nil {
		t.Fatal(err)
	}
	if err := a.DeleteManifest(ctx, "app", string(d2)); err != nil {
		t.Fatal(err)
	}
	wantUnknown(t, a, "app", "v1")
	wantUnknown(t, now, "app", "v1")
	wantUnknown(t, now, "app", string(d2))
	deleted := time.Now()
	if err := a.DeleteManifest(ctx, "app", string(d3)); err != nil {
		t.Fatal(err)
	}
	wantUnknown(t, a, "app", string(d3))
	time.Sleep(ttl - time.Since(deleted))
	wantUnknown(t, b, "app", "v1")
	wantUnknown(t, b, "app", string(d3))
}

// TestManifestCacheBounded: the cache holds what it may, and manifests
// beyond its size are still served, from storage.
func TestManifestCacheBounded(t *testing.T) {
	r := New(inmemory.New(), Options{SparseManifests: true, ManifestCacheSize: 4 << 10, TagTTL: time.Hour})
	var ds []digest.Digest
	for i := range 50 {
		ds = append(ds, pushManifest(t, r, "app", fmt.Sprint("t", i), sparseManifest(i)))
	}
	for round := range 2 {
		for i, d := range ds {
			wantManifest(t, r, "app", fmt.Sprint("t", i), d)
		}
		if got := r.manifests.arc.Bytes(); got > 4<<10 || got == 0 {
			t.Fatalf("round %d: cache holds %d bytes, bound 4KiB", round, got)
		}
	}
}
