package main

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/opencontainers/go-digest"

	"github.com/cairn-registry/cairn/internal/meta/bolt"
)

// TestScrubExitStatus: 0 for a clean store, 1 with findings (each on its
// own line, or in the JSON report), 2 for bad usage or storage.
func TestScrubExitStatus(t *testing.T) {
	root := t.TempDir()
	scrub := func(args ...string) (int, string, string) {
		var out, errOut bytes.Buffer
		code := run(context.Background(), append([]string{"scrub", "--quiet"}, args...), &out, &errOut)
		return code, out.String(), errOut.String()
	}
	if code, out, errOut := scrub("--root", root); code != 0 || !strings.Contains(out, "scrub: 0 findings") {
		t.Fatalf("clean store: %d\n%s%s", code, out, errOut)
	}

	blob := []byte("a blob whose data file storage will change")
	d := digest.FromBytes(blob)
	p := filepath.Join(root, "docker/registry/v2/blobs/sha256", d.Encoded()[:2], d.Encoded(), "data")
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		t.Fatal(err)
	}
	blob[3] ^= 1
	if err := os.WriteFile(p, blob, 0o644); err != nil {
		t.Fatal(err)
	}
	code, out, errOut := scrub("--root", root)
	if code != 1 || !strings.Contains(out, "corrupt-blob /docker/registry/v2/blobs/sha256/"+d.Encoded()[:2]+"/"+d.Encoded()+"/data "+d.String()+": ") ||
		!strings.Contains(errOut, "scrub: 1 findings remain") {
		t.Fatalf("corrupt blob: %d\n%s%s", code, out, errOut)
	}
	code, out, _ = scrub("--root", root, "--json", "--repair")
	var rep struct {
		Findings []struct{ Kind, Path, Digest, Repair string }
		ByKind   map[string]int `json:"by_kind"`
	}
	if err := json.Unmarshal([]byte(out), &rep); err != nil || code != 1 {
		t.Fatalf("--json: %d, %v\n%s", code, err, out)
	}
	if len(rep.Findings) != 1 || rep.Findings[0].Kind != "corrupt-blob" || rep.Findings[0].Digest != d.String() || rep.ByKind["corrupt-blob"] != 1 ||
		rep.Findings[0].Repair != "no recipe to rebuild it from" {
		t.Fatalf("--json report: %+v", rep)
	}

	for _, args := range [][]string{
		{"--root", filepath.Join(root, "missing")},
		{"--root", root, "--recipes", "some"},
		{"--root", root, "--workers", "0"},
		{"--root", root, "stray"},
	} {
		if code, _, errOut := scrub(args...); code != 2 || strings.Count(errOut, "\n") != 1 {
			t.Errorf("scrub %v: %d, want 2 and one line, got %q", args, code, errOut)
		}
	}
}

// TestScrubMetadataStore: scrub opens the dedup metadata store as gc does,
// and refuses a bolt store a running serve holds.
func TestScrubMetadataStore(t *testing.T) {
	root := t.TempDir()
	held, err := bolt.Open(filepath.Join(root, "cairn-meta.db"))
	if err != nil {
		t.Fatal(err)
	}
	var out, errOut bytes.Buffer
	code := run(context.Background(), []string{"scrub", "--quiet", "--root", root}, &out, &errOut)
	if code != 2 || !strings.Contains(errOut.String(), "in use by a running cairn serve") {
		t.Fatalf("held store: %d\n%s%s", code, out.String(), errOut.String())
	}
	held.Close()
	out.Reset()
	errOut.Reset()
	code = run(context.Background(), []string{"scrub", "--quiet", "--json", "--root", root}, &out, &errOut)
	var rep struct{ Metadata bool }
	if err := json.Unmarshal(out.Bytes(), &rep); code != 0 || err != nil || !rep.Metadata {
		t.Fatalf("free store: %d, %v, metadata %v\n%s%s", code, err, rep.Metadata, out.String(), errOut.String())
	}
}
