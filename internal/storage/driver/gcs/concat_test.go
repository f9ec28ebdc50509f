package gcs

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"testing"

	"google.golang.org/api/option"

	"github.com/cairn-registry/cairn/internal/storage/driver"
)

// TestConcatRequests checks what joining 70 chunk objects costs: a metadata
// read of each, three composes of at most 32 objects into intermediates and
// one of those into the file, no byte read or uploaded, and no intermediate
// left in the bucket.
func TestConcatRequests(t *testing.T) {
	ep := endpoint(t)
	ctx := context.Background()
	b, bucket := newBucket(t, ep)
	rec := &recorder{base: http.DefaultTransport}
	d := newTestDriver(t, Parameters{Bucket: bucket, Endpoint: ep}, option.WithHTTPClient(&http.Client{Transport: rec}))
	var (
		ranges []driver.FileRange
		want   []byte
		keys   []string
	)
	for i := range 70 {
		p := fmt.Sprintf("/up/chunks/%02d", i)
		chunk := bytes.Repeat([]byte{byte(i)}, 1000+i)
		if err := d.PutContent(ctx, p, chunk); err != nil {
			t.Fatal(err)
		}
		ranges = append(ranges, driver.FileRange{Path: p, Length: int64(len(chunk))})
		want = append(want, chunk...)
		keys = append(keys, p[1:])
	}
	rec.taken()
	if err := d.Concat(ctx, "/blobs/data", ranges); err != nil {
		t.Fatal(err)
	}
	counts := map[string]int{}
	for _, req := range rec.taken() {
		op := req.Method
		switch {
		case strings.HasSuffix(req.URL.Path, "/compose"):
			op = "compose"
		case req.Method == http.MethodGet && objectOf(req, bucket) != "" && req.URL.Query().Get("alt") != "media":
			op = "attrs"
		}
		counts[op]++
	}
	if want := map[string]int{"attrs": 70, "compose": 4, "DELETE": 3}; fmt.Sprint(counts) != fmt.Sprint(want) {
		t.Errorf("Concat of 70 objects made %v, want %v", counts, want)
	}
	if got, err := d.GetContent(ctx, "/blobs/data"); err != nil || !bytes.Equal(got, want) {
		t.Fatalf("GetContent = %d bytes, %v; want the %d joined", len(got), err, len(want))
	}
	if got := bucketKeys(t, b); !slices.Equal(got, append([]string{"blobs/data"}, keys...)) {
		t.Errorf("bucket holds %q, want the chunks and blobs/data only", got)
	}

	// Past the component limit the join is refused, with nothing written.
	d.maxComponents = 50
	if err := d.Concat(ctx, "/blobs/other", ranges); !errors.Is(err, errors.ErrUnsupported) {
		t.Errorf("Concat of 70 objects with a limit of 50 components = %v, want ErrUnsupported", err)
	}
	if _, err := d.Stat(ctx, "/blobs/other"); !errors.Is(err, driver.ErrNotFound) {
		t.Errorf("a refused Concat left /blobs/other (%v)", err)
	}
}
