package scrub

import (
	"fmt"
	"os"
	"testing"

	"github.com/opencontainers/go-digest"

	"github.com/cairn-registry/cairn/internal/storage/driver"
	"github.com/cairn-registry/cairn/internal/storage/driver/filesystem"
	"github.com/cairn-registry/cairn/internal/testutil/cairnproc"
	"github.com/cairn-registry/cairn/internal/testutil/objstore"
)

// TestScrubThroughput prints scrub's MiB/s on the filesystem and, with the
// test script's MinIO, on S3: CAIRN_SCRUB_BENCH=1 go test -v -run
// TestScrubThroughput ./test/scrub/. Images are pushed through cairn serve
// in index mode (intact layers, recipes and unique files all stored).
func TestScrubThroughput(t *testing.T) {
	if os.Getenv("CAIRN_SCRUB_BENCH") == "" {
		t.Skip("set CAIRN_SCRUB_BENCH=1 to measure")
	}
	const idx = "  dedup:\n    mode: index\n    workers: 4\n"
	t.Run("filesystem", func(t *testing.T) {
		root := t.TempDir()
		cfg := cairnproc.WriteConfig(t, "version: 0.1\nlog: {level: warn}\nstorage:\n  filesystem: {rootdirectory: /unused}\n"+idx)
		d, err := filesystem.New(root)
		if err != nil {
			t.Fatal(err)
		}
		benchScrub(t, d, func() *cairnproc.Server { return cairnproc.Start(t, root, "--config", cfg) }, []string{"--config", cfg, "--root", root})
	})
	t.Run("minio", func(t *testing.T) {
		d, section := objstore.S3Store(t, "cairn-scrub-bench-")
		cfg := cairnproc.WriteConfig(t, "version: 0.1\nlog: {level: warn}\nstorage:\n"+section+idx+objstore.DedupLocal(t))
		benchScrub(t, d, func() *cairnproc.Server { return cairnproc.StartArgs(t, cairnproc.Binary(t), "--config", cfg) }, []string{"--config", cfg})
	})
}

func benchScrub(t *testing.T, d driver.Driver, start func() *cairnproc.Server, args []string) {
	srv := start()
	keep := map[digest.Digest]bool{}
	// 16 images of 2 layers: 12 files of 1 MiB each, half of them shared
	// by every layer, half text-like (compressible).
	shared := filesOf("usr/share/common", 1000, 6, 1<<20)
	for i := range 16 {
		own := filesOf(fmt.Sprintf("opt/img%d", i), uint64(2000+20*i), 6, 1<<20)
		a := layerBlob(t, "gzip", append(own[:3:3], shared...))
		b := layerBlob(t, "zstd", own[3:])
		push(t, srv, fmt.Sprintf("bench/img%d:v1", i), a, b)
		keep[digest.FromBytes(a.blob)], keep[digest.FromBytes(b.blob)] = true, true
	}
	waitDedup(t, d, keep)
	srv.Stop()
	for _, w := range []string{"1", "4", "8"} {
		rep := scrubJSON(t, 0, append(args, "--recipes", "all", "--workers", w)...)
		rate := func(n int64, phase string) string {
			return fmt.Sprintf("%.0f MiB/s (%.1f MiB in %.2fs)", float64(n)/(1<<20)/rep.PhaseSeconds[phase], float64(n)/(1<<20), rep.PhaseSeconds[phase])
		}
		t.Logf("workers %s: blobs %s; files %s; rebuilds %s; total %.2fs; requests %v", w,
			rate(rep.Counts.BlobBytes, "blobs"), rate(rep.Counts.FileBytes, "files"), rate(rep.Counts.RebuiltBytes, "recipes"), rep.Seconds, rep.Requests)
	}
}
