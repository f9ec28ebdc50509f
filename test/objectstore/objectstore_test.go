// Package objectstore runs a real `cairn serve` on each object store the test
// script starts (MinIO, fake-gcs-server, Azurite) and pushes and pulls a
// multi-layer image through it, byte for byte.
package objectstore

import (
	"context"
	"testing"

	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/random"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/opencontainers/go-digest"

	"github.com/cairn-registry/cairn/internal/layout"
	"github.com/cairn-registry/cairn/internal/storage/driver"
	"github.com/cairn-registry/cairn/internal/storage/driver/azure"
	"github.com/cairn-registry/cairn/internal/storage/driver/gcs"
	"github.com/cairn-registry/cairn/internal/testutil/cairnproc"
	"github.com/cairn-registry/cairn/internal/testutil/objstore"
	"github.com/cairn-registry/cairn/internal/testutil/regtest"
)

func TestS3(t *testing.T) {
	d, section := objstore.S3Store(t, "cairn-e2e-")
	roundTrip(t, "version: 0.1\nstorage:\n"+section, d)
}

func TestGCS(t *testing.T) {
	p, section := objstore.GCSBucket(t, "cairn-e2e-")
	d, err := gcs.New(context.Background(), p)
	if err != nil {
		t.Fatal(err)
	}
	roundTrip(t, "version: 0.1\nstorage:\n"+section, d)
}

func TestAzure(t *testing.T) {
	p, section := objstore.AzureContainer(t, "cairn-e2e-")
	d, err := azure.New(context.Background(), p)
	if err != nil {
		t.Fatal(err)
	}
	roundTrip(t, "version: 0.1\nstorage:\n"+section, d)
}

// roundTrip serves the store configured by yml, pushes a multi-layer image
// (streamed and chunked uploads through ggcr) and a blob in PATCHes, pulls
// them back byte-exact, checks through d that the blobs live in the store,
// and pulls again from a restarted server.
func roundTrip(t *testing.T, yml string, d driver.Driver) {
	cfg := cairnproc.WriteConfig(t, yml)
	bin := cairnproc.Binary(t)
	srv := cairnproc.StartArgs(t, bin, "--config", cfg)

	img, err := random.Image(3<<20, 4)
	if err != nil {
		t.Fatal(err)
	}
	// A large layer exercises multipart writes on every store.
	big, err := random.Layer(24<<20, "application/vnd.oci.image.layer.v1.tar+gzip")
	if err != nil {
		t.Fatal(err)
	}
	if img, err = mutate.AppendLayers(img, big); err != nil {
		t.Fatal(err)
	}
	if err := remote.Write(regtest.Ref(t, srv.Addr, "store/image:v1"), img); err != nil {
		t.Fatalf("push: %v\n%s", err, srv.Logs())
	}
	want, err := img.Digest()
	if err != nil {
		t.Fatal(err)
	}
	verifyPull(t, srv, want.String())
	chunked := pushChunkedBlob(t, srv.Addr, "store/chunked", 3, 6<<20)

	layers, _ := img.Layers()
	for _, l := range layers {
		dg, _ := l.Digest()
		fi, err := d.Stat(context.Background(), layout.BlobData(digest.Digest(dg.String())))
		size, _ := l.Size()
		if err != nil || fi.Size != size {
			t.Fatalf("blob %s in the store: %+v, %v (want size %d)", dg, fi, err, size)
		}
	}

	srv.Stop()
	again := cairnproc.StartArgs(t, bin, "--config", cfg)
	verifyPull(t, again, want.String())
	chunked(again.Addr)
}

// verifyPull pulls store/image:v1 and checks it is the image want names,
// every layer byte-exact.
func verifyPull(t *testing.T, srv *cairnproc.Server, want string) {
	t.Helper()
	if err := regtest.CheckPull(t.Context(), regtest.Ref(t, srv.Addr, "store/image:v1"), want); err != nil {
		t.Fatalf("pull: %v", err)
	}
}
