package dataset_test

import (
	"archive/tar"
	"bytes"
	"context"
	"errors"
	"io"
	"net/http"
	"os"
	"os/exec"
	"strings"
	"testing"

	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/opencontainers/go-digest"

	"github.com/cairn-registry/cairn/internal/bench/dataset"
	"github.com/cairn-registry/cairn/internal/testutil/cairnproc"
)

func TestMain(m *testing.M) { os.Exit(cairnproc.Main(m)) }

// buildSmall builds the small profile into a fresh work dir, sharing the
// deb cache with every other run (debs are keyed by name and version).
func buildSmall(t *testing.T) *dataset.Dataset {
	t.Helper()
	if _, err := exec.LookPath("apt-get"); err != nil {
		t.Skip("apt-get not installed: the dataset is built from Debian packages")
	}
	ds, err := dataset.Build(context.Background(), dataset.Options{
		Profile:  dataset.ProfileSmall,
		CacheDir: os.Getenv("CAIRN_DATASET_CACHE"),
		WorkDir:  t.TempDir(),
		Log:      testWriter{t},
	})
	if errors.Is(err, dataset.ErrNoApt) {
		t.Skipf("skipping: %v", err)
	}
	if err != nil {
		t.Fatal(err)
	}
	return ds
}

type testWriter struct{ t *testing.T }

func (w testWriter) Write(b []byte) (int, error) {
	w.t.Log(strings.TrimSuffix(string(b), "\n"))
	return len(b), nil
}

func TestSmallIsDeterministic(t *testing.T) {
	a, b := buildSmall(t), buildSmall(t)
	if len(a.Images) != len(b.Images) || len(a.Images) < 3 {
		t.Fatalf("builds made %d and %d images, want the same number >= 3", len(a.Images), len(b.Images))
	}
	for i := range a.Images {
		x, y := a.Images[i], b.Images[i]
		if x.Digest != y.Digest {
			t.Errorf("%s:%s: manifest %s, then %s", x.Repo, x.Tag, x.Digest, y.Digest)
		}
		for j := range x.Layers {
			if x.Layers[j].Digest != y.Layers[j].Digest {
				t.Errorf("%s:%s layer %d (%s): %s, then %s", x.Repo, x.Tag, j, x.Layers[j].Description, x.Layers[j].Digest, y.Layers[j].Digest)
			}
		}
	}
}

func TestSmallLayers(t *testing.T) {
	ds := buildSmall(t)
	comps := map[dataset.Compression]int{}
	mediaTypes := map[string]int{}
	for _, im := range ds.Images {
		if got := digest.FromBytes(im.Manifest); got != im.Digest {
			t.Errorf("%s:%s: manifest hashes to %s, Digest says %s", im.Repo, im.Tag, got, im.Digest)
		}
		if len(im.Layers) < 2 {
			t.Errorf("%s:%s has %d layers, want a base and more", im.Repo, im.Tag, len(im.Layers))
		}
		for _, l := range im.Layers {
			mediaTypes[l.MediaType]++
		}
	}
	for _, l := range ds.Layers {
		comps[l.Compression]++
		checkBlob(t, l)
		checkTar(t, l)
	}
	for _, c := range []dataset.Compression{dataset.GzipStdlib, dataset.GzipPgzip, dataset.Zstd, dataset.Uncompressed} {
		if comps[c] == 0 {
			t.Errorf("no %s layer in the small profile", c)
		}
	}
	if _, err := exec.LookPath("gzip"); err == nil && comps[dataset.GzipGNU] != 1 {
		t.Errorf("%d layers compressed by GNU gzip, want 1", comps[dataset.GzipGNU])
	}
	for _, mt := range []string{dataset.MediaTypeDockerLayer, dataset.MediaTypeOCILayerGzip, dataset.MediaTypeOCILayerZstd, dataset.MediaTypeOCILayer} {
		if mediaTypes[mt] == 0 {
			t.Errorf("no layer of media type %s", mt)
		}
	}
	// The same base tar compressed three ways: one diff ID, three blobs.
	byDiff := map[digest.Digest]map[digest.Digest]bool{}
	for _, l := range ds.Layers {
		if byDiff[l.DiffID] == nil {
			byDiff[l.DiffID] = map[digest.Digest]bool{}
		}
		byDiff[l.DiffID][l.Digest] = true
	}
	if base := ds.Images[0].Layers[0]; len(byDiff[base.DiffID]) < 3 {
		t.Errorf("base layer is %d distinct blobs, want >= 3 (gzip, pgzip, zstd)", len(byDiff[base.DiffID]))
	}
}

