package bench

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"strings"
	"testing"

	"github.com/cairn-registry/cairn/internal/testutil/cairnproc"
)

// TestRunRegistryAgainstCairn runs the whole benchmark, with tiny sizes,
// against a real cairn process: every phase must succeed and report figures
// for every size. Speeds are printed, never asserted.
func TestRunRegistryAgainstCairn(t *testing.T) {
	srv := cairnproc.Start(t, "")
	var progress bytes.Buffer
	sizes := []int64{64 << 10, 1 << 20}
	res, err := RunRegistry(context.Background(), Options{
		URL:              srv.URL,
		Sizes:            sizes,
		Repeat:           2,
		ChunkSize:        300 << 10, // 1MiB goes as four PATCHes, the last short
		ManifestRequests: 200,
		Concurrency:      4,
	}, &progress)
	if err != nil {
		t.Fatalf("RunRegistry: %v\nprogress:\n%s", err, progress.String())
	}
	if len(res.Blobs) != len(sizes) {
		t.Fatalf("got %d blob results, want %d", len(res.Blobs), len(sizes))
	}
	for i, b := range res.Blobs {
		if b.Size != sizes[i] {
			t.Errorf("blob result %d: size %d, want %d", i, b.Size, sizes[i])
		}
		for name, tp := range map[string]Throughput{
			"sha256": b.SHA256, "push chunked": b.PushChunked, "push patches": b.PushPatches, "push monolithic": b.PushMonolithic,
			"push image": b.PushImage, "pull": b.Pull,
		} {
			wantRuns := 2
			if name == "sha256" {
				wantRuns = 8 // one digest per push, four push styles
			}
			if tp.Runs != wantRuns || tp.BestMBps <= 0 || tp.MedianMBps <= 0 || tp.BestMBps < tp.MedianMBps {
				t.Errorf("%s %s: %+v", b.SizeText, name, tp)
			}
		}
		if b.PushChunkedPerSHA256 <= 0 || b.PushPatchesPerSHA256 <= 0 || b.PushMonolithicPerSHA256 <= 0 || b.PushImagePerSHA256 <= 0 {
			t.Errorf("%s: push/sha256 ratios %v, %v, %v, %v", b.SizeText, b.PushChunkedPerSHA256, b.PushPatchesPerSHA256, b.PushMonolithicPerSHA256, b.PushImagePerSHA256)
		}
	}
	if len(res.Manifests) != 2 {
		t.Fatalf("got %d manifest results, want 2 (GET, HEAD)", len(res.Manifests))
	}
	for _, m := range res.Manifests {
		if m.Requests != 200 || m.Concurrency != 4 || m.ReqPerSec <= 0 || m.P50Ms <= 0 || m.P99Ms < m.P50Ms || m.MaxMs < m.P99Ms {
			t.Errorf("%s: %+v", m.Name, m)
		}
	}

	var table bytes.Buffer
	if err := WriteTable(&table, res); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"64KiB", "1MiB", "push (chunked-stream)", "push (chunked PATCHes)", "push (monolithic PUT)", "push (monolithic + manifest)", "GET manifest by tag", "HEAD manifest by digest"} {
		if !strings.Contains(table.String(), want) {
			t.Errorf("table lacks %q:\n%s", want, table.String())
		}
	}
	var js bytes.Buffer
	if err := WriteJSON(&js, res); err != nil {
		t.Fatal(err)
	}
	var back Result
	if err := json.Unmarshal(js.Bytes(), &back); err != nil {
		t.Fatalf("JSON output does not parse: %v", err)
	}
	if len(back.Blobs) != len(sizes) || back.Blobs[1].PushChunked != res.Blobs[1].PushChunked {
		t.Errorf("JSON round trip lost figures: %s", js.String())
	}
	t.Logf("\n%s", table.String())
}

// TestStartServerStopsIt checks the bench's own server launcher: the server
// answers, and after Stop its port is closed and its temp dir is gone.
func TestStartServerStopsIt(t *testing.T) {
	bin := cairnproc.Binary(t)
	s, err := StartServer(context.Background(), bin)
	if err != nil {
		t.Fatal(err)
	}
	c, err := newClient(s.URL, "x/y", 1)
	if err != nil {
		t.Fatal(err)
	}
	if err := c.ping(context.Background()); err != nil {
		t.Fatalf("ping: %v", err)
	}
	c.close()
	if err := s.Stop(); err != nil {
		t.Fatalf("Stop: %v", err)
	}
	if err := c.ping(context.Background()); err == nil {
		t.Error("server still answers after Stop")
	}
	if _, err := os.Stat(s.dir); !os.IsNotExist(err) {
		t.Errorf("temp dir %s still there after Stop (%v)", s.dir, err)
	}
}

// TestStartServerReportsFailure: a binary that exits at once yields an error
// quoting its output, not a hang.
func TestStartServerReportsFailure(t *testing.T) {
	_, err := StartServer(context.Background(), "/bin/false")
	if err == nil || !strings.Contains(err.Error(), "exited") {
		t.Fatalf("err = %v, want a 'server exited' error", err)
	}
}
