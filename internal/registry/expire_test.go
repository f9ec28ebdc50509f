package registry

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"testing"
	"time"

	"github.com/opencontainers/go-digest"

	"github.com/cairn-registry/cairn/internal/storage/driver/inmemory"
)

// ExpireCached deletes the tags, manifests and blob links written before
// its cutoff, in every repository, and nothing written after it.
func TestExpireCached(t *testing.T) {
	ctx := context.Background()
	r := New(inmemory.New(), Options{SparseManifests: true})
	push := func(repo string, data []byte) digest.Digest {
		id, err := r.StartUpload(ctx, repo)
		if err != nil {
			t.Fatal(err)
		}
		d := digest.FromBytes(data)
		if _, err := r.FinishUpload(ctx, repo, id, d, bytes.NewReader(data), 0); err != nil {
			t.Fatal(err)
		}
		return d
	}
	cfg := []byte(`{"os":"linux"}`)
	for _, repo := range []string{"a/one", "b/two"} {
		cd := push(repo, cfg)
		m, _ := json.Marshal(map[string]any{
			"schemaVersion": 2, "mediaType": "application/vnd.oci.image.manifest.v1+json",
			"config": map[string]any{"mediaType": "application/vnd.oci.image.config.v1+json", "digest": cd, "size": len(cfg)},
			"layers": []any{},
		})
		if _, err := r.PutManifest(ctx, repo, "v1", "application/vnd.oci.image.manifest.v1+json", m, nil); err != nil {
			t.Fatal(err)
		}
	}
	if n, err := r.ExpireCached(ctx, time.Now().Add(-time.Hour)); err != nil || n != 0 {
		t.Fatalf("nothing is older than an hour: expired %d, %v", n, err)
	}
	if _, err := r.StatManifest(ctx, "a/one", "v1"); err != nil {
		t.Fatalf("expired too early: %v", err)
	}
	n, err := r.ExpireCached(ctx, time.Now().Add(time.Hour))
	if err != nil || n < 4 {
		t.Fatalf("expired %d (want the tag, revision and config link of both), %v", n, err)
	}
	for _, repo := range []string{"a/one", "b/two"} {
		if _, err := r.StatManifest(ctx, repo, "v1"); !errors.Is(err, ErrManifestUnknown) && !errors.Is(err, ErrNameUnknown) {
			t.Errorf("%s:v1 after expiry: %v", repo, err)
		}
		if _, err := r.StatBlob(ctx, repo, digest.FromBytes(cfg)); !errors.Is(err, ErrBlobUnknown) {
			t.Errorf("%s config blob after expiry: %v", repo, err)
		}
	}
}