// checkBlob verifies the blob's digest and size, and that it decompresses
// to the layer's tar.
func checkBlob(t *testing.T, l *dataset.Layer) {
	t.Helper()
	f, err := l.Open()
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	raw, err := io.ReadAll(f)
	if err != nil {
		t.Fatal(err)
	}
	if int64(len(raw)) != l.Size || digest.FromBytes(raw) != l.Digest {
		t.Errorf("%s: blob is %d bytes hashing to %s, want %d and %s", l.Description, len(raw), digest.FromBytes(raw), l.Size, l.Digest)
	}
	cmd := map[dataset.Compression][]string{
		dataset.GzipStdlib: {"gzip", "-dc"}, dataset.GzipPgzip: {"gzip", "-dc"},
		dataset.GzipGNU: {"gzip", "-dc"}, dataset.Zstd: {"zstd", "-dc"},
	}[l.Compression]
	if cmd == nil {
		return
	}
	if _, err := exec.LookPath(cmd[0]); err != nil {
		return // decompression is checked where the tool exists
	}
	c := exec.Command(cmd[0], cmd[1:]...)
	c.Stdin = bytes.NewReader(raw)
	out, err := c.Output()
	if err != nil {
		t.Errorf("%s (%s): %s cannot decompress it: %v", l.Description, l.Compression, cmd[0], err)
		return
	}
	if digest.FromBytes(out) != l.DiffID {
		t.Errorf("%s (%s): decompresses to %s, diff ID is %s", l.Description, l.Compression, digest.FromBytes(out), l.DiffID)
	}
}

// checkTar reads the whole layer tar: names clean and unique, parents before
// children, hard links after their targets, regular files matching the
// layer's file count.
func checkTar(t *testing.T, l *dataset.Layer) {
	t.Helper()
	f, err := l.OpenTar()
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	seen := map[string]byte{}
	files, links, dirs := 0, 0, 0
	tr := tar.NewReader(f)
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatalf("%s: %v", l.Description, err)
		}
		n := strings.TrimSuffix(h.Name, "/")
		if n == "" || strings.HasPrefix(n, "/") || strings.HasPrefix(n, "./") || strings.Contains(n, "..") {
			t.Errorf("%s: bad member name %q", l.Description, h.Name)
		}
		if _, dup := seen[n]; dup {
			t.Errorf("%s: %q twice", l.Description, n)
		}
		if i := strings.LastIndexByte(n, '/'); i > 0 && seen[n[:i]] != tar.TypeDir {
			t.Errorf("%s: %q comes before its directory", l.Description, n)
		}
		seen[n] = h.Typeflag
		switch h.Typeflag {
		case tar.TypeReg:
			if h.Size > 0 {
				files++
			}
		case tar.TypeLink:
			links++
			if seen[h.Linkname] != tar.TypeReg {
				t.Errorf("%s: hard link %q to %q, which is not an earlier file", l.Description, n, h.Linkname)
			}
		case tar.TypeDir:
			dirs++
		}
	}
	if files != l.Files || files == 0 || dirs == 0 {
		t.Errorf("%s: %d files with content and %d dirs, layer says %d files", l.Description, files, dirs, l.Files)
	}
	if strings.Contains(l.Description, "apt-get install") && seen["var/lib/dpkg/status"] != tar.TypeReg {
		t.Errorf("%s: no var/lib/dpkg/status", l.Description)
	}
}

// TestPushSmall pushes the small profile to a real cairn with
// go-containerregistry and reads every manifest and blob back unchanged.
func TestPushSmall(t *testing.T) {
	ds := buildSmall(t)
	srv := cairnproc.Start(t, "")
	ctx := context.Background()
	if err := dataset.Push(ctx, srv.URL, ds.Images, dataset.PushOptions{}); err != nil {
		t.Fatal(err)
	}
	for _, im := range ds.Images {
		ref, err := name.ParseReference(srv.Addr+"/"+im.Repo+":"+im.Tag, name.Insecure)
		if err != nil {
			t.Fatal(err)
		}
		desc, err := remote.Get(ref, remote.WithContext(ctx))
		if err != nil {
			t.Fatalf("%s:%s: %v", im.Repo, im.Tag, err)
		}
		if !bytes.Equal(desc.Manifest, im.Manifest) || string(desc.MediaType) != im.ManifestMediaType {
			t.Errorf("%s:%s: registry serves a different manifest (%s)", im.Repo, im.Tag, desc.MediaType)
		}
	}
	for _, l := range ds.Layers[:min(len(ds.Layers), 4)] {
		var repo string
		for _, im := range ds.Images {
			for _, il := range im.Layers {
				if il.Digest == l.Digest && repo == "" {
					repo = im.Repo
				}
			}
		}
		resp, err := http.Get(srv.URL + "/v2/" + repo + "/blobs/" + l.Digest.String())
		if err != nil {
			t.Fatal(err)
		}
		body, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		if err != nil || resp.StatusCode != http.StatusOK || digest.FromBytes(body) != l.Digest {
			t.Errorf("GET blob %s from %s: status %d, %d bytes, err %v", l.Digest, repo, resp.StatusCode, len(body), err)
		}
	}
}
