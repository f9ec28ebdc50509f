// Package bench measures a registry's throughput over the plain HTTP API
// (OCI distribution / Docker Registry v2): blob push and pull MB/s next to the
// machine's sha256 speed on the same data, and manifest requests per second.
// It talks to any registry by URL and imports nothing of cairn's server, so
// the same figures can be taken from cairn and from its peers.
package bench

import (
	"context"
	"crypto/rand"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	mrand "math/rand/v2"
	"runtime"
	"time"
)

// Options configures RunRegistry. Zero values take the defaults noted.
type Options struct {
	// URL is the registry's base URL ("http://127.0.0.1:5000"). Required.
	URL string
	// Sizes are the blob sizes to push and pull. Default DefaultSizes.
	Sizes []int64
	// Repeat is how many times each blob push and pull is timed. 0 means 3
	// for blobs under 256MiB and 1 for larger ones.
	Repeat int
	// ManifestRequests is the number of manifest GETs (and again of HEADs)
	// in total across all clients. Default 20000.
	ManifestRequests int
	// ChunkSize is the PATCH size of the chunked-PATCH push. Default
	// DefaultChunkSize.
	ChunkSize int64
	// Flush calls sync(2) before every timed push, so that no push pays
	// for writing out what the one before left dirty: a registry on this
	// machine otherwise runs into the disk's sustained rate after a few
	// hundred MB, and the figures depend on the order of the runs.
	Flush bool
	// Concurrency is the number of concurrent manifest clients. Default 8.
	Concurrency int
	// Repository is the repository to push into. Default a fresh
	// "cairn-bench/run-<random>" so that runs never meet each other's blobs.
	Repository string
}

// DefaultChunkSize is the PATCH size of the chunked-PATCH push: what
// containerd and regctl use when a registry asks for chunks.
const DefaultChunkSize = 8 << 20

// DefaultSizes are the blob sizes measured when Options.Sizes is empty.
func DefaultSizes() []int64 { return []int64{1 << 20, 64 << 20, 512 << 20} }

// Result holds every figure of one run.
type Result struct {
	URL        string `json:"url"`
	Repository string `json:"repository"`
	// LocalServer is set by callers that started the server for this run.
	LocalServer bool            `json:"local_server"`
	GoVersion   string          `json:"go_version"`
	CPUs        int             `json:"cpus"`
	Blobs       []BlobResult    `json:"blobs"`
	Manifests   []RequestResult `json:"manifests"`
}

// BlobResult holds the figures for one blob size.
type BlobResult struct {
	Size     int64  `json:"size"`
	SizeText string `json:"size_text"`
	// SHA256 is crypto/sha256 over the same bytes in this process: the
	// speed a push cannot beat, since the registry must hash what it stores.
	SHA256 Throughput `json:"sha256"`
	// PushChunked is POST, one streamed (chunked-encoding) PATCH, then
	// PUT ?digest=, as docker and containerd push.
	PushChunked Throughput `json:"push_chunked_stream"`
	// PushPatches is POST, PATCHes of ChunkSize bytes with Content-Range,
	// then PUT ?digest=, as clients push with a chunk size set.
	PushPatches Throughput `json:"push_chunked_patches"`
	// PushMonolithic is POST, then PUT ?digest= carrying the whole blob.
	PushMonolithic Throughput `json:"push_monolithic_put"`
	// PushImage is a monolithic push of the blob as the layer of an image,
	// then the PUT of its manifest: what a client waits for until the
	// image is stored. A registry that makes blobs durable only by the
	// time their manifest is accepted shows the cost here.
	PushImage Throughput `json:"push_image"`
	// Pull is GET of the blob, read to the end and discarded.
	Pull Throughput `json:"pull"`
	// The push ratios are median push MB/s over median sha256 MB/s.
	PushChunkedPerSHA256    float64 `json:"push_chunked_stream_per_sha256"`
	PushPatchesPerSHA256    float64 `json:"push_chunked_patches_per_sha256"`
	PushMonolithicPerSHA256 float64 `json:"push_monolithic_put_per_sha256"`
	PushImagePerSHA256      float64 `json:"push_image_per_sha256"`
}

