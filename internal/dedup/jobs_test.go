package dedup

import (
	"context"
	"io"
	"sync"
	"testing"

	"github.com/opencontainers/go-digest"

	"github.com/cairn-registry/cairn/internal/layout"
	"github.com/cairn-registry/cairn/internal/meta"
	"github.com/cairn-registry/cairn/internal/storage/driver"
	"github.com/cairn-registry/cairn/internal/storage/driver/inmemory"
)

// gatedDriver blocks reads of one path until released, counting readers
// inside at once.
type gatedDriver struct {
	driver.Driver
	path      string
	entered   chan struct{}
	release   chan struct{}
	mu        sync.Mutex
	inside    int
	maxInside int
}

func (g *gatedDriver) Reader(ctx context.Context, p string, off int64) (io.ReadCloser, error) {
	if p == g.path {
		g.mu.Lock()
		g.inside++
		g.maxInside = max(g.maxInside, g.inside)
		g.mu.Unlock()
		g.entered <- struct{}{}
		<-g.release
		g.mu.Lock()
		g.inside--
		g.mu.Unlock()
	}
	return g.Driver.Reader(ctx, p, off)
}

// TestOneJobPerLayer: a job for a layer another job is processing waits
// for it instead of processing the layer at the same time.
func TestOneJobPerLayer(t *testing.T) {
	l := sharedLayers(t)[0]
	d := digest.FromBytes(l.blob)
	g := &gatedDriver{Driver: inmemory.New(), path: layout.BlobData(d), entered: make(chan struct{}, 4), release: make(chan struct{})}
	v := newEnv(t, g, Options{Mode: ModeFull})
	v.put(l.blob)
	v.eng.Start(t.Context())
	v.eng.Worker.enqueue(d, ModeFull)
	<-g.entered // the first job spools the blob
	v.eng.Worker.enqueue(d, ModeFull)
	eventually(t, "the second job deferred", func() bool {
		v.eng.Worker.mu.Lock()
		defer v.eng.Worker.mu.Unlock()
		return v.eng.Worker.running[d] != nil
	})
	close(g.release)
	eventually(t, "deduplication", func() bool {
		_, st := v.state(d)
		return st == meta.StateDeduplicated
	})
	if g.maxInside != 1 {
		t.Fatalf("%d jobs read the layer at once", g.maxInside)
	}
	v.wantBlob(l.blob)
}
