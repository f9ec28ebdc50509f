package e2e

import (
	"bufio"
	"bytes"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/cairn-registry/cairn/internal/testutil/cairnproc"
	"github.com/cairn-registry/cairn/internal/testutil/objstore"
	"github.com/cairn-registry/cairn/internal/testutil/regtest"
)

// startWithDebug runs a server whose config adds the debug listener (for
// the cairn_uploads_in_progress gauge) to storage, a YAML "storage:" section
// or "" for the filesystem under a temp root. It returns the debug address.
func startWithDebug(t *testing.T, storage string) (*env, string) {
	t.Helper()
	debug := cairnproc.FreeAddr(t)
	cfg := cairnproc.WriteConfig(t, "version: 0.1\nhttp:\n  debug:\n    addr: "+debug+"\n"+storage)
	if storage == "" {
		return start(t, "--config", cfg), debug
	}
	return newEnv(t, cairnproc.StartArgs(t, cairnproc.Binary(t), "--config", cfg)), debug
}

// gauge reads one unlabelled metric from the debug listener.
func gauge(t *testing.T, debug, name string) string {
	t.Helper()
	resp, err := http.Get("http://" + debug + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), name+" "); ok {
			return v
		}
	}
	return ""
}

// streamingPatch starts a PATCH of loc whose body the test writes through
// the returned pipe; the response arrives on the channel (Status 0 when the
// request failed).
func (e *env) streamingPatch(loc string) (*io.PipeWriter, <-chan regtest.Response) {
	pr, pw := io.Pipe()
	req, err := http.NewRequestWithContext(e.t.Context(), http.MethodPatch, e.abs(loc), pr)
	if err != nil {
		e.t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/octet-stream")
	out := make(chan regtest.Response, 1)
	go func() {
		resp, err := e.hc.Do(req)
		if err != nil {
			out <- regtest.Response{Req: "PATCH " + loc + ": " + err.Error()}
			return
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		out <- regtest.Response{Status: resp.StatusCode, Header: resp.Header, Body: b, Req: "PATCH " + loc}
	}()
	return pw, out
}

// waitUploadInProgress polls the debug listener until the server counts n
// upload requests being received. The poll has no deadline of its own: the
// test's timeout is the hang guard.
func waitUploadInProgress(t *testing.T, debug string, n int) {
	t.Helper()
	for gauge(t, debug, "cairn_uploads_in_progress") != fmt.Sprint(n) {
		time.Sleep(10 * time.Millisecond)
	}
}

// TestUploadWritesAfterCommit (issue 10, item 1): a PATCH whose body is still
// streaming while the same session is committed, or written by a second
// request at once, must never change a committed blob. On the old code the
// commit renamed the file the PATCH was writing into blobs/, and the blob
// at D grew past the bytes that hash to D.
func TestUploadWritesAfterCommit(t *testing.T) {
	t.Run("filesystem", func(t *testing.T) {
		e, debug := startWithDebug(t, "")
		uploadRace(e.with(t), debug)
	})
	t.Run("s3", func(t *testing.T) {
		_, section := objstore.S3Bucket(t, "cairn-race-")
		e, debug := startWithDebug(t, "storage:\n"+section)
		uploadRace(e.with(t), debug)
	})
}

func uploadRace(e *env, debug string) {
	t := e.t
	a := randBytes(t, 300<<10)
	b := randBytes(t, 700<<10)
	const repo = "race/victim"
	loc := e.startUpload(repo)
	loc = e.patchChunk(loc, 0, a)

	// A second chunk starts streaming: a little of it is sent, the rest
	// waits. On the old code the PATCH has its file open and is blocked
	// reading the body when the commit below runs.
	pw, patched := e.streamingPatch(loc)
	if _, err := pw.Write(b[:64<<10]); err != nil {
		t.Fatal(err)
	}
	waitUploadInProgress(t, debug, 1)
	time.Sleep(100 * time.Millisecond) // lets the handler reach its body read; not an assertion

	// The commit while it streams is refused, or stores exactly a.
	commit := e.do(http.MethodPut, withQuery(loc, "digest", sha(a)), nil)
	if commit.Status != http.StatusCreated {
		wantError(t, commit, http.StatusRequestedRangeNotSatisfiable, "RANGE_INVALID")
	}

	if _, err := pw.Write(b[64<<10:]); err != nil {
		t.Fatal(err)
	}
	pw.Close()
	p := <-patched
	t.Logf("commit during the PATCH: %d; the PATCH: %d", commit.Status, p.Status)

	// Whatever was answered, a blob stored under sha(a) is exactly a.
	if h := e.do(http.MethodHead, "/v2/"+repo+"/blobs/"+sha(a), nil); h.Status == http.StatusOK {
		if h.Header.Get("Content-Length") != fmt.Sprint(len(a)) {
			t.Errorf("blob %s: Content-Length %s, want %d: the commit took later writes", sha(a), h.Header.Get("Content-Length"), len(a))
		}
		e.getBlob(repo, sha(a), int64(len(a)))
	}
	// An honest push of the same bytes elsewhere pulls exactly.
	e.uploadBlob("race/other", a)
	e.getBlob("race/other", sha(a), int64(len(a)))

	// When the PATCH was taken, the session now holds a then b, and
	// finishing it stores exactly that.
	if p.Status == http.StatusAccepted && commit.Status != http.StatusCreated {
		ab := append(bytes.Clone(a), b...)
		e.closeUpload(p.Header.Get("Location"), sha(ab), nil, 0)
		e.getBlob(repo, sha(ab), int64(len(ab)))
	}

	// A second request on a session while a PATCH streams is refused with
	// the Range the session holds, and takes nothing from the first.
	loc = e.startUpload(repo)
	loc = e.patchChunk(loc, 0, a)
	pw, patched = e.streamingPatch(loc)
	if _, err := pw.Write(b[:64<<10]); err != nil {
		t.Fatal(err)
	}
	waitUploadInProgress(t, debug, 1)
	time.Sleep(100 * time.Millisecond) // as above
	r := e.do(http.MethodPatch, loc, []byte("x"), "Content-Type", "application/octet-stream")
	wantError(t, r, http.StatusRequestedRangeNotSatisfiable, "RANGE_INVALID")
	if got, want := r.Header.Get("Range"), fmt.Sprintf("0-%d", len(a)-1); got != want {
		t.Errorf("%v: Range %q, want %q", r, got, want)
	}
	if _, err := pw.Write(b[64<<10:]); err != nil {
		t.Fatal(err)
	}
	pw.Close()
	wantStatus(t, <-patched, http.StatusAccepted)
	ab := append(bytes.Clone(a), b...)
	e.closeUpload(loc, sha(ab), nil, 0)
	e.getBlob(repo, sha(ab), int64(len(ab)))
}