// Throughput summarises repeated timings of the same transfer.
type Throughput struct {
	Runs       int     `json:"runs"`
	BestMBps   float64 `json:"best_mb_s"`
	MedianMBps float64 `json:"median_mb_s"`
	BestMs     float64 `json:"best_ms"`
	MedianMs   float64 `json:"median_ms"`
}

// RequestResult summarises a batch of small requests made by concurrent
// keep-alive clients.
type RequestResult struct {
	Name        string  `json:"name"`
	Requests    int     `json:"requests"`
	Concurrency int     `json:"concurrency"`
	ElapsedMs   float64 `json:"elapsed_ms"`
	ReqPerSec   float64 `json:"req_per_s"`
	P50Ms       float64 `json:"p50_ms"`
	P99Ms       float64 `json:"p99_ms"`
	MaxMs       float64 `json:"max_ms"`
}

// RunRegistry runs the whole benchmark against opts.URL, writing a line of
// progress per phase to progress (which may be nil). Any failed request ends
// the run with an error: figures from a misbehaving registry are not figures.
func RunRegistry(ctx context.Context, opts Options, progress io.Writer) (Result, error) {
	opts, err := withDefaults(opts)
	if err != nil {
		return Result{}, err
	}
	logf := func(format string, args ...any) {
		if progress != nil {
			fmt.Fprintf(progress, format+"\n", args...)
		}
	}
	c, err := newClient(opts.URL, opts.Repository, opts.Concurrency)
	if err != nil {
		return Result{}, err
	}
	defer c.close()
	if err := c.ping(ctx); err != nil {
		return Result{}, err
	}
	res := Result{
		URL:        opts.URL,
		Repository: opts.Repository,
		GoVersion:  runtime.Version(),
		CPUs:       runtime.GOMAXPROCS(0),
	}

	buf, stamp, err := randomBuffer(opts.Sizes)
	if err != nil {
		return Result{}, err
	}
	for _, size := range opts.Sizes {
		br, err := benchBlobSize(ctx, c, buf[:size], stamp, repeatFor(opts.Repeat, size), opts, logf)
		if err != nil {
			return Result{}, fmt.Errorf("blob %s: %w", FormatSize(size), err)
		}
		res.Blobs = append(res.Blobs, br)
	}

	mr, err := benchManifests(ctx, c, opts.ManifestRequests, opts.Concurrency, logf)
	if err != nil {
		return Result{}, fmt.Errorf("manifests: %w", err)
	}
	res.Manifests = mr
	return res, nil
}

func withDefaults(o Options) (Options, error) {
	if o.URL == "" {
		return o, errors.New("bench: no registry URL")
	}
	if len(o.Sizes) == 0 {
		o.Sizes = DefaultSizes()
	}
	for _, s := range o.Sizes {
		if s <= 0 {
			return o, fmt.Errorf("bench: invalid blob size %d", s)
		}
	}
	if o.Repeat < 0 {
		return o, fmt.Errorf("bench: invalid repeat %d", o.Repeat)
	}
	if o.ManifestRequests == 0 {
		o.ManifestRequests = 20000
	}
	if o.ManifestRequests < 0 {
		return o, fmt.Errorf("bench: invalid manifest request count %d", o.ManifestRequests)
	}
	if o.ChunkSize == 0 {
		o.ChunkSize = DefaultChunkSize
	}
	if o.ChunkSize < 0 {
		return o, fmt.Errorf("bench: invalid chunk size %d", o.ChunkSize)
	}
	if o.Concurrency == 0 {
		o.Concurrency = 8
	}
	if o.Concurrency < 0 {
		return o, fmt.Errorf("bench: invalid concurrency %d", o.Concurrency)
	}
	if o.Repository == "" {
		var b [4]byte
		if _, err := rand.Read(b[:]); err != nil {
			return o, fmt.Errorf("bench: random repository name: %w", err)
		}
		o.Repository = "cairn-bench/run-" + hex.EncodeToString(b[:])
	}
	return o, nil
}

// repeatFor returns how many timed runs a blob of size gets.
func repeatFor(repeat int, size int64) int {
	if repeat > 0 {
		return repeat
	}
	if size >= 256<<20 {
		return 1
	}
	return 3
}

// stamper makes each push of the shared buffer a distinct blob, so that no
// registry can answer a push from a blob it already holds.
type stamper struct {
	base, n uint64
}

