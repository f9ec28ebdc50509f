// Package scrub runs `cairn scrub` against stores a real `cairn serve` filled
// and deduplicated, on the filesystem and on MinIO: it corrupts them the ways
// storage fails (a flipped byte in a blob and in a dedup file's frame in its
// pack, a lost recipe, a lost revision link), checks that each is reported
// with its path and digest, repairs, and checks what remains and that pulls
// are byte-exact.
package scrub

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/static"
	"github.com/google/go-containerregistry/pkg/v1/types"
	"github.com/klauspost/compress/zstd"
	"github.com/opencontainers/go-digest"

	"github.com/cairn-registry/cairn/internal/dedup/pack"
	"github.com/cairn-registry/cairn/internal/layout"
	"github.com/cairn-registry/cairn/internal/scrub"
	"github.com/cairn-registry/cairn/internal/storage/driver"
	"github.com/cairn-registry/cairn/internal/storage/driver/filesystem"
	"github.com/cairn-registry/cairn/internal/testutil/cairnproc"
	"github.com/cairn-registry/cairn/internal/testutil/drivertest"
	"github.com/cairn-registry/cairn/internal/testutil/layertest"
	"github.com/cairn-registry/cairn/internal/testutil/objstore"
	"github.com/cairn-registry/cairn/internal/testutil/regtest"
)

func TestMain(m *testing.M) { os.Exit(cairnproc.Main(m)) }

// dedupConfig is storage.dedup for the tests: full mode, except keep/*
// in index mode (recipes beside intact data).
const dedupConfig = `  dedup:
    mode: full
    workers: 2
    repositories: {"keep/*": index}
`

func TestScrubFilesystem(t *testing.T) {
	t.Parallel()
	root := t.TempDir()
	cfg := cairnproc.WriteConfig(t, "version: 0.1\nlog: {level: warn}\nstorage:\n  filesystem: {rootdirectory: /unused}\n"+dedupConfig)
	d, err := filesystem.New(root)
	if err != nil {
		t.Fatal(err)
	}
	runScenario(t, d,
		func() *cairnproc.Server { return cairnproc.Start(t, root, "--config", cfg) },
		[]string{"--config", cfg, "--root", root})
}

func TestScrubMinIO(t *testing.T) {
	t.Parallel()
	d, section := objstore.S3Store(t, "cairn-scrub-")
	cfg := cairnproc.WriteConfig(t, "version: 0.1\nlog: {level: warn}\nstorage:\n"+section+dedupConfig+objstore.DedupLocal(t))
	runScenario(t, d,
		func() *cairnproc.Server { return cairnproc.StartArgs(t, cairnproc.Binary(t), "--config", cfg) },
		[]string{"--config", cfg})
}

