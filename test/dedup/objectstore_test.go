package dedup

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/opencontainers/go-digest"

	"github.com/cairn-registry/cairn/internal/layout"
	"github.com/cairn-registry/cairn/internal/storage/driver"
	"github.com/cairn-registry/cairn/internal/storage/driver/s3"
	"github.com/cairn-registry/cairn/internal/testutil/cairnproc"
	"github.com/cairn-registry/cairn/internal/testutil/drivertest"
	"github.com/cairn-registry/cairn/internal/testutil/objstore"
	"github.com/cairn-registry/cairn/internal/testutil/poll"
	"github.com/cairn-registry/cairn/test/internal/s3proxy"
)

// TestFullModeOnS3 runs dedup in full mode over MinIO (started by
// scripts/test.sh), through a proxy that counts requests: unique files,
// recipes and restores go through the s3 driver, and every layer pulls
// byte-exact after a restart. What dedup and a cold restore cost follows
// layers and bytes, not files (issue 11): no HEAD or LIST per file, a
// restore of a few ranged reads per layer and no request for a removed
// data file, and nothing stored one object per file.
func TestFullModeOnS3(t *testing.T) {
	p, _ := objstore.S3Bucket(t, "cairn-dedup-")
	d, err := s3.New(context.Background(), p)
	if err != nil {
		t.Fatal(err)
	}
	proxy, err := s3proxy.Start(p.RegionEndpoint, 0)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { proxy.Close() })
	counted := p
	counted.RegionEndpoint = proxy.URL
	dir := t.TempDir()
	cfg := filepath.Join(dir, "config.yml")
	yml := fmt.Sprintf(`version: 0.1
log: {level: debug}
storage:
%s  dedup:
    mode: full
    metadata: {path: %q}
    cache: {preconstruct: {dir: %q, size: "0"}}
    predictor: {enabled: false}
`, objstore.S3Section(counted), filepath.Join(dir, "meta.db"), filepath.Join(dir, "cache"))
	if err := os.WriteFile(cfg, []byte(yml), 0o644); err != nil {
		t.Fatal(err)
	}
	layers := allLayers(t)[:6]
	files := 16 * len(layers) // featureTar's shared and own files
	srv := cairnproc.StartArgs(t, cairnproc.Binary(t), "--config", cfg)
	push(t, srv, "s3/img", layers)
	pushed := proxy.Snapshot()
	waitDriverState(t, d, layers)
	srv.Stop()
	ingest := proxy.Snapshot().Sub(pushed)
	t.Logf("dedup of %d layers (%d files): %s", len(layers), files, ingest)
	// The worker's own reads and writes, and the waits' polling of the
	// blobs (waitDriverState stats directly, not through the proxy).
	if n := ingest.Of(s3proxy.Head) + ingest.Of(s3proxy.List); n > int64(4*len(layers)) {
		t.Errorf("dedup made %d HEAD and LIST requests for %d layers: per file, not per layer", n, len(layers))
	}
	if n := ingest.Total(); n > int64(25*len(layers)) {
		t.Errorf("dedup made %d requests for %d layers of %d files", n, len(layers), files)
	}

	srv = cairnproc.StartArgs(t, cairnproc.Binary(t), "--config", cfg)
	before := proxy.Snapshot()
	pullAll(t, srv, "s3/img", layers)
	cold := proxy.Snapshot().Sub(before)
	t.Logf("cold pull of %d layers: %s", len(layers), cold)
	// Per layer: the registry's checks, the recipe, a few ranges; plus
	// the manifest and config.
	if n := cold.Total(); n > int64(12*len(layers)+10) {
		t.Errorf("a cold pull of %d layers (%d files) made %d requests", len(layers), files, n)
	}
	// The metadata says which layers are deduplicated: their data files,
	// known missing, are not asked for (but for a hint that came after
	// its link's HEAD, which a busy machine may make now and then).
	if cold.Failed*2 > int64(len(layers)) {
		t.Errorf("a cold pull of %d layers made %d requests answered with an error (HEADs of removed data files?)", len(layers), cold.Failed)
	}
	if _, err := d.Stat(t.Context(), layout.FilesDir); !errors.Is(err, driver.ErrNotFound) {
		t.Errorf("files stored one object each under %s: %v", layout.FilesDir, err)
	}
}

// waitDriverState waits until every layer has a recipe and no data in d.
func waitDriverState(t *testing.T, d driver.Driver, layers []testLayer) {
	t.Helper()
	has := func(p string) bool { return drivertest.Exists(t, d, p) }
	poll.Until(t, 300*time.Millisecond, func() string {
		for _, l := range layers {
			dg := digest.Digest(digestOf(l.blob))
			if l.intact {
				continue
			}
			if has(layout.BlobData(dg)) || !has(layout.BlobRecipe(dg)) {
				return "layer " + l.name + " to be deduplicated on S3"
			}
		}
		return ""
	})
}
