package dedup

import (
	"testing"
	"time"

	"github.com/opencontainers/go-digest"

	"github.com/cairn-registry/cairn/internal/layout"
	"github.com/cairn-registry/cairn/internal/storage/driver"
	"github.com/cairn-registry/cairn/internal/testutil/cairnproc"
	"github.com/cairn-registry/cairn/internal/testutil/drivertest"
	"github.com/cairn-registry/cairn/internal/testutil/objstore"
)

// TestFullModeOnS3 runs dedup in full mode over MinIO (started by
// scripts/test.sh): unique files, recipes and restores go through the s3
// driver, and every layer pulls byte-exact after a restart.
func TestFullModeOnS3(t *testing.T) {
	d, section := objstore.S3Store(t, "cairn-dedup-")
	cfg := cairnproc.WriteConfig(t, "version: 0.1\nlog: {level: debug}\nstorage:\n"+section+"  dedup:\n    mode: full\n"+objstore.DedupLocal(t))
	layers := allLayers(t)[:6]
	srv := cairnproc.StartArgs(t, cairnproc.Binary(t), "--config", cfg)
	push(t, srv, "s3/img", layers)
	waitDriverState(t, d, layers)
	pullAll(t, srv, "s3/img", layers)
	srv.Stop()
	srv = cairnproc.StartArgs(t, cairnproc.Binary(t), "--config", cfg)
	pullAll(t, srv, "s3/img", layers)
}

// waitDriverState waits until every layer has a recipe and no data in d.
func waitDriverState(t *testing.T, d driver.Driver, layers []testLayer) {
	t.Helper()
	has := func(p string) bool { return drivertest.Exists(t, d, p) }
	waitFor(t, 300*time.Millisecond, func() string {
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
