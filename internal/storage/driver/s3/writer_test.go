package s3

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/s3"

	"github.com/cairn-registry/cairn/internal/storage/driver"
)

// partGate is a transport that holds the first UploadPart until a second
// one has arrived, so a writer that waited for each part before reading on
// would hang; failPart, when set, fails that part number with a 500.
type partGate struct {
	next     http.RoundTripper
	failPart string

	mu      sync.Mutex
	parts   int
	second  chan struct{}
	timeout bool
}

func (g *partGate) RoundTrip(r *http.Request) (*http.Response, error) {
	if operation(r) != "UploadPart" {
		return g.next.RoundTrip(r)
	}
	if pn := r.URL.Query().Get("partNumber"); pn == g.failPart {
		if r.Body != nil {
			io.Copy(io.Discard, r.Body)
			r.Body.Close()
		}
		return &http.Response{StatusCode: http.StatusBadRequest, Status: "400 Bad Request", Request: r,
			Header: http.Header{"Content-Type": {"application/xml"}},
			Body:   io.NopCloser(strings.NewReader(`<Error><Code>InvalidPart</Code><Message>failed by the test</Message></Error>`))}, nil
	}
	g.mu.Lock()
	g.parts++
	n := g.parts
	if n == 2 {
		close(g.second)
	}
	g.mu.Unlock()
	if n == 1 {
		select {
		case <-g.second:
		case <-time.After(60 * time.Second): // a hang guard, not a timing
			g.mu.Lock()
			g.timeout = true
			g.mu.Unlock()
		}
	}
	return g.next.RoundTrip(r)
}

// TestWriterPartsInFlight checks that a writer sends its parts while it
// takes more bytes (the first part cannot finish until the second is sent),
// that the file is exact, and that a part failing in the background fails
// the Commit and leaves neither the file nor the upload.
func TestWriterPartsInFlight(t *testing.T) {
	p := testParams(t)
	p.ChunkSize = minPartSize
	gate := &partGate{next: http.DefaultTransport, second: make(chan struct{})}
	p.Transport = gate
	d := mustNew(t, p)
	ctx := context.Background()

	want := make([]byte, 4*minPartSize+123)
	for i := range want {
		want[i] = byte(i * 31)
	}
	w, err := d.Writer(ctx, "/big/file", false)
	if err != nil {
		t.Fatal(err)
	}
	for off := 0; off < len(want); off += 100 << 10 {
		if _, err := w.Write(want[off:min(off+100<<10, len(want))]); err != nil {
			t.Fatal(err)
		}
	}
	if err := w.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	if gate.timeout {
		t.Error("the first part was held until the hang guard: parts are not sent while the writer reads on")
	}
	if got, err := d.GetContent(ctx, "/big/file"); err != nil || !bytes.Equal(got, want) {
		t.Fatalf("GetContent = %d bytes, %v; want the %d written", len(got), err, len(want))
	}

	gate.failPart = "3"
	w, err = d.Writer(ctx, "/big/failed", false)
	if err != nil {
		t.Fatal(err)
	}
	var werr error
	for off := 0; off < len(want) && werr == nil; off += 100 << 10 {
		_, werr = w.Write(want[off:min(off+100<<10, len(want))])
	}
	if werr == nil {
		werr = w.Commit(ctx)
	}
	if werr == nil {
		t.Fatal("a writer whose part 3 failed committed")
	}
	if err := w.Cancel(ctx); err != nil {
		t.Errorf("Cancel after the failure: %v", err)
	}
	if _, err := d.Stat(ctx, "/big/failed"); !errors.Is(err, driver.ErrNotFound) {
		t.Errorf("Stat(/big/failed) after a failed write = %v, want not found", err)
	}
	ups, err := d.client.ListMultipartUploads(ctx, &s3.ListMultipartUploadsInput{Bucket: &d.bucket})
	if err != nil {
		t.Fatal(err)
	}
	if len(ups.Uploads) != 0 {
		t.Errorf("%d multipart uploads left after Cancel", len(ups.Uploads))
	}
}
