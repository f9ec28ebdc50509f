package dedup

import (
	"archive/tar"
	"fmt"
	"math/rand/v2"
	"net/http"
	"path/filepath"
	"testing"
	"time"

	"github.com/cairn-registry/cairn/internal/testutil/cairnproc"
)

// TestGCDuringDedup runs scheduled GC every second with no delay while
// images sharing most of their files are pushed, deduplicated, deleted and
// pushed again: files are released, tombstoned, deleted and revived under
// the dedup worker's feet. Every image whose last push succeeded pulls
// byte-exact at the end, from a restarted server too.
func TestGCDuringDedup(t *testing.T) {
	const variants = 6
	imgs := make([][]testLayer, variants)
	for v := range variants {
		imgs[v] = []testLayer{{name: fmt.Sprintf("v%d", v), mediaType: mtGzip, blob: gzipStd(t, featureTar(t, 50+v, tar.FormatPAX), 6)}}
	}
	cfg, debug := writeConfig(t, "full", "  gc: {enabled: true, interval: 1s, delay: 0s, deleteuntagged: true}\n")
	srv := cairnproc.Start(t, "", "--config", cfg)
	r := rand.New(rand.NewPCG(uint64(time.Now().UnixNano()), 9))
	live := make([]bool, variants)
	repo := func(v int) string { return fmt.Sprintf("race/img%d", v) }
	deadline := time.Now().Add(15 * time.Second)
	pushes, deletes, retries := 0, 0, 0
	for time.Now().Before(deadline) {
		v := r.IntN(variants)
		if live[v] && r.IntN(3) == 0 {
			req, _ := http.NewRequest(http.MethodDelete, srv.URL+"/v2/"+repo(v)+"/manifests/v1", nil)
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			resp.Body.Close()
			if resp.StatusCode == http.StatusAccepted {
				live[v] = false
				deletes++
			}
			continue
		}
		// A push racing GC with no delay may be refused; clients retry.
		var err error
		for try := 0; try < 5; try++ {
			if err = pushErr(srv, repo(v), imgs[v]); err == nil {
				break
			}
			retries++
		}
		if err != nil {
			t.Fatalf("push %s failed 5 times: %v", repo(v), err)
		}
		live[v] = true
		pushes++
		time.Sleep(time.Duration(r.IntN(300)) * time.Millisecond)
	}
	gcRuns := metric(t, debug, `cairn_gc_runs_total{result="ok"}`)
	freed := metric(t, debug, `cairn_gc_deleted_total{kind="dedup_files"}`)
	deferred := metric(t, debug, `cairn_dedup_layers_total{outcome="deferred"}`)
	t.Logf("%d pushes (%d retries), %d deletes; %v GC runs deleted %v unique files; %v dedups deferred behind a GC run",
		pushes, retries, deletes, gcRuns, freed, deferred)
	if freed == 0 {
		t.Errorf("GC deleted no unique file while images were deleted (%v runs)", gcRuns)
	}

	check := func(srv *cairnproc.Server) {
		for v := range variants {
			if live[v] {
				pullAll(t, srv, repo(v), imgs[v])
			}
		}
	}
	check(srv)
	var liveLayers []testLayer
	for v := range variants {
		if live[v] {
			liveLayers = append(liveLayers, imgs[v]...)
		}
	}
	waitState(t, srv.Root, liveLayers, false, 3*time.Minute)
	check(srv)
	// Let GC run a few more times over the settled state, then restart.
	time.Sleep(3 * time.Second)
	check(srv)
	srv.Stop()
	if left, _ := filepath.Glob(filepath.Join(srv.Root, "cairn-cache", "spool", "*")); len(left) > 0 {
		t.Errorf("spool files left after a clean stop: %v", left)
	}
	srv = cairnproc.Start(t, srv.Root, "--config", cfg)
	check(srv)
}
