package e2e

import (
	"io"
	"net/http"
	"slices"
	"testing"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
)

// TestRestart stops and kills the server between requests: what was
// committed survives byte-exact, an upload in progress resumes where it
// stood, and a blob whose upload died mid-body never becomes visible.
func TestRestart(t *testing.T) {
	t.Parallel()
	root := t.TempDir()
	e := startRoot(t, root)
	const repo = "e2e/restart"
	img := e.pushRandom(repo+":v1", 3, 8192)
	idx := platformIndex(t, true, v1.Platform{OS: "linux", Architecture: "amd64"}, v1.Platform{OS: "linux", Architecture: "riscv64"})
	e.pushIndex(idx, repo+":multi")
	data := randBytes(t, 3000)
	loc := e.startUpload(repo)
	loc = e.patchChunk(loc, 0, data[:1000])
	e.stop()

	// A graceful restart: the image pulls, the upload resumes.
	e = startRoot(t, root)
	e.verifyImage(repo, "v1", img)
	e.verifyIndex(repo, "multi", idx)
	loc = e.wantUploadStatus(loc, 1000)
	loc = e.patchChunk(loc, 1000, data[1000:2000])
	e.closeUpload(loc, sha(data), data[2000:], 2000)
	e.getBlob(repo, sha(data), int64(len(data)))

	// A crash in the middle of a monolithic PUT body.
	big := randBytes(t, 16<<20)
	bigLoc := e.startUpload(repo)
	pr, pw := io.Pipe()
	req, err := http.NewRequestWithContext(t.Context(), http.MethodPut, e.abs(withQuery(bigLoc, "digest", sha(big))), pr)
	if err != nil {
		t.Fatal(err)
	}
	req.ContentLength = int64(len(big))
	req.Header.Set("Content-Type", "application/octet-stream")
	done := make(chan error, 1)
	go func() {
		resp, err := e.hc.Do(req)
		if err == nil {
			resp.Body.Close()
		}
		done <- err
	}()
	if _, err := pw.Write(big[:8<<20]); err != nil {
		t.Fatal(err)
	}
	time.Sleep(100 * time.Millisecond) // let the server write what it received
	e.srv.Kill()
	pw.CloseWithError(io.ErrUnexpectedEOF)
	<-done

	e = startRoot(t, root)
	wantStatus(t, e.do(http.MethodHead, "/v2/"+repo+"/blobs/"+sha(big), nil), http.StatusNotFound)
	wantError(t, e.do(http.MethodGet, "/v2/"+repo+"/blobs/"+sha(big), nil), http.StatusNotFound, "BLOB_UNKNOWN")
	e.verifyImage(repo, "v1", img)
	if tags, _ := e.tagsList(repo, ""); !slices.Equal(tags, []string{"multi", "v1"}) {
		t.Errorf("tags after crash = %v, want [multi v1]", tags)
	}
	// The same blob can be pushed afresh.
	e.uploadBlob(repo, big)
	e.getBlob(repo, sha(big), int64(len(big)))
}
