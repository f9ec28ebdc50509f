package e2e

import (
	"bufio"
	"bytes"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/cairn-registry/cairn/internal/testutil/poll"
)

// The storage refuses writes: a full disk answers 507 and a read-only one
// 503, both with an OCI error body whose message names the cause; what was
// pushed before stays pullable byte-exact; a chunk that fails or is cut
// leaves no object behind. The roots are small tmpfs mounts (we run as
// root); without mount(2) the tests skip, except on CI.

// smallRoot mounts a tmpfs of size bytes (the server's root) and unmounts
// it when the test ends, after the server started later has stopped.
func smallRoot(t *testing.T, size string) string {
	t.Helper()
	dir := t.TempDir()
	if out, err := exec.Command("mount", "-t", "tmpfs", "-o", "size="+size, "tmpfs", dir).CombinedOutput(); err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatalf("mount tmpfs: %v: %s", err, out)
		}
		t.Skipf("mount tmpfs: %v: %s", err, out)
	}
	t.Cleanup(func() {
		if err := syscall.Unmount(dir, 0); err != nil {
			syscall.Unmount(dir, syscall.MNT_DETACH)
		}
	})
	return dir
}

// rawResponse is what a request sent on its own connection got.
type rawResponse struct {
	status int
	body   string
}

// rawPatch sends body as one PATCH to the upload at loc on a connection of
// its own and returns the answer. The server answers a refused write
// before it has read the whole body; reading the answer while the body
// is still being written keeps that answer from being lost to the broken
// pipe that follows, as a Go client's write error would lose it.
func (e *env) rawPatch(loc string, body []byte) rawResponse {
	e.t.Helper()
	u, err := url.Parse(e.abs(loc))
	if err != nil {
		e.t.Fatal(err)
	}
	conn, err := net.Dial("tcp", u.Host)
	if err != nil {
		e.t.Fatal(err)
	}
	defer conn.Close()
	conn.SetDeadline(time.Now().Add(2 * time.Minute)) // a hang guard only
	go func() {
		fmt.Fprintf(conn, "PATCH %s HTTP/1.1\r\nHost: %s\r\nContent-Type: application/octet-stream\r\nContent-Length: %d\r\n\r\n", u.RequestURI(), u.Host, len(body))
		conn.Write(body) // fails once the server has answered and closed
	}()
	resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
	if err != nil {
		e.t.Fatalf("PATCH %s: %v", loc, err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	return rawResponse{status: resp.StatusCode, body: string(b)}
}

// sessionDir is where upload loc lives under the filesystem root.
func sessionDir(root, repo, loc string) string {
	u, _ := url.Parse(loc)
	return filepath.Join(root, "docker/registry/v2/repositories", repo, "_uploads", path.Base(u.Path))
}

// chunkFiles lists what the session's chunks directory holds.
func chunkFiles(t *testing.T, dir string) []string {
	t.Helper()
	entries, err := os.ReadDir(filepath.Join(dir, "chunks"))
	if err != nil && !os.IsNotExist(err) {
		t.Fatal(err)
	}
	var names []string
	for _, e := range entries {
		names = append(names, e.Name())
	}
	return names
}

func TestDiskFull(t *testing.T) {
	root := smallRoot(t, "8m")
	e := startRoot(t, root)
	before := e.pushRandom("full/before:1", 1, 1<<20)

	// More than the disk holds, in one PATCH as docker sends a layer.
	loc := e.startUpload("full/big")
	r := e.rawPatch(loc, bytes.Repeat([]byte("cairn"), 12<<20/5))
	if r.status != http.StatusInsufficientStorage || !strings.Contains(r.body, `"UNKNOWN"`) || !strings.Contains(r.body, "no space") {
		t.Fatalf("PATCH past a full disk: %d %s, want 507 naming no space", r.status, r.body)
	}
	if logs, ok := e.srv.LogsWith("storage refused", "no space left on device", root); !ok {
		t.Errorf("log does not name the cause with the path:\n%s", logs)
	}
	// The refused chunk is gone at once: nothing of it is in the session.
	if files := chunkFiles(t, sessionDir(root, "full/big", loc)); len(files) != 0 {
		t.Errorf("the refused chunk left %v", files)
	}
	if got := e.do(http.MethodGet, loc, nil); got.Status != http.StatusNoContent || got.Header.Get("Range") != "0-0" {
		t.Errorf("upload status after the refused chunk: %v, want 204 Range 0-0", got)
	}

	e.verifyImage("full/before", "1", before)
	// The space is back: a push that fits succeeds.
	after := e.pushRandom("full/after:1", 1, 3<<20)
	e.verifyImage("full/after", "1", after)
}

func TestReadOnlyStorage(t *testing.T) {
	root := smallRoot(t, "8m")
	e := startRoot(t, root)
	before := e.pushRandom("ro/before:1", 1, 1<<20)
	if out, err := exec.Command("mount", "-o", "remount,ro", root).CombinedOutput(); err != nil {
		t.Fatalf("remount read-only: %v: %s", err, out)
	}
	r := e.do(http.MethodPost, "/v2/ro/after/blobs/uploads/", nil)
	wantError(t, r, http.StatusServiceUnavailable, "UNKNOWN")
	if !strings.Contains(string(r.Body), "read-only") {
		t.Errorf("push on a read-only root: %s, want a message naming read-only", r.Body)
	}
	if logs, ok := e.srv.LogsWith("read-only file system"); !ok {
		t.Errorf("log does not name the cause:\n%s", logs)
	}
	e.verifyImage("ro/before", "1", before)
}

// TestCutChunkLeavesNothing: a PATCH whose connection is cut mid-body
// leaves no chunk object behind, and the session holds what it held
// before.
func TestCutChunkLeavesNothing(t *testing.T) {
	e := start(t)
	root := e.srv.Root
	loc := e.startUpload("cut/a")
	dir := sessionDir(root, "cut/a", loc)
	u, err := url.Parse(e.abs(loc))
	if err != nil {
		t.Fatal(err)
	}
	conn, err := net.Dial("tcp", u.Host)
	if err != nil {
		t.Fatal(err)
	}
	fmt.Fprintf(conn, "PATCH %s HTTP/1.1\r\nHost: %s\r\nContent-Type: application/octet-stream\r\nContent-Length: %d\r\n\r\n", u.RequestURI(), u.Host, 4<<20)
	conn.Write(bytes.Repeat([]byte("cairn"), 1<<20/5))
	// Cut only once the server writes the chunk.
	waitFor(t, "the chunk object", func() bool { return len(chunkFiles(t, dir)) > 0 })
	conn.Close()
	// The server has finished with the cut chunk once it has written head.
	waitFor(t, "the session's head", func() bool {
		_, err := os.Stat(filepath.Join(dir, "head"))
		return err == nil
	})
	if files := chunkFiles(t, dir); len(files) != 0 {
		t.Errorf("the cut chunk left %v", files)
	}
	if got := e.do(http.MethodGet, loc, nil); got.Status != http.StatusNoContent || got.Header.Get("Range") != "0-0" {
		t.Errorf("upload status after the cut chunk: %v, want 204 Range 0-0", got)
	}
}

// waitFor polls cond; the minute is a hang guard, not a measurement.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	poll.Within(t, time.Minute, 10*time.Millisecond, poll.Unless(cond, what))
}
