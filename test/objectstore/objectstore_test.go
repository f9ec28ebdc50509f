// Package objectstore runs a real `cairn serve` on each object store the test
// script starts (MinIO, fake-gcs-server, Azurite) and pushes and pulls a
// multi-layer image through it, byte for byte.
package objectstore

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"hash"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"

	gcstorage "cloud.google.com/go/storage"
	"github.com/Azure/azure-sdk-for-go/sdk/storage/azblob/container"
	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/random"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"google.golang.org/api/iterator"
	"google.golang.org/api/option"

	"github.com/cairn-registry/cairn/internal/storage/driver"
	"github.com/cairn-registry/cairn/internal/storage/driver/azure"
	"github.com/cairn-registry/cairn/internal/storage/driver/gcs"
	"github.com/cairn-registry/cairn/internal/storage/driver/s3"
	"github.com/cairn-registry/cairn/internal/testutil/cairnproc"
	"github.com/cairn-registry/cairn/internal/testutil/objstore"
)

func TestS3(t *testing.T) {
	p, section := objstore.S3Bucket(t, "cairn-e2e-")
	d, err := s3.New(context.Background(), p)
	if err != nil {
		t.Fatal(err)
	}
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
// (streamed and chunked uploads through ggcr), pulls it back byte-exact,
// checks through d that the blobs live in the store, and pulls again from
// a restarted server.
func roundTrip(t *testing.T, yml string, d driver.Driver) {
	cfg := filepath.Join(t.TempDir(), "config.yml")
	if err := os.WriteFile(cfg, []byte(yml), 0o600); err != nil {
		t.Fatal(err)
	}
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
	ref, err := name.ParseReference(srv.Addr+"/store/image:v1", name.Insecure)
	if err != nil {
		t.Fatal(err)
	}
	if err := remote.Write(ref, img); err != nil {
		t.Fatalf("push: %v\n%s", err, srv.Logs())
	}
	verifyPull(t, ref, img)

	layers, _ := img.Layers()
	for _, l := range layers {
		dg, _ := l.Digest()
		fi, err := d.Stat(context.Background(), "/docker/registry/v2/blobs/sha256/"+dg.Hex[:2]+"/"+dg.Hex+"/data")
		size, _ := l.Size()
		if err != nil || fi.Size != size {
			t.Fatalf("blob %s in the store: %+v, %v (want size %d)", dg, fi, err, size)
		}
	}

	srv.Stop()
	again := cairnproc.StartArgs(t, bin, "--config", cfg)
	ref2, _ := name.ParseReference(again.Addr+"/store/image:v1", name.Insecure)
	verifyPull(t, ref2, img)
}

func verifyPull(t *testing.T, ref name.Reference, want v1.Image) {
	t.Helper()
	got, err := remote.Image(ref)
	if err != nil {
		t.Fatalf("pull %s: %v", ref, err)
	}
	wd, _ := want.Digest()
	gd, err := got.Digest()
	if err != nil || gd != wd {
		t.Fatalf("pulled digest %s (%v), want %s", gd, err, wd)
	}
	layers, err := got.Layers()
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range layers {
		dg, _ := l.Digest()
		rc, err := l.Compressed()
		if err != nil {
			t.Fatal(err)
		}
		h := v1.Hash{Algorithm: "sha256"}
		hasher := newSHA256()
		if _, err := io.Copy(hasher, rc); err != nil {
			t.Fatalf("read layer %s: %v", dg, err)
		}
		rc.Close()
		h.Hex = hex.EncodeToString(hasher.Sum(nil))
		if h != dg {
			t.Fatalf("layer %s pulled with digest %s", dg, h)
		}
	}
}

func newSHA256() hash.Hash { return sha256.New() }