func (s *stamper) stamp(b []byte) {
	var v [8]byte
	binary.BigEndian.PutUint64(v[:], s.base+s.n)
	s.n++
	copy(b, v[:])
}

// randomBuffer returns random bytes as long as the largest size, generated
// once before any timing, and a stamper with a random base.
func randomBuffer(sizes []int64) ([]byte, *stamper, error) {
	var seed [32]byte
	if _, err := rand.Read(seed[:]); err != nil {
		return nil, nil, fmt.Errorf("bench: random seed: %w", err)
	}
	maxSize := sizes[0]
	for _, s := range sizes {
		maxSize = max(maxSize, s)
	}
	buf := make([]byte, maxSize)
	// ChaCha8 fills hundreds of MiB quickly; the data only has to be
	// incompressible and unlike any earlier run's.
	src := mrand.NewChaCha8(seed)
	_, _ = src.Read(buf)
	return buf, &stamper{base: binary.BigEndian.Uint64(seed[:8])}, nil
}

// benchBlobSize times sha256, the three push styles and pull for one size.
// The push styles alternate so that drift in the machine hits them alike.
func benchBlobSize(ctx context.Context, c *client, data []byte, st *stamper, runs int, opts Options, logf func(string, ...any)) (BlobResult, error) {
	size := int64(len(data))
	var hashD, chunkD, patchD, monoD, imageD, pullD []time.Duration
	var last string
	config, err := c.pushConfig(ctx)
	if err != nil {
		return BlobResult{}, fmt.Errorf("push the images' config: %w", err)
	}
	for r := range runs {
		for _, mode := range []pushMode{pushChunked, pushPatches, pushMonolithic, pushImage} {
			st.stamp(data)
			if opts.Flush {
				flushDisks()
			}
			t0 := time.Now()
			dg := digestOf(data)
			hashD = append(hashD, time.Since(t0))

			var d time.Duration
			if mode == pushImage {
				d, err = c.pushLayerImage(ctx, config, data, dg)
			} else {
				d, err = c.pushBlob(ctx, mode, data, dg, opts.ChunkSize)
			}
			if err != nil {
				return BlobResult{}, fmt.Errorf("push (%s) run %d: %w", mode, r+1, err)
			}
			logf("push (%s) %s run %d/%d: %.1f MB/s", mode, FormatSize(size), r+1, runs, mbPerSec(size, d))
			switch mode {
			case pushChunked:
				chunkD = append(chunkD, d)
			case pushPatches:
				patchD = append(patchD, d)
			case pushMonolithic:
				monoD = append(monoD, d)
			default:
				imageD = append(imageD, d)
			}
			last = dg
		}
	}
	// One untimed pull proves the registry returns the very bytes pushed;
	// the timed pulls then only count them.
	if err := c.verifyBlob(ctx, last, size); err != nil {
		return BlobResult{}, fmt.Errorf("pull check: %w", err)
	}
	for r := range runs {
		d, err := c.pullBlob(ctx, last, size)
		if err != nil {
			return BlobResult{}, fmt.Errorf("pull run %d: %w", r+1, err)
		}
		logf("pull %s run %d/%d: %.1f MB/s", FormatSize(size), r+1, runs, mbPerSec(size, d))
		pullD = append(pullD, d)
	}
	br := BlobResult{
		Size:           size,
		SizeText:       FormatSize(size),
		SHA256:         throughputOf(size, hashD),
		PushChunked:    throughputOf(size, chunkD),
		PushPatches:    throughputOf(size, patchD),
		PushMonolithic: throughputOf(size, monoD),
		PushImage:      throughputOf(size, imageD),
		Pull:           throughputOf(size, pullD),
	}
	if br.SHA256.MedianMBps > 0 {
		br.PushChunkedPerSHA256 = br.PushChunked.MedianMBps / br.SHA256.MedianMBps
		br.PushPatchesPerSHA256 = br.PushPatches.MedianMBps / br.SHA256.MedianMBps
		br.PushMonolithicPerSHA256 = br.PushMonolithic.MedianMBps / br.SHA256.MedianMBps
		br.PushImagePerSHA256 = br.PushImage.MedianMBps / br.SHA256.MedianMBps
	}
	return br, nil
}
