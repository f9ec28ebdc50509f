// Package objectstore runs a real `cairn serve` on each object store the test
// script starts (MinIO, fake-gcs-server, Azurite) and pushes and pulls a
// multi-layer image through it, byte for byte.
package objectstore

import (
	"context"
	"fmt"
	"strings"
	"testing"

	gcstorage "cloud.google.com/go/storage"
	"github.com/Azure/azure-sdk-for-go/sdk/storage/azblob/container"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/random"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/opencontainers/go-digest"
	"google.golang.org/api/iterator"
	"google.golang.org/api/option"

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
	ep := objstore.Need(t, "CAIRN_TEST_GCS_ENDPOINT")[0]
	ctx := context.Background()
	c, err := gcstorage.NewClient(ctx, option.WithoutAuthentication(), option.WithEndpoint(ep+"/storage/v1/"))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	bucket := objstore.RandomName("cairn-e2e-")
	b := c.Bucket(bucket)
	if err := b.Create(ctx, "cairn-e2e", nil); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		it := b.Objects(ctx, nil)
		for {
			o, err := it.Next()
			if err == iterator.Done {
				break
			}
			if err != nil {
				t.Errorf("list: %v", err)
				return
			}
			b.Object(o.Name).Delete(ctx)
		}
		if err := b.Delete(ctx); err != nil {
			t.Errorf("delete bucket: %v", err)
		}
	})
	d, err := gcs.New(ctx, gcs.Parameters{Bucket: bucket, Endpoint: ep, RootDirectory: "registry"})
	if err != nil {
		t.Fatal(err)
	}
	yml := fmt.Sprintf("version: 0.1\nstorage:\n  gcs:\n    bucket: %s\n    endpoint: %s\n    rootdirectory: registry\n", bucket, ep)
	roundTrip(t, yml, d)
}

func TestAzure(t *testing.T) {
	env := objstore.Need(t, "CAIRN_TEST_AZURE_ENDPOINT", "CAIRN_TEST_AZURE_ACCOUNT", "CAIRN_TEST_AZURE_KEY")
	ctx := context.Background()
	name := objstore.RandomName("cairn-e2e-")
	cred, err := container.NewSharedKeyCredential(env[1], env[2])
	if err != nil {
		t.Fatal(err)
	}
	c, err := container.NewClientWithSharedKeyCredential(strings.TrimRight(env[0], "/")+"/"+name, cred, nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.Create(ctx, nil); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if _, err := c.Delete(context.Background(), nil); err != nil {
			t.Errorf("delete container: %v", err)
		}
	})
	p := azure.Parameters{AccountName: env[1], AccountKey: env[2], Container: name, ServiceURL: env[0], RootDirectory: "registry"}
	d, err := azure.New(ctx, p)
	if err != nil {
		t.Fatal(err)
	}
	yml := fmt.Sprintf("version: 0.1\nstorage:\n  azure:\n    accountname: %s\n    accountkey: %s\n    container: %s\n    serviceurl: %s\n    rootdirectory: registry\n",
		env[1], env[2], name, env[0])
	roundTrip(t, yml, d)
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
