package bench

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"context"
	"crypto/rand"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"slices"
	"sync"
	"sync/atomic"
	"time"
)

const (
	mediaManifest = "application/vnd.oci.image.manifest.v1+json"
	mediaConfig   = "application/vnd.oci.image.config.v1+json"
	mediaLayer    = "application/vnd.oci.image.layer.v1.tar+gzip"
	benchTag      = "latest"
)

// manifestAccept is what docker and containerd send when pulling by tag.
func manifestAccept() http.Header {
	return http.Header{"Accept": {
		mediaManifest,
		"application/vnd.oci.image.index.v1+json",
		"application/vnd.docker.distribution.manifest.v2+json",
		"application/vnd.docker.distribution.manifest.list.v2+json",
	}}
}

type descriptor struct {
	MediaType string `json:"mediaType"`
	Digest    string `json:"digest"`
	Size      int64  `json:"size"`
}

type image struct {
	blobs    [][]byte // config first, then the layers
	manifest []byte
	digest   string
}

// buildImage makes a small but real image: a config and two tar+gzip layers
// whose diff_ids are right, so that a registry that inspects layers finds
// nothing odd.
func buildImage() (image, error) {
	var img image
	var layers []descriptor
	var diffIDs []string
	for i := range 2 {
		content := make([]byte, 4096)
		if _, err := rand.Read(content); err != nil {
			return image{}, err
		}
		var tarBuf bytes.Buffer
		tw := tar.NewWriter(&tarBuf)
		hdr := &tar.Header{Name: fmt.Sprintf("bench/file-%d", i), Mode: 0o644, Size: int64(len(content)), ModTime: time.Unix(0, 0)}
		if err := tw.WriteHeader(hdr); err != nil {
			return image{}, err
		}
		if _, err := tw.Write(content); err != nil {
			return image{}, err
		}
		if err := tw.Close(); err != nil {
			return image{}, err
		}
		var gzBuf bytes.Buffer
		zw := gzip.NewWriter(&gzBuf)
		if _, err := zw.Write(tarBuf.Bytes()); err != nil {
			return image{}, err
		}
		if err := zw.Close(); err != nil {
			return image{}, err
		}
		diffIDs = append(diffIDs, digestOf(tarBuf.Bytes()))
		layer := gzBuf.Bytes()
		img.blobs = append(img.blobs, layer)
		layers = append(layers, descriptor{MediaType: mediaLayer, Digest: digestOf(layer), Size: int64(len(layer))})
	}
	config, err := json.Marshal(map[string]any{
		"architecture": "amd64",
		"os":           "linux",
		"config":       map[string]any{},
		"rootfs":       map[string]any{"type": "layers", "diff_ids": diffIDs},
	})
	if err != nil {
		return image{}, err
	}
	img.blobs = append([][]byte{config}, img.blobs...)
	manifest, err := json.Marshal(map[string]any{
		"schemaVersion": 2,
		"mediaType":     mediaManifest,
		"config":        descriptor{MediaType: mediaConfig, Digest: digestOf(config), Size: int64(len(config))},
		"layers":        layers,
	})
	if err != nil {
		return image{}, err
	}
	img.manifest = manifest
	img.digest = digestOf(manifest)
	return img, nil
}

