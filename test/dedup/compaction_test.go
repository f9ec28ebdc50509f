package dedup

import (
	"archive/tar"
	"errors"
	"fmt"
	"net/http"
	"os/exec"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cairn-registry/cairn/internal/testutil/cairnproc"
	"github.com/cairn-registry/cairn/internal/testutil/layertest"
	"github.com/cairn-registry/cairn/internal/testutil/objstore"
	"github.com/cairn-registry/cairn/internal/testutil/regtest"
	"github.com/cairn-registry/cairn/internal/testutil/testenv"
)

// redisConfig writes a config for nodes sharing one root: mode full,
// metadata in Redis under a fresh prefix, and extra: YAML under
// storage.dedup (lines after the first indented by four spaces).
func redisConfig(t *testing.T, extra string) string {
	t.Helper()
	addr := testenv.RedisAddr(t)
	prefix := objstore.RandomName("cairn-test-") + ":"
	return cairnproc.WriteConfig(t, fmt.Sprintf(`version: 0.1
log: {level: debug}
storage:
  filesystem: {rootdirectory: /unused}
  dedup:
    mode: full
    metadata: {redis: {addr: %q, prefix: %q}}
    %s
`, addr, prefix, extra))
}

// deleteTag deletes repo:v1.
func deleteTag(t *testing.T, srv *cairnproc.Server, repo string) {
	t.Helper()
	if r := regtest.Do(t, http.DefaultClient, http.MethodDelete, srv.URL+"/v2/"+repo+"/manifests/v1", nil); r.Status != http.StatusAccepted {
		t.Fatalf("DELETE %s:v1: %v", repo, r)
	}
}

// load pushes new images to one node and pulls kept ones from both, byte
// for byte, until stopped; it returns the images it pushed and the first
// failure.
type load struct {
	rounds atomic.Int64
	stop   chan struct{}
	done   sync.WaitGroup
	mu     sync.Mutex
	err    error
	pushed map[string][]testLayer
}

func startLoad(t *testing.T, nodes []*cairnproc.Server, kept map[string][]testLayer) *load {
	l := &load{stop: make(chan struct{}), pushed: map[string][]testLayer{}}
	l.done.Add(1)
	go func() {
		defer l.done.Done()
		for n := 0; ; n++ {
			select {
			case <-l.stop:
				return
			default:
			}
			repo := fmt.Sprintf("load/new%d", n)
			layers := []testLayer{{name: repo, mediaType: mtGzip, blob: gzipStd(t, featureTar(t, 300+n, tar.FormatPAX), 6)}}
			err := pushErr(nodes[n%2], repo, layers)
			for try := 0; err != nil && strings.Contains(err.Error(), "MANIFEST_BLOB_UNKNOWN") && try < 3; try++ {
				// A push whose blobs were uploaded before a run's mark
				// began, and whose manifest came after its sweep, finds
				// them collected (--delay 0s): it fails cleanly, and a
				// client pushes the blobs again (package gc's protocol).
				err = pushErr(nodes[n%2], repo, layers)
			}
			if err == nil {
				l.mu.Lock()
				l.pushed[repo] = layers
				l.mu.Unlock()
			}
			for repo, layers := range kept {
				if err != nil {
					break
				}
				err = pullErr(nodes[(n+1)%2], repo, layers)
			}
			if err != nil {
				l.mu.Lock()
				l.err = err
				l.mu.Unlock()
				return
			}
			l.rounds.Add(1)
		}
	}()
	return l
}

// finish stops the load after at least three rounds (a push and the
// pulls each) and checks it saw no failure.
func (l *load) finish(t *testing.T) map[string][]testLayer {
	t.Helper()
	for l.rounds.Load() < 3 && l.failed() == nil {
		time.Sleep(10 * time.Millisecond)
	}
	close(l.stop)
	l.done.Wait()
	if l.err != nil {
		t.Fatalf("pushes and pulls during GC: %v", l.err)
	}
	return l.pushed
}

func (l *load) failed() error {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.err
}

