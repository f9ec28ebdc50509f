package dedup

import (
	"archive/tar"
	"bytes"
	"context"
	"io"
	"io/fs"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/cairn-registry/cairn/internal/dedup/pack"
	"github.com/cairn-registry/cairn/internal/layout"
	"github.com/cairn-registry/cairn/internal/storage/driver/filesystem"
	"github.com/cairn-registry/cairn/internal/testutil/poll"
	"github.com/cairn-registry/cairn/internal/testutil/regtest"
)

// packsUnder lists the pack objects under root by id, with their sizes.
func packsUnder(t *testing.T, root string) map[string]int64 {
	t.Helper()
	out := map[string]int64{}
	filepath.WalkDir(filepath.Join(root, layout.PacksDir), func(p string, d fs.DirEntry, err error) error {
		if err == nil && !d.IsDir() {
			if fi, err := d.Info(); err == nil {
				out[d.Name()] = fi.Size()
			}
		}
		return nil
	})
	return out
}

// packIndex reads the index of pack id under root from the object alone.
func packIndex(t *testing.T, root, id string, size int64) []pack.Entry {
	t.Helper()
	d, err := filesystem.New(root)
	if err != nil {
		t.Fatal(err)
	}
	entries, _, err := pack.ObjectIndex(context.Background(), d, id, size)
	if err != nil {
		t.Fatal(err)
	}
	return entries
}

// TestRebuildFailureReported: one deduplicated layer has a unique file
// corrupted on disk (a byte flipped in its pack), another lost the pack
// its own files are in. A GET of either never yields a complete body, the
// server logs an ERROR line naming the layer and the file, and
// cairn_dedup_rebuild_failures_total counts it by reason. (Before, such a
// pull was logged as status=200 with short bytes_out and nothing at
// ERROR.)
func TestRebuildFailureReported(t *testing.T) {
	const corruptV, missingV = 70, 71
	layers := []testLayer{
		{name: "corrupt", mediaType: mtGzip, blob: gzipStd(t, featureTar(t, corruptV, tar.FormatPAX), 6)},
		{name: "missing", mediaType: mtGzip, blob: gzipStd(t, featureTar(t, missingV, tar.FormatPAX), 6)},
	}
	srv, _, debug := startDedup(t, "full", "")
	// One layer after the other, so that the second one's pack holds
	// only files of its own (the shared ones are in the first one's).
	push(t, srv, "broken/img", layers[:1])
	waitState(t, srv.Root, layers[:1], false)
	first := packsUnder(t, srv.Root)
	push(t, srv, "broken/img", layers[1:])
	waitState(t, srv.Root, layers[1:], false)

	corruptFile := digestOf(ownBody(corruptV, 0))
	var missingFile string
	for id, size := range packsUnder(t, srv.Root) {
		entries := packIndex(t, srv.Root, id, size)
		p := filepath.Join(srv.Root, "docker/registry/v2/cairn/packs", id[:2], id)
		if _, old := first[id]; !old {
			// The missing layer's first own file is its pack's first.
			missingFile = string(entries[0].Digest)
			if err := os.Remove(p); err != nil {
				t.Fatal(err)
			}
			continue
		}
		for _, e := range entries {
			if string(e.Digest) == corruptFile {
				b, err := os.ReadFile(p)
				if err != nil {
					t.Fatal(err)
				}
				b[e.Offset+e.Length/2] ^= 0x01
				if err := os.WriteFile(p, b, 0o644); err != nil {
					t.Fatal(err)
				}
			}
		}
	}
	if missingFile == "" {
		t.Fatal("the second layer wrote no pack")
	}

	for _, tc := range []struct {
		layer  testLayer
		file   string
		reason string
	}{
		{layers[0], corruptFile, "corrupt_file"},
		{layers[1], missingFile, "missing_file"},
	} {
		dg := digestOf(tc.layer.blob)
		resp, err := http.Get(srv.URL + "/v2/broken/img/blobs/" + dg)
		if err != nil {
			t.Fatal(err)
		}
		body, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		if err == nil || bytes.Equal(body, tc.layer.blob) {
			t.Fatalf("%s: GET status %d read %d of %d bytes without an error (%v)", tc.layer.name, resp.StatusCode, len(body), len(tc.layer.blob), err)
		}
		// Counted before the response is cut short: no wait.
		series := `cairn_dedup_rebuild_failures_total{reason="` + tc.reason + `"}`
		if got := regtest.Metric(t, debug, series); got != 1 {
			t.Fatalf("%s: %s = %v, want 1", tc.layer.name, series, got)
		}
		// The log reaches us through a pipe: wait for it.
		want := []string{"level=ERROR", "layer=" + dg, "file=" + tc.file, "reason=" + tc.reason}
		poll.Until(t, 100*time.Millisecond, func() string {
			for _, line := range strings.Split(srv.Logs(), "\n") {
				if containsAll(line, want) {
					return ""
				}
			}
			return "an ERROR line with " + strings.Join(want, " ")
		})
	}
}

func containsAll(s string, subs []string) bool {
	for _, sub := range subs {
		if !strings.Contains(s, sub) {
			return false
		}
	}
	return true
}
