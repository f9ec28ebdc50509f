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
	"github.com/cairn-registry/cairn/internal/testutil/poll"
	"github.com/cairn-registry/cairn/internal/testutil/regtest"
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
	srv, cfg, debug := startDedup(t, "full", "  gc: {enabled: true, interval: 1s, delay: 0s, deleteuntagged: true}\n")
	r := rand.New(rand.NewPCG(uint64(time.Now().UnixNano()), 9))
	live := make([]bool, variants)
	repo := func(v int) string { return fmt.Sprintf("race/img%d", v) }
	// A fixed number of operations, not a wall-clock span: a busy machine
	// does the same work, only slower.
	const ops = 60
	pushes, deletes, retries := 0, 0, 0
	// A push racing GC with no delay may be refused; clients retry.
	pushRetry := func(v int) {
		t.Helper()
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
	}
	for range ops {
		v := r.IntN(variants)
		if live[v] && r.IntN(3) == 0 {
			resp := regtest.Do(t, http.DefaultClient, http.MethodDelete, srv.URL+"/v2/"+repo(v)+"/manifests/v1", nil)
			if resp.Status == http.StatusAccepted {
				live[v] = false
				deletes++
			}
			continue
		}
		pushRetry(v)
		time.Sleep(time.Duration(r.IntN(300)) * time.Millisecond)
	}
	// GC frees the files only a deleted image held: make sure one such
	// image exists (deduplicated, then deleted) and wait for GC to free them.
	v := 0
	if !live[v] {
		pushRetry(v)
	}
	waitState(t, srv.Root, imgs[v], false)
	resp := regtest.Do(t, http.DefaultClient, http.MethodDelete, srv.URL+"/v2/"+repo(v)+"/manifests/v1", nil)
	if resp.Status != http.StatusAccepted {
		t.Fatalf("DELETE %s: %d", repo(v), resp.Status)
	}
	live[v] = false
	deletes++
	poll.Until(t, 200*time.Millisecond, func() string {
		if regtest.Metric(t, debug, `cairn_gc_deleted_total{kind="dedup_files"}`) == 0 {
			return "GC to delete the unique files of deleted images"
		}
		return ""
	})
	gcRuns := regtest.Metric(t, debug, `cairn_gc_runs_total{result="ok"}`)
	freed := regtest.Metric(t, debug, `cairn_gc_deleted_total{kind="dedup_files"}`)
	deferred := regtest.Metric(t, debug, `cairn_dedup_layers_total{outcome="deferred"}`)
	t.Logf("%d pushes (%d retries), %d deletes; %v GC runs deleted %v unique files; %v dedups deferred behind a GC run",
		pushes, retries, deletes, gcRuns, freed, deferred)

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
	waitState(t, srv.Root, liveLayers, false)
	check(srv)
	// Let GC run a few more times over the settled state, then restart.
	runs := regtest.Metric(t, debug, `cairn_gc_runs_total{result="ok"}`)
	poll.Until(t, 200*time.Millisecond, func() string {
		if regtest.Metric(t, debug, `cairn_gc_runs_total{result="ok"}`) < runs+3 {
			return "three more GC runs"
		}
		return ""
	})
	check(srv)
	srv.Stop()
	if left, _ := filepath.Glob(filepath.Join(srv.Root, "cairn-cache", "spool", "*")); len(left) > 0 {
		t.Errorf("spool files left after a clean stop: %v", left)
	}
	srv = cairnproc.Start(t, srv.Root, "--config", cfg)
	check(srv)
}