// runScenario pushes keep/base (index mode) and full/app (full mode) whose
// layers share files, corrupts the store through d with the server
// stopped, and scrubs it with args selecting the same storage.
func runScenario(t *testing.T, d driver.Driver, start func() *cairnproc.Server, args []string) {
	shared := files("usr/lib/shared", 1, 3)
	a := layerBlob(t, "gzip", append(files("opt/keep", 10, 2), shared...))
	b := layerBlob(t, "gzip", append(files("opt/app", 20, 2), shared...))
	c := layerBlob(t, "zstd", files("opt/extra", 30, 2))

	srv := start()
	push(t, srv, "keep/base:v1", a)
	app := push(t, srv, "full/app:v1", b, c)
	la, lb, lc := digest.FromBytes(a.blob), digest.FromBytes(b.blob), digest.FromBytes(c.blob)
	waitDedup(t, d, map[digest.Digest]bool{la: true, lb: false, lc: false})
	srv.Stop()

	appManifest := digestOf(t, app.Digest)
	appConfig := digestOf(t, app.ConfigName)
	s0 := digest.FromBytes(shared[0].Body)
	configData := layout.BlobData(appConfig)
	packID, frame := packedFrame(t, d, s0)
	packPath := layout.Pack(packID)
	lcLink := string(layout.AppendLayerLink(nil, "full/app", "sha256", lc.Encoded()))
	tagLink := layout.TagCurrentLink("full/app", "v1")

	flip(t, d, configData) // a blob: no other copy
	// A dedup file keep/base's intact layer holds: a byte in its frame.
	flipAt(t, d, packPath, frame.Offset+frame.Length/2)
	remove(t, d, layout.BlobRecipe(lc)) // a deduplicated layer's recipe
	remove(t, d, string(layout.AppendRevisionLink(nil, "full/app", "sha256", appManifest.Encoded())))

	all := map[string]string{
		"corrupt-blob " + configData: appConfig.String(),
		"corrupt-file " + packPath:   s0.String(),
		"missing-blob " + lcLink:     lc.String(),
		"dangling-tag " + tagLink:    appManifest.String(),
	}
	code, out := runScrub(t, append(args, "--recipes", "all")...)
	if code != 1 {
		t.Fatalf("cairn scrub exited %d, want 1\n%s", code, out)
	}
	t.Logf("cairn scrub:\n%s", out)
	for k, dg := range all {
		kind, path, _ := strings.Cut(k, " ")
		if !strings.Contains(out, kind+" "+path+" "+dg+" ") && !strings.Contains(out, kind+" "+path+" "+dg+":") {
			t.Errorf("output lacks %s %s %s:\n%s", kind, path, dg, out)
		}
	}

	rep := scrubJSON(t, 1, append(args, "--recipes", "all")...)
	if f := wantFindings(t, rep, all)["corrupt-file "+packPath]; f.Offset != frame.Offset {
		t.Errorf("corrupt file at offset %d of its pack, want %d", f.Offset, frame.Offset)
	}
	if c := rep.Counts; c.Recipes != 2 || c.Rebuilt != 0 || c.Files == 0 || c.Repositories != 2 || c.Packs == 0 || !rep.Metadata {
		t.Errorf("counts %+v: want 2 recipes (both name the bad file: none rebuilt), 2 repositories, packs read with the metadata store", c)
	}
	t.Logf("scrub: %d blobs (%d bytes), %d files (%d bytes) in %.3fs; requests %v",
		rep.Counts.Blobs, rep.Counts.BlobBytes, rep.Counts.Files, rep.Counts.FileBytes, rep.Seconds, rep.Requests)

	rep = scrubJSON(t, 1, append(args, "--repair", "--recipes", "all")...)
	got := wantFindings(t, rep, all)
	for k, f := range got {
		wantRepaired := strings.HasPrefix(k, "corrupt-file ") || strings.HasPrefix(k, "dangling-tag ")
		if f.Repaired != wantRepaired {
			t.Errorf("%s: repaired %v (%s), want %v", k, f.Repaired, f.Repair, wantRepaired)
		}
	}
	if rep.Repaired != 2 || rep.Remaining() != 2 {
		t.Errorf("repaired %d, remaining %d; want 2 and 2", rep.Repaired, rep.Remaining())
	}
	if n := rep.Requests["delete"] + rep.Requests["delete_files"]; n > 1 { // the relink's journal record, at most
		t.Errorf("repair sent %d deletes: %v", n, rep.Requests)
	}

	rep = scrubJSON(t, 1, append(args, "--recipes", "all")...)
	wantFindings(t, rep, map[string]string{
		"corrupt-blob " + configData: appConfig.String(),
		"missing-blob " + lcLink:     lc.String(),
	})
	if rep.Counts.Rebuilt != 2 || rep.Counts.DeadFiles != 1 {
		t.Errorf("counts %+v after the repair: want 2 recipes rebuilt, the corrupt frame dead", rep.Counts)
	}

	// What was repaired serves again: the layer rebuilt from the rewritten
	// file, the tag through its revision.
	srv = start()
	if got := getBlob(t, srv, "full/app", lb); !bytes.Equal(got, b.blob) {
		t.Errorf("full/app layer %s: pulled %d bytes, want the %d pushed", lb, len(got), len(b.blob))
	}
	if got := getBlob(t, srv, "keep/base", la); !bytes.Equal(got, a.blob) {
		t.Errorf("keep/base layer: pulled %d bytes, want the %d pushed", len(got), len(a.blob))
	}
	resp, err := http.Head(srv.URL + "/v2/full/app/manifests/v1")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK || resp.Header.Get("Docker-Content-Digest") != appManifest.String() {
		t.Errorf("HEAD full/app:v1: %d %s", resp.StatusCode, resp.Header.Get("Docker-Content-Digest"))
	}
}

