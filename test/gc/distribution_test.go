package gc

import (
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"syscall"
	"testing"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/random"
	"github.com/google/go-containerregistry/pkg/v1/remote"

	"github.com/cairn-registry/cairn/internal/testutil/cairnproc"
)

// TestDistributionWrittenTree runs distribution/distribution's registry
// (CAIRN_DISTRIBUTION_BIN; skipped without it), fills it, and collects its
// storage with `cairn gc --delete-untagged`: cairn must delete exactly what
// distribution's own garbage-collect finds eligible, after which
// distribution finds nothing more and still serves every tag byte-exact.
func TestDistributionWrittenTree(t *testing.T) {
	bin := os.Getenv("CAIRN_DISTRIBUTION_BIN")
	if bin == "" {
		t.Skip("CAIRN_DISTRIBUTION_BIN is not set (go install github.com/distribution/distribution/v3/cmd/registry@v3.0.0)")
	}
	dir := t.TempDir()
	root := filepath.Join(dir, "root")
	addr := cairnproc.FreeAddr(t)
	cfg := filepath.Join(dir, "config.yml")
	err := os.WriteFile(cfg, fmt.Appendf(nil, "version: 0.1\nlog:\n  level: warn\nstorage:\n  filesystem:\n    rootdirectory: %s\n  delete:\n    enabled: true\nhttp:\n  addr: %s\n", root, addr), 0o644)
	if err != nil {
		t.Fatal(err)
	}
	ctx := t.Context()
	tr := http.DefaultTransport.(*http.Transport).Clone()
	opts := []remote.Option{remote.WithContext(ctx), remote.WithTransport(tr)}
	ref := func(s string) name.Reference {
		r, err := name.ParseReference(addr+"/"+s, name.Insecure)
		if err != nil {
			t.Fatal(err)
		}
		return r
	}

	stop := serveDistribution(t, bin, cfg, addr)
	images := map[string]v1.Image{}
	for _, tag := range []string{"lib/app:v1", "lib/app:v2", "lib/app:v2", "lib/other:x", "lib/other:y"} {
		img, _ := random.Image(2048, 2)
		if err := remote.Write(ref(tag), img, opts...); err != nil {
			t.Fatal(err)
		}
		images[tag] = img // the second lib/app:v2 untags the first
	}
	idx := mutate.AppendManifests(empty.Index, mutate.IndexAddendum{Add: images["lib/app:v1"]}, mutate.IndexAddendum{Add: images["lib/app:v2"]})
	if err := remote.WriteIndex(ref("lib/app:multi"), idx, opts...); err != nil {
		t.Fatal(err)
	}
	if err := remote.Delete(ref("lib/other:y"), opts...); err != nil {
		t.Fatal(err)
	}
	delete(images, "lib/other:y")
	tr.CloseIdleConnections()
	stop()

	blobs, manifests := distributionEligible(t, bin, cfg)
	if blobs == 0 || manifests == 0 {
		t.Fatalf("distribution finds nothing to collect (%d blobs, %d manifests): the test sets up nothing", blobs, manifests)
	}
	rep := runGC(t, root, "--delay", "0s", "--delete-untagged")
	if rep.Deleted.Blobs != int64(blobs) || rep.Deleted.Manifests != int64(manifests) {
		t.Errorf("cairn deleted %d blobs and %d manifests; distribution finds %d and %d eligible", rep.Deleted.Blobs, rep.Deleted.Manifests, blobs, manifests)
	}
	if b, m := distributionEligible(t, bin, cfg); b != 0 || m != 0 {
		t.Errorf("after cairn gc, distribution still finds %d blobs and %d manifests eligible", b, m)
	}

	stop = serveDistribution(t, bin, cfg, addr)
	defer stop()
	for tag, img := range images {
		got, err := remote.Image(ref(tag), opts...)
		if err != nil {
			t.Fatalf("distribution serving %s after cairn gc: %v", tag, err)
		}
		if gd, _ := got.Digest(); gd != mustHash(t, img) {
			t.Errorf("%s: %s, want %s", tag, gd, mustHash(t, img))
		}
		layers, _ := got.Layers()
		for _, l := range layers {
			rc, err := l.Compressed()
			if err != nil {
				t.Fatalf("%s: %v", tag, err)
			}
			rc.Close()
		}
	}
	if _, err := remote.Index(ref("lib/app:multi"), opts...); err != nil {
		t.Error(err)
	}
}

func mustHash(t *testing.T, img v1.Image) v1.Hash {
	d, err := img.Digest()
	if err != nil {
		t.Fatal(err)
	}
	return d
}

var eligibleRE = regexp.MustCompile(`(\d+) blobs and (\d+) manifests eligible for deletion`)

// distributionEligible runs distribution's garbage-collect --dry-run.
func distributionEligible(t *testing.T, bin, cfg string) (blobs, manifests int) {
	t.Helper()
	out, err := exec.Command(bin, "garbage-collect", "--dry-run", "--delete-untagged", cfg).CombinedOutput()
	if err != nil {
		t.Fatalf("registry garbage-collect: %v\n%s", err, out)
	}
	m := eligibleRE.FindSubmatch(out)
	if m == nil {
		t.Fatalf("registry garbage-collect printed no summary:\n%s", out)
	}
	fmt.Sscan(string(m[1]), &blobs)
	fmt.Sscan(string(m[2]), &manifests)
	return blobs, manifests
}

// serveDistribution starts distribution's registry and returns a function
// that stops it by PID.
func serveDistribution(t *testing.T, bin, cfg, addr string) (stop func()) {
	t.Helper()
	cmd := exec.Command(bin, "serve", cfg)
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() { cmd.Wait(); close(done) }()
	stop = func() {
		select {
		case <-done:
			return
		default:
		}
		_ = cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			_ = cmd.Process.Kill()
			<-done
		}
	}
	t.Cleanup(stop)
	deadline := time.Now().Add(20 * time.Second)
	for time.Now().Before(deadline) {
		resp, err := http.Get("http://" + addr + "/v2/")
		if err == nil {
			resp.Body.Close()
			return stop
		}
		time.Sleep(50 * time.Millisecond)
	}
	t.Fatal("distribution's registry did not start")
	return nil
}
