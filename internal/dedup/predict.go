package dedup

import (
	"container/list"
	"context"
	"io"
	"sync"
	"time"

	"github.com/opencontainers/go-digest"

	"github.com/cairn-registry/cairn/internal/layout"
	"github.com/cairn-registry/cairn/internal/manifest"
	"github.com/cairn-registry/cairn/internal/meta"
	"github.com/cairn-registry/cairn/internal/storage/driver"
	"github.com/cairn-registry/cairn/internal/task"
)

// Prediction (DupHunter §4.4): a client that GETs an image manifest is
// about to GET its layers. The layers it has not pulled before (ILmap minus
// its ULmap) are rebuilt into the preconstruct cache (deduplicated layers)
// or read into the prefetch cache (intact layers) ahead of those GETs; a
// client that mostly re-pulls what it has (repull ratio above the
// threshold, e.g. a CI runner without a layer cache) gets all of them.
//
// Predictions never slow a GET: predicted rebuilds are the preconstruct
// cache's prefills, which wait in its queue while a GET waits for a
// rebuild, pause at their next write when one starts, run at most
// Options.PredictRebuilds at once and share GOMAXPROCS-1 cores, so one is
// left to serving; a GET of a layer whose
// prediction is queued starts its rebuild at once (on every core), and one
// that joins a running prediction waits only for what is left of it (see
// cache.Disk). A prefetch is dropped if the client's GET of that layer
// began first, and a GET that arrives during a prefetch streams from it
// instead of reading the backend a second time (cache.Memory).

func (p *Predictor) now() time.Time { return time.Now() }

type pullJob struct {
	client string
	layer  digest.Digest
	at     time.Time
}

type predictJob struct {
	client   string
	manifest digest.Digest
	layers   []digest.Digest
}

// ManifestPulled implements registry.Observer.
func (p *Predictor) ManifestPulled(_ context.Context, client string, m *manifest.Manifest) {
	if p.meta == nil {
		return
	}
	d := m.Digest
	layers, ok := imageLayers(m)
	if !ok {
		return
	}
	p.clients.expect(client, layers)
	if !p.opts.Predict || p.runner == nil {
		return
	}
	j := predictJob{client: client, manifest: d, layers: layers}
	// Best effort, and never ahead of the work GETs wait for.
	p.runner.Submit("dedup predict", task.Low, func(ctx context.Context) error {
		p.predictOne(ctx, j)
		return nil
	})
}

// BlobPulled implements registry.Observer: it records the pull (ULmap,
// popularity) off the request path, counts whether a predicted layer was
// ready, and in selective mode turns a hot layer back to intact.
func (p *Predictor) BlobPulled(ctx context.Context, client string, d digest.Digest) {
	if p.meta == nil {
		return
	}
	if p.clients.take(client, d) {
		_, state, _ := p.layerState(ctx, d)
		rebuilt := p.disk != nil && state == meta.StateDeduplicated
		switch {
		case rebuilt:
			// A rebuild the prediction started counts even if unfinished:
			// the GET waits only for what is left of it.
			p.metrics.CacheLookup(CachePreconstruct+"_predicted", p.disk.Warm(string(d)))
		case p.mem != nil:
			// A GET that joins a prefetch under way counts too.
			p.metrics.CacheLookup(CachePrefetch+"_predicted", p.mem.Warm(string(d)))
		}
	}
	if p.runner == nil {
		return
	}
	pj := pullJob{client: client, layer: d, at: p.now()}
	// Off the request path; tiny, so ahead of layer jobs. A full queue
	// drops the record (popularity is an estimate).
	p.runner.Submit("dedup pull", task.High, func(ctx context.Context) error {
		p.recordPull(ctx, pj)
		return nil
	})
}

// recordPull records a pull (ULmap, popularity) and tells the worker,
// which turns a hot deduplicated layer back to intact in selective mode.
func (p *Predictor) recordPull(ctx context.Context, pj pullJob) {
	if _, err := p.meta.RecordPull(ctx, pj.client, pj.layer, pj.at); err != nil {
		p.log.Debug("dedup: recording pull", "err", err)
		return
	}
	if p.pulled != nil {
		p.pulled(ctx, pj.layer)
	}
}

// predictOne warms the caches for one predicted pull.
func (p *Predictor) predictOne(ctx context.Context, j predictJob) {
	// The image's layers come from the manifest just served; its ILmap
	// record was written when it was pushed (or scanned), so a manifest
	// GET writes nothing.
	targets, err := p.predictTargets(ctx, j)
	if err != nil {
		p.log.Debug("dedup: prediction", "err", err)
		return
	}
	for _, l := range targets {
		p.warm(ctx, j.client, l)
	}
}

// predictTargets returns the layers of j to warm for its client.
func (p *Predictor) predictTargets(ctx context.Context, j predictJob) ([]digest.Digest, error) {
	ratio, err := p.meta.RepullRatio(ctx, j.client)
	if err != nil {
		return nil, err
	}
	if ratio > p.opts.RepullRatio {
		return j.layers, nil
	}
	pulled, err := p.meta.ClientLayers(ctx, j.client)
	if err != nil {
		return nil, err
	}
	have := make(map[digest.Digest]bool, len(pulled))
	for _, p := range pulled {
		have[p.Layer] = true
	}
	var out []digest.Digest
	for _, l := range j.layers {
		if !have[l] {
			out = append(out, l)
		}
	}
	return out, nil
}