// files returns n files under dir with bodies from seeds seed, seed+1, ...
// (odd seeds give random bytes, even ones text).
func files(dir string, seed uint64, n int) []layertest.File { return filesOf(dir, seed, n, 30_000) }

func filesOf(dir string, seed uint64, n, size int) []layertest.File {
	var fs []layertest.File
	for i := range n {
		fs = append(fs, layertest.File{Name: fmt.Sprintf("%s/f%d", dir, i), Body: layertest.Body(seed+uint64(i), size)})
	}
	return fs
}

type testLayer struct {
	blob      []byte
	mediaType types.MediaType
}

func layerBlob(t *testing.T, compression string, fs []layertest.File) testLayer {
	t.Helper()
	raw := layertest.Tar(t, fs...)
	if compression == "zstd" {
		return testLayer{layertest.Zstd(t, raw, zstd.SpeedDefault), layertest.OCIZstd}
	}
	return testLayer{layertest.Gzip(t, raw, 6), layertest.OCIGzip}
}

// pushed is what a push stored: the manifest and config digests.
type pushed struct{ Digest, ConfigName v1.Hash }

func push(t *testing.T, srv *cairnproc.Server, ref string, layers ...testLayer) pushed {
	t.Helper()
	ls := make([]v1.Layer, len(layers))
	for i, l := range layers {
		ls[i] = static.NewLayer(l.blob, l.mediaType)
	}
	img, err := regtest.OCIImage(ls...)
	if err != nil {
		t.Fatal(err)
	}
	if err := remote.Write(regtest.Ref(t, srv.Addr, ref), img); err != nil {
		t.Fatalf("push %s: %v", ref, err)
	}
	dg, err := img.Digest()
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := img.ConfigName()
	if err != nil {
		t.Fatal(err)
	}
	return pushed{Digest: dg, ConfigName: cfg}
}

func digestOf(t *testing.T, h v1.Hash) digest.Digest {
	t.Helper()
	d, err := digest.Parse(h.String())
	if err != nil {
		t.Fatal(err)
	}
	return d
}

// waitDedup waits until every layer has a recipe, and data exactly when
// keep[layer] (index mode).
func waitDedup(t *testing.T, d driver.Driver, keep map[digest.Digest]bool) {
	t.Helper()
	has := func(p string) bool { return drivertest.Exists(t, d, p) }
	deadline := time.Now().Add(3 * time.Minute) // a hang guard, not a timing assertion
	for {
		done := true
		for l, data := range keep {
			if !has(layout.BlobRecipe(l)) || has(layout.BlobData(l)) != data {
				done = false
			}
		}
		if done {
			return
		}
		if time.Now().After(deadline) {
			t.Fatal("layers not deduplicated after 3 minutes")
		}
		time.Sleep(200 * time.Millisecond)
	}
}

func flip(t *testing.T, d driver.Driver, p string) { t.Helper(); flipAt(t, d, p, -1) }

// flipAt changes the byte at off of the object at p (-1: its middle).
func flipAt(t *testing.T, d driver.Driver, p string, off int64) {
	t.Helper()
	ctx := context.Background()
	b, err := d.GetContent(ctx, p)
	if err != nil {
		t.Fatal(err)
	}
	if off < 0 {
		off = int64(len(b) / 2)
	}
	b[off] ^= 0x20
	if err := d.PutContent(ctx, p, b); err != nil {
		t.Fatal(err)
	}
}

