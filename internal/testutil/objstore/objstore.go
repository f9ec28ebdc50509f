// Package objstore gives tests a fresh bucket on the object-store servers
// scripts/test.sh starts (it exports their CAIRN_TEST_* variables): MinIO,
// fake-gcs-server and Azurite.
package objstore

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	gcstorage "cloud.google.com/go/storage"
	"github.com/Azure/azure-sdk-for-go/sdk/storage/azblob/container"
	"google.golang.org/api/iterator"
	"google.golang.org/api/option"

	"github.com/cairn-registry/cairn/internal/storage/driver/azure"
	"github.com/cairn-registry/cairn/internal/storage/driver/gcs"
	"github.com/cairn-registry/cairn/internal/storage/driver/s3"
	"github.com/cairn-registry/cairn/internal/testutil/testenv"
)

// RandomName is prefix plus 12 random hex digits.
func RandomName(prefix string) string {
	var b [6]byte
	rand.Read(b[:])
	return prefix + hex.EncodeToString(b[:])
}

// S3Bucket creates a bucket on the test MinIO, removed with its contents
// when the test ends, and returns the s3 driver parameters for it (root
// directory /registry) and the matching storage.s3 YAML section.
func S3Bucket(t testing.TB, prefix string) (s3.Parameters, string) {
	t.Helper()
	env := testenv.Need(t, "CAIRN_TEST_S3_ENDPOINT", "CAIRN_TEST_S3_ACCESS_KEY", "CAIRN_TEST_S3_SECRET_KEY")
	region := os.Getenv("CAIRN_TEST_S3_REGION")
	if region == "" {
		region = "us-east-1"
	}
	ctx := context.Background()
	p := s3.Parameters{
		Region: region, RegionEndpoint: env[0], AccessKey: env[1], SecretKey: env[2],
		Bucket: RandomName(prefix), ForcePathStyle: true, RootDirectory: "/registry",
	}
	client, err := s3.NewClient(ctx, p)
	if err != nil {
		t.Fatal(err)
	}
	if err := s3.CreateBucket(ctx, client, p.Bucket); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := s3.RemoveBucket(context.Background(), client, p.Bucket); err != nil {
			t.Errorf("remove bucket: %v", err)
		}
	})
	return p, S3Section(p)
}

// S3Section is the storage.s3 YAML section (indented under storage:) for
// p, with its endpoint, credentials, bucket and root directory.
func S3Section(p s3.Parameters) string {
	return fmt.Sprintf("  s3:\n    region: %s\n    regionendpoint: %s\n    accesskey: %s\n    secretkey: %s\n    bucket: %s\n    forcepathstyle: true\n    secure: false\n    rootdirectory: %s\n",
		p.Region, p.RegionEndpoint, p.AccessKey, p.SecretKey, p.Bucket, p.RootDirectory)
}

// S3Store is S3Bucket's bucket as an s3 driver, for tests that look at the
// store directly, with the storage.s3 YAML section.
func S3Store(t testing.TB, prefix string) (*s3.Driver, string) {
	t.Helper()
	p, yml := S3Bucket(t, prefix)
	d, err := s3.New(context.Background(), p)
	if err != nil {
		t.Fatal(err)
	}
	return d, yml
}

// DedupLocal is the YAML, below storage.dedup, that keeps dedup's metadata
// store and preconstruct cache in a temp dir: on an object store there is
// no storage root for their defaults.
func DedupLocal(t testing.TB) string {
	dir := t.TempDir()
	return fmt.Sprintf("    metadata: {path: %q}\n    cache: {preconstruct: {dir: %q}}\n",
		filepath.Join(dir, "meta.db"), filepath.Join(dir, "cache"))
}

// GCSBucket creates a bucket on the test fake-gcs-server, emptied and
// removed when the test ends, and returns the gcs driver parameters for it
// (root directory registry, no credentials: the emulator checks none) and
// the matching storage.gcs YAML section.
func GCSBucket(t testing.TB, prefix string) (gcs.Parameters, string) {
	t.Helper()
	ep := testenv.Need(t, "CAIRN_TEST_GCS_ENDPOINT")[0]
	ctx := context.Background()
	c, err := gcstorage.NewClient(ctx, option.WithoutAuthentication(), option.WithEndpoint(ep+"/storage/v1/"))
	if err != nil {
		t.Fatal(err)
	}
	p := gcs.Parameters{Bucket: RandomName(prefix), Endpoint: ep, RootDirectory: "registry"}
	b := c.Bucket(p.Bucket)
	if err := b.Create(ctx, strings.TrimSuffix(prefix, "-"), nil); err != nil {
		c.Close()
		t.Fatal(err)
	}
	t.Cleanup(func() {
		defer c.Close()
		ctx := context.Background()
		it := b.Objects(ctx, nil)
		for {
			o, err := it.Next()
			if errors.Is(err, iterator.Done) {
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
	return p, fmt.Sprintf("  gcs:\n    bucket: %s\n    endpoint: %s\n    rootdirectory: %s\n", p.Bucket, p.Endpoint, p.RootDirectory)
}

// AzureContainer creates a container on the test Azurite, removed with its
// contents when the test ends, and returns the azure driver parameters for
// it (root directory registry) and the matching storage.azure YAML section.
func AzureContainer(t testing.TB, prefix string) (azure.Parameters, string) {
	t.Helper()
	env := testenv.Need(t, "CAIRN_TEST_AZURE_ENDPOINT", "CAIRN_TEST_AZURE_ACCOUNT", "CAIRN_TEST_AZURE_KEY")
	p := azure.Parameters{AccountName: env[1], AccountKey: env[2], Container: RandomName(prefix), ServiceURL: env[0], RootDirectory: "registry"}
	cred, err := container.NewSharedKeyCredential(p.AccountName, p.AccountKey)
	if err != nil {
		t.Fatal(err)
	}
	c, err := container.NewClientWithSharedKeyCredential(strings.TrimRight(p.ServiceURL, "/")+"/"+p.Container, cred, nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.Create(context.Background(), nil); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if _, err := c.Delete(context.Background(), nil); err != nil {
			t.Errorf("delete container: %v", err)
		}
	})
	return p, fmt.Sprintf("  azure:\n    accountname: %s\n    accountkey: %s\n    container: %s\n    serviceurl: %s\n    rootdirectory: %s\n",
		p.AccountName, p.AccountKey, p.Container, p.ServiceURL, p.RootDirectory)
}