// willReader is a storage that can read a file ahead into a cache of its
// own: the filesystem's page cache.
type willReader interface {
	WillRead(ctx context.Context, path string) error
}

// warm starts filling a cache with layer l for client: when it has its
// intact bytes, the storage's own cache or else the prefetch cache, if
// configured; else its rebuild, queued in the preconstruct cache.
func (p *Predictor) warm(ctx context.Context, client string, l digest.Digest) {
	fi, err := driver.StatFile(ctx, p.d, layout.BlobData(l))
	if err != nil {
		// No intact copy (or none readable now): rebuild it, if it has a
		// recipe. Only here is the recipe read: in mode index every layer
		// has one, and parsing it for an intact layer is wasted work.
		if p.disk == nil {
			return
		}
		r, err := p.recipe(ctx, l)
		if err != nil {
			return
		}
		queued := p.disk.Prefill(ctx, string(l), r.Size, func(ctx context.Context, w io.Writer) error {
			return p.restore(ctx, r, w, p.opts.predictProcs())
		})
		if queued {
			p.metrics.DedupPredicted(CachePreconstruct)
		}
		return
	}
	if wr, ok := driver.As[willReader](p.d); ok {
		if err := wr.WillRead(ctx, layout.BlobData(l)); err == nil {
			p.metrics.DedupPredicted(CachePrefetch)
		}
		return
	}
	if p.mem == nil || p.mem.Warm(string(l)) {
		return
	}
	select {
	case p.warming <- struct{}{}:
	case <-ctx.Done():
		return
	}
	// GETs first: a layer the client began to GET while this prefetch
	// waited for a slot is read by that GET; reading it again here would
	// only compete with it.
	if !p.clients.expected(client, l) || p.mem.Warm(string(l)) {
		<-p.warming
		return
	}
	p.metrics.DedupPredicted(CachePrefetch)
	// A goroutine, bounded by warming, rather than the prediction's task:
	// warm returns at once, so the predictions behind it do not wait for
	// a whole layer's read.
	go func() {
		defer func() { <-p.warming }()
		err := p.mem.Fill(ctx, string(l), fi.Size, func(ctx context.Context, w io.Writer) error {
			rc, err := p.d.Reader(ctx, layout.BlobData(l), 0)
			if err != nil {
				return err
			}
			defer rc.Close()
			_, err = io.Copy(w, rc)
			return err
		})
		if err != nil {
			p.log.Debug("dedup: prefetch", "layer", l, "err", err)
		}
	}()
}

// clientLayers remembers, for the most recent clients, the layers of the
// images they last pulled: a layer GET that follows is a predicted one.
type clientLayers struct {
	mu    sync.Mutex
	max   int
	order *list.List // of *clientEntry, most recent first
	byID  map[string]*list.Element
}

type clientEntry struct {
	id     string
	layers map[uint64]struct{} // digest prefixes: 8 bytes per layer
}

// maxExpected bounds the layers remembered per client; with the client
// bound this caps the map at a few MiB.
const maxExpected = 512

// shortKey is the first 8 bytes of a digest's hex; a collision only
// mislabels one metric sample.
func shortKey(d digest.Digest) uint64 {
	h := d.Encoded()
	var k uint64
	for i := 0; i < 16 && i < len(h); i++ {
		c := h[i]
		switch {
		case c >= '0' && c <= '9':
			c -= '0'
		case c >= 'a' && c <= 'f':
			c -= 'a' - 10
		}
		k = k<<4 | uint64(c&0xf)
	}
	return k
}

func newClientLayers(max int) *clientLayers {
	return &clientLayers{max: max, order: list.New(), byID: make(map[string]*list.Element)}
}

func (c *clientLayers) expect(client string, layers []digest.Digest) {
	c.mu.Lock()
	defer c.mu.Unlock()
	el, ok := c.byID[client]
	if !ok {
		el = c.order.PushFront(&clientEntry{id: client, layers: make(map[uint64]struct{})})
		c.byID[client] = el
		if c.order.Len() > c.max {
			last := c.order.Back()
			c.order.Remove(last)
			delete(c.byID, last.Value.(*clientEntry).id)
		}
	} else {
		c.order.MoveToFront(el)
	}
	ce := el.Value.(*clientEntry)
	// Keep the last few images' layers, bounded.
	if len(ce.layers)+len(layers) > maxExpected {
		clear(ce.layers)
	}
	for _, l := range layers {
		ce.layers[shortKey(l)] = struct{}{}
	}
}

// expected reports whether client is expected to GET layer l.
func (c *clientLayers) expected(client string, l digest.Digest) bool {
	return c.lookup(client, l, false)
}

// take is expected for the client's GET of l: a first GET is a predicted
// one, and l is no longer expected after it (a prefetch not yet started
// leaves it to the GET; a repeated GET is not predicted).
func (c *clientLayers) take(client string, l digest.Digest) bool {
	return c.lookup(client, l, true)
}

func (c *clientLayers) lookup(client string, l digest.Digest, remove bool) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	el, ok := c.byID[client]
	if !ok {
		return false
	}
	layers := el.Value.(*clientEntry).layers
	_, ok = layers[shortKey(l)]
	if ok && remove {
		delete(layers, shortKey(l))
	}
	return ok
}
