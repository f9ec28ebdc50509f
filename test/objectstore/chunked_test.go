package objectstore

import (
	"bytes"
	"crypto/sha256"
	"fmt"
	"math/rand/v2"
	"net/http"
	"net/url"
	"testing"
	"time"

	"github.com/cairn-registry/cairn/internal/testutil/cairnproc"
	"github.com/cairn-registry/cairn/internal/testutil/objstore"
	"github.com/cairn-registry/cairn/internal/testutil/regtest"
	"github.com/cairn-registry/cairn/test/internal/s3proxy"
)

// TestChunkedPushJoinsOnTheStore pushes a 41 MiB blob in 8 MiB PATCHes, as
// containerd and regctl do, through a real `cairn serve` on MinIO behind a
// counting proxy that adds 5 ms per request, and checks that the commit
// joins the chunks on the server: one part copy per 8 MiB chunk, the short
// last chunk the only bytes read back, and the blob pulls byte-exact. A
// commit that copied the chunks through cairn would read all 41 MiB back
// and upload them again.
func TestChunkedPushJoinsOnTheStore(t *testing.T) {
	p, _ := objstore.S3Bucket(t, "cairn-chunked-")
	proxy, err := s3proxy.Start(p.RegionEndpoint, 5*time.Millisecond)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { proxy.Close() })
	p.RegionEndpoint = proxy.URL
	srv := cairnproc.StartArgs(t, cairnproc.Binary(t), "--config", cairnproc.WriteConfig(t, "version: 0.1\nstorage:\n"+objstore.S3Section(p)))

	const chunk = 8 << 20
	data := make([]byte, 5*chunk+1<<20)
	rand.NewChaCha8([32]byte{1}).Read(data)
	start := time.Now()
	loc := pushChunks(t, srv.Addr, "chunked/blob", data, chunk)
	proxy.Reset()
	commitStart := time.Now()
	dg := fmt.Sprintf("sha256:%x", sha256.Sum256(data))
	r := regtest.Do(t, http.DefaultClient, http.MethodPut, withDigest(t, loc, dg), nil)
	if r.Status != http.StatusCreated {
		t.Fatalf("%v\n%s", r, srv.Logs())
	}
	commit, push := time.Since(commitStart), time.Since(start)
	c := proxy.Snapshot()
	t.Logf("chunked push of %d MiB in 8 MiB PATCHes: %v, of which the commit %v: %v, %d MiB down, %d MiB up",
		len(data)>>20, push.Round(time.Millisecond), commit.Round(time.Millisecond), c, c.Down>>20, c.Up>>20)
	if got := c.Of(s3proxy.MultipartCopy); got != 5 {
		t.Errorf("the commit made %d part copies, want one per 8 MiB chunk (5): %v", got, c)
	}
	if c.Down > 2<<20 || c.Up > 2<<20 {
		t.Errorf("the commit moved %d bytes down and %d up through cairn, want only the 1 MiB last chunk's: %v", c.Down, c.Up, c)
	}
	r = regtest.Do(t, http.DefaultClient, http.MethodGet, "http://"+srv.Addr+"/v2/chunked/blob/blobs/"+dg, nil)
	if r.Status != http.StatusOK || !bytes.Equal(r.Body, data) {
		t.Fatalf("GET the blob: %d, %d bytes; want 200 and the %d pushed", r.Status, len(r.Body), len(data))
	}
}

// pushChunkedBlob pushes a blob of n chunks of size bytes and one of 1 KiB
// into repo as PATCHes, and returns a func that GETs it from the registry
// at an address and checks it byte for byte.
func pushChunkedBlob(t *testing.T, addr, repo string, n, size int) func(addr string) {
	t.Helper()
	data := make([]byte, n*size+1024)
	rand.NewChaCha8([32]byte{2}).Read(data)
	dg := fmt.Sprintf("sha256:%x", sha256.Sum256(data))
	loc := pushChunks(t, addr, repo, data, size)
	if r := regtest.Do(t, http.DefaultClient, http.MethodPut, withDigest(t, loc, dg), nil); r.Status != http.StatusCreated {
		t.Fatalf("%v", r)
	}
	check := func(addr string) {
		t.Helper()
		r := regtest.Do(t, http.DefaultClient, http.MethodGet, "http://"+addr+"/v2/"+repo+"/blobs/"+dg, nil)
		if r.Status != http.StatusOK || !bytes.Equal(r.Body, data) {
			t.Fatalf("GET the blob pushed in chunks: %d, %d bytes; want 200 and the %d pushed", r.Status, len(r.Body), len(data))
		}
	}
	check(addr)
	return check
}

// pushChunks starts an upload in repo on the registry at addr and PATCHes
// data in chunks of size with Content-Range, returning the Location to
// close it at.
func pushChunks(t *testing.T, addr, repo string, data []byte, size int) string {
	t.Helper()
	base := "http://" + addr
	r := regtest.Do(t, http.DefaultClient, http.MethodPost, base+"/v2/"+repo+"/blobs/uploads/", nil)
	if r.Status != http.StatusAccepted {
		t.Fatalf("%v", r)
	}
	loc := r.Header.Get("Location")
	for off := 0; off < len(data); off += size {
		end := min(off+size, len(data))
		r := regtest.Do(t, http.DefaultClient, http.MethodPatch, regtest.Resolve(t, base, loc), data[off:end],
			"Content-Type", "application/octet-stream", "Content-Range", fmt.Sprintf("%d-%d", off, end-1))
		if r.Status != http.StatusAccepted {
			t.Fatalf("%v", r)
		}
		loc = r.Header.Get("Location")
	}
	return regtest.Resolve(t, base, loc)
}

func withDigest(t *testing.T, loc, dg string) string {
	t.Helper()
	u, err := url.Parse(loc)
	if err != nil {
		t.Fatal(err)
	}
	q := u.Query()
	q.Set("digest", dg)
	u.RawQuery = q.Encode()
	return u.String()
}