// pushImage pushes img's blobs and its manifest under benchTag, then checks
// that a GET by tag returns the manifest as pushed.
func (c *client) pushImage(ctx context.Context, img image) error {
	for _, b := range img.blobs {
		if _, err := c.pushBlob(ctx, pushMonolithic, b, digestOf(b), 0); err != nil {
			return err
		}
	}
	resp, err := c.do(ctx, http.MethodPut, c.url("/v2/"+c.repo+"/manifests/"+benchTag),
		bytes.NewReader(img.manifest), http.Header{"Content-Type": {mediaManifest}})
	if err != nil {
		return err
	}
	if err := expect(resp, http.StatusCreated); err != nil {
		return err
	}
	drain(resp)
	if got := resp.Header.Get("Docker-Content-Digest"); got != "" && got != img.digest {
		return fmt.Errorf("PUT manifest: Docker-Content-Digest %s, want %s", got, img.digest)
	}

	resp, err = c.do(ctx, http.MethodGet, c.url("/v2/"+c.repo+"/manifests/"+benchTag), nil, manifestAccept())
	if err != nil {
		return err
	}
	if err := expect(resp, http.StatusOK); err != nil {
		return err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, 4<<20))
	if err != nil {
		return fmt.Errorf("GET manifest: %w", err)
	}
	if !bytes.Equal(body, img.manifest) {
		return fmt.Errorf("GET manifest by tag: body differs from the manifest pushed")
	}
	if ct := resp.Header.Get("Content-Type"); ct != mediaManifest {
		return fmt.Errorf("GET manifest by tag: Content-Type %q, want %q", ct, mediaManifest)
	}
	return nil
}

// pushConfig pushes the config blob of the images pushLayerImage pushes and
// returns its descriptor.
func (c *client) pushConfig(ctx context.Context) (descriptor, error) {
	config := []byte(`{"architecture":"amd64","os":"linux","config":{},"rootfs":{"type":"layers","diff_ids":[]}}`)
	dg := digestOf(config)
	if _, err := c.pushBlob(ctx, pushMonolithic, config, dg, 0); err != nil {
		return descriptor{}, err
	}
	return descriptor{MediaType: mediaConfig, Digest: dg, Size: int64(len(config))}, nil
}

// pushLayerImage pushes data (digest dg) whole as the one layer of an
// image, then the image's manifest by digest, and returns the time from
// the first request to the manifest's 201.
func (c *client) pushLayerImage(ctx context.Context, config descriptor, data []byte, dg string) (time.Duration, error) {
	manifest, err := json.Marshal(map[string]any{
		"schemaVersion": 2,
		"mediaType":     mediaManifest,
		"config":        config,
		"layers":        []descriptor{{MediaType: mediaLayer, Digest: dg, Size: int64(len(data))}},
	})
	if err != nil {
		return 0, err
	}
	t0 := time.Now()
	if _, err := c.pushBlob(ctx, pushMonolithic, data, dg, 0); err != nil {
		return 0, err
	}
	resp, err := c.do(ctx, http.MethodPut, c.url("/v2/"+c.repo+"/manifests/"+digestOf(manifest)),
		bytes.NewReader(manifest), http.Header{"Content-Type": {mediaManifest}})
	if err != nil {
		return 0, err
	}
	if err := expect(resp, http.StatusCreated); err != nil {
		return 0, err
	}
	drain(resp)
	return time.Since(t0), nil
}

// getManifestByTag is one timed request of the GET loop.
func (c *client) getManifestByTag(ctx context.Context, img image) error {
	resp, err := c.do(ctx, http.MethodGet, c.url("/v2/"+c.repo+"/manifests/"+benchTag), nil, manifestAccept())
	if err != nil {
		return err
	}
	if err := expect(resp, http.StatusOK); err != nil {
		return err
	}
	defer resp.Body.Close()
	n, err := io.Copy(io.Discard, resp.Body)
	if err != nil {
		return fmt.Errorf("GET manifest: %w", err)
	}
	if n != int64(len(img.manifest)) {
		return fmt.Errorf("GET manifest: %d bytes, want %d", n, len(img.manifest))
	}
	if got := resp.Header.Get("Docker-Content-Digest"); got != "" && got != img.digest {
		return fmt.Errorf("GET manifest: Docker-Content-Digest %s, want %s", got, img.digest)
	}
	return nil
}

