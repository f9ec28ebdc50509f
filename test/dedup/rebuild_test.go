package dedup

import (
	"archive/tar"
	"bytes"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/opencontainers/go-digest"

	"github.com/cairn-registry/cairn/internal/layout"
)

// filePath is the file store path under root of the unique file with
// content body.
func filePath(root string, body []byte) string {
	return filepath.Join(root, layout.File(digest.FromBytes(body)))
}

// TestRebuildFailureReported: one deduplicated layer has a unique file
// corrupted on disk (a byte flipped), another has one deleted. A GET of
// either never yields a complete body, the server logs an ERROR line
// naming the layer and the file, and cairn_dedup_rebuild_failures_total
// counts it by reason. (Before, such a pull was logged as status=200 with
// short bytes_out and nothing at ERROR.)
func TestRebuildFailureReported(t *testing.T) {
	const corruptV, missingV = 70, 71
	layers := []testLayer{
		{name: "corrupt", mediaType: mtGzip, blob: gzipStd(t, featureTar(t, corruptV, tar.FormatPAX), 6)},
		{name: "missing", mediaType: mtGzip, blob: gzipStd(t, featureTar(t, missingV, tar.FormatPAX), 6)},
	}
	srv, _, debug := startDedup(t, "full", "")
	push(t, srv, "broken/img", layers)
	waitState(t, srv.Root, layers, false)

	corruptFile, missingFile := ownBody(corruptV, 0), ownBody(missingV, 1)
	p := filePath(srv.Root, corruptFile)
	b, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	b[len(b)/2] ^= 0x01
	if err := os.WriteFile(p, b, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Remove(filePath(srv.Root, missingFile)); err != nil {
		t.Fatal(err)
	}

	for _, tc := range []struct {
		layer  testLayer
		file   []byte
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
		if got := metric(t, debug, series); got != 1 {
			t.Fatalf("%s: %s = %v, want 1", tc.layer.name, series, got)
		}
		// The log reaches us through a pipe: wait for it.
		want := []string{"level=ERROR", "layer=" + dg, "file=" + digestOf(tc.file), "reason=" + tc.reason}
		waitFor(t, 100*time.Millisecond, func() string {
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