// packedFrame finds file f in the store's packs, from their own indexes:
// dedup stores a file once.
func packedFrame(t *testing.T, d driver.Driver, f digest.Digest) (string, pack.Entry) {
	t.Helper()
	ctx := context.Background()
	var ids []string
	var found []pack.Entry
	err := d.Walk(ctx, layout.PacksDir, func(fi driver.FileInfo) error {
		id, ok := layout.ParsePackPath(fi.Path)
		if !ok || fi.IsDir {
			return nil
		}
		entries, _, err := pack.ObjectIndex(ctx, d, id, fi.Size)
		if err != nil {
			return err
		}
		for _, e := range entries {
			if e.Digest == f {
				ids, found = append(ids, id), append(found, e)
			}
		}
		return nil
	})
	if err != nil || len(found) != 1 {
		t.Fatalf("file %s in packs %v (%v): want one copy", f, ids, err)
	}
	return ids[0], found[0]
}

func remove(t *testing.T, d driver.Driver, p string) {
	t.Helper()
	if _, err := d.Stat(context.Background(), p); err != nil {
		t.Fatalf("%s: %v", p, err)
	}
	if _, err := d.DeleteFiles(context.Background(), []string{p}); err != nil {
		t.Fatal(err)
	}
}

// runScrub runs cairn scrub and returns its exit status and output.
func runScrub(t *testing.T, args ...string) (int, string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute) // hang guard
	defer cancel()
	cmd := exec.CommandContext(ctx, cairnproc.Binary(t), append([]string{"scrub", "--quiet"}, args...)...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	var ee *exec.ExitError
	switch {
	case err == nil:
		return 0, stdout.String()
	case errors.As(err, &ee):
		return ee.ExitCode(), stdout.String() + stderr.String()
	}
	t.Fatalf("cairn scrub: %v\n%s", err, stderr.String())
	return 0, ""
}

func scrubJSON(t *testing.T, wantCode int, args ...string) *scrub.Report {
	t.Helper()
	code, out := runScrub(t, append(args, "--json")...)
	if code != wantCode {
		t.Fatalf("cairn scrub --json exited %d, want %d\n%s", code, wantCode, out)
	}
	var rep scrub.Report
	dec := json.NewDecoder(strings.NewReader(out))
	if err := dec.Decode(&rep); err != nil {
		t.Fatalf("--json output: %v\n%s", err, out)
	}
	return &rep
}

// wantFindings checks that rep holds exactly the findings named by
// "kind path" with their digests, and returns them by that key.
func wantFindings(t *testing.T, rep *scrub.Report, want map[string]string) map[string]scrub.Finding {
	t.Helper()
	got := make(map[string]scrub.Finding)
	for _, f := range rep.Findings {
		got[string(f.Kind)+" "+f.Path] = f
	}
	ok := len(got) == len(want) && len(rep.Findings) == len(want)
	for k, dg := range want {
		if f, has := got[k]; !has || f.Digest != dg {
			ok = false
		}
	}
	if !ok {
		var lines []string
		for _, f := range rep.Findings {
			lines = append(lines, fmt.Sprintf("%s %s %s: %s", f.Kind, f.Path, f.Digest, f.Detail))
		}
		t.Fatalf("findings:\n  %s\nwant %v", strings.Join(lines, "\n  "), want)
	}
	return got
}

// getBlob GETs blob d of repo.
func getBlob(t *testing.T, srv *cairnproc.Server, repo string, d digest.Digest) []byte {
	t.Helper()
	r := regtest.Do(t, http.DefaultClient, http.MethodGet, srv.URL+"/v2/"+repo+"/blobs/"+d.String(), nil)
	if r.Status != http.StatusOK {
		t.Fatalf("GET %s blob %s: %v", repo, d, r)
	}
	return r.Body
}
