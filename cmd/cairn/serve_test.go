package main

import (
	"bytes"
	"crypto/rand"
	"crypto/sha256"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/cairn-registry/cairn/internal/testutil/cairnproc"
)

// TestGracefulShutdown: an upload in flight when SIGTERM arrives completes
// and is stored; the process then exits 0, and a restarted server serves it.
func TestGracefulShutdown(t *testing.T) {
	bin := cairnproc.Binary(t)
	srv := cairnproc.StartBinary(t, bin, "")

	data := make([]byte, 8<<20)
	rand.Read(data)
	dgst := fmt.Sprintf("sha256:%x", sha256.Sum256(data))

	pr, pw := io.Pipe()
	req, err := http.NewRequest(http.MethodPost, srv.URL+"/v2/shut/down/blobs/uploads/?digest="+dgst, pr)
	if err != nil {
		t.Fatal(err)
	}
	req.ContentLength = int64(len(data))
	type result struct {
		status int
		err    error
	}
	done := make(chan result, 1)
	go func() {
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			done <- result{err: err}
			return
		}
		resp.Body.Close()
		done <- result{status: resp.StatusCode}
	}()
	if _, err := pw.Write(data[:len(data)/2]); err != nil {
		t.Fatal(err)
	}
	// SIGTERM only once the handler is writing the upload: a connection
	// still in the listen backlog is refused by shutdown, not finished.
	waitForUploadData(t, srv.Root)
	if err := srv.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	time.Sleep(300 * time.Millisecond) // let shutdown begin while the body is half sent
	if _, err := pw.Write(data[len(data)/2:]); err != nil {
		t.Fatal(err)
	}
	pw.Close()
	res := <-done
	if res.err != nil || res.status != http.StatusCreated {
		t.Fatalf("upload in flight during shutdown: status %d, err %v", res.status, res.err)
	}
	if !srv.Wait(15 * time.Second) {
		t.Fatal("server did not exit after SIGTERM")
	}
	if _, st := srv.Exited(); st == nil || st.ExitCode() != 0 {
		t.Fatalf("exit state %v, want status 0", st)
	}

	again := cairnproc.StartBinary(t, bin, srv.Root)
	resp, err := http.Get(again.URL + "/v2/shut/down/blobs/" + dgst)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	got, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusOK || !bytes.Equal(got, data) {
		t.Fatalf("after restart: status %d, %d bytes (want %d)", resp.StatusCode, len(got), len(data))
	}
}

// waitForUploadData waits until some upload under root holds data.
func waitForUploadData(t *testing.T, root string) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for time.Now().Before(deadline) {
		files, _ := filepath.Glob(filepath.Join(root, "docker/registry/v2/repositories/*/*/_uploads/*/chunks/*"))
		for _, f := range files {
			if fi, err := os.Stat(f); err == nil && fi.Size() > 0 {
				return
			}
		}
		time.Sleep(20 * time.Millisecond)
	}
	t.Fatal("the upload never reached storage")
}

// TestCLIErrors: bad command lines and configs fail with one line and a
// non-zero status.
func TestCLIErrors(t *testing.T) {
	bin := cairnproc.Binary(t)
	badConfig := t.TempDir() + "/bad.yml"
	if err := os.WriteFile(badConfig, []byte("log:\n  level: loud\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		args []string
		code int
		want string
	}{
		{[]string{"frobnicate"}, 2, "unknown command"},
		{[]string{"serve", "--bogus"}, 2, "flag provided but not defined"},
		{[]string{"serve", "--config", badConfig}, 1, "log.level"},
		{[]string{"serve", "--config", "/nonexistent/cairn.yml"}, 1, "no such file"},
		{[]string{"serve", "--addr", "nonsense", "--root", t.TempDir()}, 1, "http.addr"},
	}
	for _, c := range cases {
		cmd := exec.Command(bin, c.args...)
		var stderr bytes.Buffer
		cmd.Stderr = &stderr
		err := cmd.Run()
		code := 0
		if ee, ok := err.(*exec.ExitError); ok {
			code = ee.ExitCode()
		}
		last := lastLine(stderr.String())
		if code != c.code || !strings.Contains(last, c.want) || !strings.HasPrefix(last, "cairn: ") {
			t.Errorf("cairn %v: exit %d, last line %q; want exit %d and a line with %q", c.args, code, last, c.code, c.want)
		}
	}
	out, err := exec.Command(bin, "version").Output()
	if err != nil || !strings.HasPrefix(string(out), "cairn ") {
		t.Errorf("cairn version: %q, %v", out, err)
	}
}

func lastLine(s string) string {
	lines := strings.Split(strings.TrimSpace(s), "\n")
	return lines[len(lines)-1]
}
