package s3bench

import (
	"context"
	"os"
	"strconv"
	"testing"

	"github.com/cairn-registry/cairn/internal/storage/driver/s3"
)

// TestDeleteBench prints the bulk-delete comparison. It takes minutes (10,000
// sequential requests of 48 ms each), so it runs only with CAIRN_S3_BENCH=1
// (CAIRN_S3_BENCH_FILES sets the file count) and a MinIO from
// scripts/services/minio.sh.
func TestDeleteBench(t *testing.T) {
	if os.Getenv("CAIRN_S3_BENCH") != "1" {
		t.Skip("set CAIRN_S3_BENCH=1 to run the delete benchmark")
	}
	endpoint := os.Getenv("CAIRN_TEST_S3_ENDPOINT")
	if endpoint == "" {
		t.Fatal("CAIRN_TEST_S3_ENDPOINT is not set (scripts/services/minio.sh starts MinIO)")
	}
	cfg := Config{Server: s3.Parameters{
		Region:         os.Getenv("CAIRN_TEST_S3_REGION"),
		RegionEndpoint: endpoint,
		AccessKey:      os.Getenv("CAIRN_TEST_S3_ACCESS_KEY"),
		SecretKey:      os.Getenv("CAIRN_TEST_S3_SECRET_KEY"),
		ForcePathStyle: true,
	}}
	if s := os.Getenv("CAIRN_S3_BENCH_FILES"); s != "" {
		n, err := strconv.Atoi(s)
		if err != nil {
			t.Fatalf("CAIRN_S3_BENCH_FILES: %v", err)
		}
		cfg.Files = n
	}
	res, err := Run(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Log(res)
}