// TestCompactionUnderLoad (issue 11): two nodes on Redis metadata hold
// deduplicated images; half are deleted, and `cairn gc` runs twice at once,
// then once more, while both nodes take pushes and serve pulls. Packs left sparse are compacted,
// empty ones deleted, space comes back, and every remaining image pulls
// byte-exact from either node. Then `cairn gc` is killed (-9) while it
// compacts, and two more runs finish the job.
func TestCompactionUnderLoad(t *testing.T) {
	cfg := redisConfig(t, "packs: {compactbelow: 0.9}\n    workers: 2")
	root := t.TempDir()
	a := cairnproc.Start(t, root, "--config", cfg)
	b := cairnproc.Start(t, root, "--config", cfg)
	nodes := []*cairnproc.Server{a, b}
	images := map[string][]testLayer{}
	var all []testLayer
	for i, l := range allLayers(t)[:12] {
		repo := fmt.Sprintf("load/img%d", i)
		images[repo] = []testLayer{l}
		all = append(all, l)
		push(t, nodes[i%2], repo, images[repo])
	}
	waitState(t, root, all, false)
	before := storedFileBytes(t, root)

	kept := map[string][]testLayer{}
	for i := range 12 {
		repo := fmt.Sprintf("load/img%d", i)
		if i%2 == 0 {
			deleteTag(t, b, repo)
		} else {
			kept[repo] = images[repo]
		}
	}
	gcArgs := []string{"--config", cfg, "--root", root, "--delay", "0s", "--delete-untagged"}
	ld := startLoad(t, nodes, kept)
	// Two runs at once (two nodes' schedules, or an operator's CLI beside
	// one), then one more.
	var first, other gcReport
	var errs [2]error
	var wg sync.WaitGroup
	bin := cairnproc.Binary(t)
	wg.Go(func() { first, errs[0] = gcRun(bin, gcArgs...) })
	wg.Go(func() { other, errs[1] = gcRun(bin, gcArgs...) })
	wg.Wait()
	if err := errors.Join(errs[:]...); err != nil {
		t.Fatal(err)
	}
	first.Deleted.DedupFiles += other.Deleted.DedupFiles
	first.Packs.Compacted += other.Packs.Compacted
	first.Packs.Deleted += other.Packs.Deleted
	second := runGC(t, gcArgs...)
	pushed := ld.finish(t)
	t.Logf("under load: first gc %+v / %+v, second %+v; %d images pushed meanwhile", first.Deleted, first.Packs, second.Packs, len(pushed))
	// Which layer packed the files all images share depends on which
	// worker came first: if a deleted one did, its pack is left sparse and
	// compacted, otherwise only emptied packs go (with --delay 0s, in the
	// run that emptied them or the next). Either way packs go.
	if first.Deleted.DedupFiles == 0 || first.Packs.Compacted+first.Packs.Deleted+second.Packs.Compacted+second.Packs.Deleted == 0 {
		t.Fatalf("gc under load freed no pack: first %+v, second %+v", first.Packs, second.Packs)
	}
	if after := storedFileBytes(t, root); after >= before {
		t.Fatalf("file store: %d bytes before, %d after; want space back", before, after)
	}
	for repo, layers := range kept {
		pullAll(t, a, repo, layers)
		pullAll(t, b, repo, layers)
	}
	for repo, layers := range pushed {
		pullAll(t, a, repo, layers)
		kept[repo] = layers
	}

	// Images whose packs end up sparse: each P holds six large files of
	// its own, each Q two of P's. Deleting every P leaves each P's pack a
	// third live; a run is killed as it writes its first new pack
	// (compaction), and two more runs finish.
	var ps []string
	for k := range 6 {
		var bodies [][]byte
		for i := range 6 {
			bodies = append(bodies, content(uint64(5000+10*k+i), 1_500_000))
		}
		p, q := fmt.Sprintf("load/p%d", k), fmt.Sprintf("load/q%d", k)
		pl := []testLayer{{name: p, mediaType: mtGzip, blob: gzipStd(t, tarOf(t, bodies), 1)}}
		push(t, a, p, pl)
		waitState(t, root, pl, false)
		kept[q] = []testLayer{{name: q, mediaType: mtGzip, blob: gzipStd(t, tarOf(t, bodies[:2]), 1)}}
		push(t, b, q, kept[q])
		ps = append(ps, p)
	}
	var leftovers []testLayer
	for _, layers := range kept {
		leftovers = append(leftovers, layers...)
	}
	waitState(t, root, leftovers, false)
	for _, p := range ps {
		deleteTag(t, a, p)
	}
	killed := killGCWhileCompacting(t, root, gcArgs)
	third := runGC(t, gcArgs...)
	fourth := runGC(t, gcArgs...)
	t.Logf("after a kill -9 (%s): gc %+v, then %+v", killed, third.Packs, fourth.Packs)
	if third.Packs.Compacted+fourth.Packs.Compacted == 0 && !strings.HasPrefix(killed, "killed") {
		t.Fatalf("no run compacted the sparse packs: %+v, %+v", third.Packs, fourth.Packs)
	}
	for repo, layers := range kept {
		pullAll(t, a, repo, layers)
		pullAll(t, b, repo, layers)
	}
	// The emptied packs are gone; what is stored is live or young.
	if rep := runGC(t, gcArgs...); rep.Packs.Compacted != 0 {
		t.Fatalf("a fifth run still found sparse packs: %+v", rep.Packs)
	}
}

// tarOf is a tar of the bodies as files, in order.
func tarOf(t *testing.T, bodies [][]byte) []byte {
	t.Helper()
	w := layertest.NewWriter(t, tar.FormatUnknown, time.Unix(1700000000, 0))
	for i, b := range bodies {
		w.Add(&tar.Header{Typeflag: tar.TypeReg, Name: fmt.Sprintf("data/%d.bin", i), Mode: 0o644, Size: int64(len(b))}, b)
	}
	return w.Close()
}

// killGCWhileCompacting starts `cairn gc` and kills it (-9) as soon as a
// new pack object appears (a compaction writing), or lets it finish when
// none does; it says which happened.
func killGCWhileCompacting(t *testing.T, root string, gcArgs []string) string {
	t.Helper()
	old := packsUnder(t, root)
	cmd := exec.Command(cairnproc.Binary(t), append([]string{"gc", "--quiet"}, gcArgs...)...)
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	for {
		select {
		case err := <-exited:
			if err != nil {
				t.Fatalf("cairn gc: %v", err)
			}
			return "the run ended before it wrote a pack"
		default:
		}
		for id := range packsUnder(t, root) {
			if _, seen := old[id]; !seen {
				cmd.Process.Kill()
				<-exited
				return "killed while writing pack " + id
			}
		}
		time.Sleep(time.Millisecond)
	}
}