// headManifestByDigest is one timed request of the HEAD loop.
func (c *client) headManifestByDigest(ctx context.Context, img image) error {
	resp, err := c.do(ctx, http.MethodHead, c.url("/v2/"+c.repo+"/manifests/"+img.digest), nil, manifestAccept())
	if err != nil {
		return err
	}
	if err := expect(resp, http.StatusOK); err != nil {
		return err
	}
	drain(resp)
	if resp.ContentLength >= 0 && resp.ContentLength != int64(len(img.manifest)) {
		return fmt.Errorf("HEAD manifest: Content-Length %d, want %d", resp.ContentLength, len(img.manifest))
	}
	if got := resp.Header.Get("Docker-Content-Digest"); got != "" && got != img.digest {
		return fmt.Errorf("HEAD manifest: Docker-Content-Digest %s, want %s", got, img.digest)
	}
	return nil
}

// benchManifests pushes a small image and times n GETs by tag, then n HEADs
// by digest, each by conc concurrent keep-alive clients.
func benchManifests(ctx context.Context, c *client, n, conc int, logf func(string, ...any)) ([]RequestResult, error) {
	img, err := buildImage()
	if err != nil {
		return nil, fmt.Errorf("build image: %w", err)
	}
	if err := c.pushImage(ctx, img); err != nil {
		return nil, fmt.Errorf("push image: %w", err)
	}
	logf("pushed %s:%s (%s)", c.repo, benchTag, img.digest)
	loops := []struct {
		name string
		do   func(context.Context, image) error
	}{
		{"GET manifest by tag", c.getManifestByTag},
		{"HEAD manifest by digest", c.headManifestByDigest},
	}
	var out []RequestResult
	for _, l := range loops {
		do := func(ctx context.Context) error { return l.do(ctx, img) }
		// Untimed warm-up: opens every client's connection.
		if _, _, err := requestLoop(ctx, 2*conc, conc, do); err != nil {
			return nil, fmt.Errorf("%s: %w", l.name, err)
		}
		lat, elapsed, err := requestLoop(ctx, n, conc, do)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", l.name, err)
		}
		r := summarizeRequests(l.name, conc, lat, elapsed)
		logf("%s: %d requests, %d clients: %.0f req/s, p50 %.2f ms, p99 %.2f ms", r.Name, r.Requests, conc, r.ReqPerSec, r.P50Ms, r.P99Ms)
		out = append(out, r)
	}
	return out, nil
}

// requestLoop makes n calls of do from conc goroutines and returns each
// call's latency and the wall time of the whole loop. The first error
// cancels the rest.
func requestLoop(parent context.Context, n, conc int, do func(context.Context) error) ([]time.Duration, time.Duration, error) {
	ctx, cancel := context.WithCancel(parent)
	defer cancel()
	lat := make([]time.Duration, n)
	var next atomic.Int64
	var (
		mu       sync.Mutex
		firstErr error
	)
	var wg sync.WaitGroup
	t0 := time.Now()
	for range min(conc, n) {
		wg.Go(func() {
			for {
				i := next.Add(1) - 1
				if i >= int64(n) || ctx.Err() != nil {
					return
				}
				s := time.Now()
				if err := do(ctx); err != nil {
					mu.Lock()
					if firstErr == nil {
						firstErr = err
					}
					mu.Unlock()
					cancel()
					return
				}
				lat[i] = time.Since(s)
			}
		})
	}
	wg.Wait()
	elapsed := time.Since(t0)
	if firstErr == nil && parent.Err() != nil {
		// Cancelled from outside: the latencies are incomplete.
		firstErr = parent.Err()
	}
	return lat, elapsed, firstErr
}

func summarizeRequests(name string, conc int, lat []time.Duration, elapsed time.Duration) RequestResult {
	s := slices.Clone(lat)
	slices.Sort(s)
	r := RequestResult{Name: name, Requests: len(s), Concurrency: conc, ElapsedMs: ms(elapsed)}
	if elapsed > 0 {
		r.ReqPerSec = float64(len(s)) / elapsed.Seconds()
	}
	if len(s) > 0 {
		r.P50Ms = ms(percentile(s, 50))
		r.P99Ms = ms(percentile(s, 99))
		r.MaxMs = ms(s[len(s)-1])
	}
	return r
}
