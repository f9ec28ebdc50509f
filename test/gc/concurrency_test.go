package gc

import (
	"fmt"
	"math/rand/v2"
	"os"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/random"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/types"

	"github.com/cairn-registry/cairn/internal/testutil/cairnproc"
	"github.com/cairn-registry/cairn/internal/testutil/objstore"
	"github.com/cairn-registry/cairn/internal/testutil/regtest"
	"github.com/cairn-registry/cairn/internal/testutil/testenv"
)

// pushed is what a tag must name after the test: the last push to it that
// succeeded.
type pushed struct {
	digest string
	image  bool
}

// TestConcurrentPushesAndGC runs pushes of new images, indexes and re-tags
// of older (by then untagged, perhaps collected) images through two cairn
// nodes sharing one storage root, while `cairn gc --delay 0s
// --delete-untagged` runs again and again in its own process: only the
// "written after the mark began" rule and the journal protect the pushes.
// Afterwards every tag names the image of its last successful push, and
// that image pulls byte-exact from both nodes.
// CAIRN_GC_CONC_SECONDS sets how long pushes run (default 12).
func TestConcurrentPushesAndGC(t *testing.T) {
	dur := 12 * time.Second
	if s := os.Getenv("CAIRN_GC_CONC_SECONDS"); s != "" {
		n, err := strconv.Atoi(s)
		if err != nil {
			t.Fatal(err)
		}
		dur = time.Duration(n) * time.Second
	}
	// The nodes share link versions in Redis, as nodes behind a load
	// balancer must: a tag one node moves is moved on the other at once.
	// Without it a node trusts its cached links for tagttl (an hour here,
	// to make it show), and a client whose HEAD it answers from them may
	// skip a PUT it needed.
	cfg := cairnproc.WriteConfig(t, fmt.Sprintf("redis:\n  addrs: [%s]\n  prefix: %q\n"+
		"storage:\n  delete:\n    enabled: true\n  cache:\n    manifests:\n      tagttl: 1h\n",
		testenv.RedisAddr(t), objstore.RandomName("cairn-test-")+":"))
	root := t.TempDir()
	nodes := []*node{startNode(t, root, "--config", cfg), startNode(t, root, "--config", cfg)}
	ctx := t.Context()

	shared, err := random.Layer(2048, types.OCILayer)
	if err != nil {
		t.Fatal(err)
	}
	const workers = 4
	var (
		mu       sync.Mutex
		want     = map[string]pushed{} // repo:tag
		ok, fail atomic.Int64
		wg       sync.WaitGroup
		stop     = make(chan struct{})
	)
	for w := range workers {
		wg.Go(func() {
			rnd := rand.New(rand.NewPCG(uint64(w), 42))
			repo := fmt.Sprintf("conc/w%d", w)
			var older []v1.Image
			for i := 0; ; i++ {
				select {
				case <-stop:
					return
				default:
				}
				n := nodes[i%len(nodes)]
				tag := "t" + strconv.Itoa(rnd.IntN(3))
				var push func() error
				var desc pushed
				switch op := rnd.IntN(10); {
				case op < 5 || len(older) == 0:
					img := newImage(t, rnd, shared)
					older = append(older, img)
					desc = pushed{digest: digestOf(t, img), image: true}
					push = func() error { return remote.Write(n.ref(t, repo+":"+tag), img, n.opts(ctx)...) }
				case op < 8: // re-tag an older image: untagged by now, perhaps collected
					img := older[rnd.IntN(len(older))]
					desc = pushed{digest: digestOf(t, img), image: true}
					push = func() error { return remote.Write(n.ref(t, repo+":"+tag), img, n.opts(ctx)...) }
				default:
					idx := mutate.AppendManifests(empty.Index,
						mutate.IndexAddendum{Add: newImage(t, rnd, shared), Descriptor: v1.Descriptor{Platform: &v1.Platform{OS: "linux", Architecture: "amd64"}}},
						mutate.IndexAddendum{Add: newImage(t, rnd, shared), Descriptor: v1.Descriptor{Platform: &v1.Platform{OS: "linux", Architecture: "arm64"}}})
					desc = pushed{digest: digestOf(t, idx)}
					push = func() error { return remote.WriteIndex(n.ref(t, repo+":"+tag), idx, n.opts(ctx)...) }
				}
				// A push whose blobs a GC run collected between the
				// client's HEAD and its manifest PUT fails cleanly; the
				// client pushes again and uploads them anew.
				var err error
				for range 3 {
					if err = push(); err == nil {
						break
					}
				}
				if err != nil {
					fail.Add(1)
					t.Logf("push %s:%s failed 3 times: %v", repo, tag, err)
					continue
				}
				ok.Add(1)
				mu.Lock()
				want[repo+":"+tag] = desc
				mu.Unlock()
				if len(older) > 8 {
					older = older[1:]
				}
			}
		})
	}

	var runs int
	var deleted, blobs int64
	deadline := time.Now().Add(dur)
	for time.Now().Before(deadline) {
		rep, out, err := tryGC(root, "--config", cfg, "--delay", "0s", "--delete-untagged", "--concurrency", "4")
		if err != nil {
			close(stop)
			wg.Wait()
			t.Fatalf("gc run %d while pushing: %v\n%s", runs+1, err, out)
		}
		runs++
		deleted += rep.Deleted.Manifests
		blobs += rep.Deleted.Blobs
		if len(rep.Problems) > 0 {
			t.Errorf("gc run %d reported problems %v %v", runs, rep.Problems, rep.Examples)
		}
	}
	close(stop)
	wg.Wait()
	final := runGC(t, root, "--config", cfg, "--delay", "0s", "--delete-untagged")
	deleted += final.Deleted.Manifests

	for key, p := range want {
		repo, tag := splitRef(key)
		for i, n := range nodes {
			if err := n.pullTree(ctx, repo, tag, p.digest); err != nil {
				t.Errorf("node %d: %v", i, err)
			}
			if p.image {
				if err := n.pullImage(ctx, t, repo, tag, p.digest); err != nil {
					t.Errorf("node %d: %v", i, err)
				}
			}
		}
	}
	t.Logf("%d pushes succeeded, %d failed; %d gc runs deleted %d manifests and %d blobs; %d tags verified",
		ok.Load(), fail.Load(), runs+1, deleted, blobs, len(want))
	if runs < 3 || deleted == 0 || ok.Load() == 0 {
		t.Errorf("the test did not exercise GC under pushes: %d runs, %d manifests deleted, %d pushes", runs, deleted, ok.Load())
	}
	if fail.Load() > ok.Load()/4 {
		t.Errorf("%d of %d pushes failed even after retries", fail.Load(), fail.Load()+ok.Load())
	}
}

// newImage is an OCI image of a random layer and, one time in three,
// shared. It reports errors with t.Error: pushers call it from their own
// goroutines.
func newImage(t *testing.T, rnd *rand.Rand, shared v1.Layer) v1.Image {
	l, err := random.Layer(int64(500+rnd.IntN(4000)), types.OCILayer)
	if err != nil {
		t.Error(err)
		return empty.Image
	}
	ls := []v1.Layer{l}
	if rnd.IntN(3) == 0 {
		ls = append(ls, shared)
	}
	img, err := regtest.OCIImage(ls...)
	if err != nil {
		t.Error(err)
	}
	return img
}

func digestOf(t *testing.T, x interface{ Digest() (v1.Hash, error) }) string {
	d, err := x.Digest()
	if err != nil {
		t.Error(err)
	}
	return d.String()
}

func splitRef(s string) (repo, tag string) {
	for i := len(s) - 1; i >= 0; i-- {
		if s[i] == ':' {
			return s[:i], s[i+1:]
		}
	}
	return s, ""
}
