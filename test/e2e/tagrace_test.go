package e2e

import (
	"fmt"
	"net/http"
	"sync"
	"testing"

	"github.com/cairn-registry/cairn/internal/testutil/objstore"
	"github.com/cairn-registry/cairn/internal/testutil/regtest"
)

// TestTagPutRacesDigestDelete (issue 10, item 4): a PUT of a manifest by tag
// racing a DELETE of the same manifest by digest, round after round. Any
// interleaving may win, but no request answers 500 and, after each round,
// every tag tags/list shows resolves (a tag never points at a missing
// revision). On the old code some rounds left a listed tag whose GET was
// 404, and some PUTs and DELETEs answered 500 (a rename into a directory
// the DELETE removed, an unlink of a directory the PUT was writing into).
func TestTagPutRacesDigestDelete(t *testing.T) {
	t.Run("filesystem", func(t *testing.T) {
		e, _ := startWithDebug(t, "")
		tagRace(e.with(t), 200)
	})
	t.Run("s3", func(t *testing.T) {
		_, section := objstore.S3Bucket(t, "cairn-tagrace-")
		e, _ := startWithDebug(t, "storage:\n"+section)
		tagRace(e.with(t), 50)
	})
}

func tagRace(e *env, rounds int) {
	t := e.t
	const repo = "race/tags"
	bs := e.uploadBlobSet(repo, 1)
	m := ociManifest(t, bs.config, bs.layers, nil)
	d := sha(m)
	var dangling, serverErrors int
	for round := range rounds {
		tag := fmt.Sprintf("t%d", round%5)
		// The revision exists before the round, as in the runs.
		wantStatus(t, e.putManifest(repo, d, mtOCIManifest, m), http.StatusCreated)
		var put, del regtest.Response
		var wg sync.WaitGroup
		wg.Go(func() { put = e.do(http.MethodPut, "/v2/"+repo+"/manifests/"+tag, m, "Content-Type", mtOCIManifest) })
		wg.Go(func() { del = e.do(http.MethodDelete, "/v2/"+repo+"/manifests/"+d, nil) })
		wg.Wait()
		for _, r := range []regtest.Response{put, del} {
			if r.Status >= 500 {
				serverErrors++
				t.Errorf("round %d: %v", round, r)
			}
		}
		if put.Status != http.StatusCreated {
			t.Errorf("round %d: PUT by tag: %v, want 201", round, put)
		}
		if del.Status != http.StatusAccepted && del.Status != http.StatusNotFound {
			t.Errorf("round %d: DELETE by digest: %v, want 202 (or 404 if the PUT's revision was not seen)", round, del)
		}
		tags, r := e.tagsList(repo, "")
		if r.Status != http.StatusOK && r.Status != http.StatusNotFound {
			t.Fatalf("round %d: %v", round, r)
		}
		for _, tg := range tags {
			if g := e.do(http.MethodGet, "/v2/"+repo+"/manifests/"+tg, nil, "Accept", regtest.ManifestAccept); g.Status != http.StatusOK {
				dangling++
				t.Errorf("round %d: tags/list shows %s, but %v", round, tg, g)
			}
		}
	}
	if dangling+serverErrors > 0 {
		t.Errorf("%d rounds: %d dangling tags, %d server errors", rounds, dangling, serverErrors)
	}
}
