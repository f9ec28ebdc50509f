package dedup

import (
	"bytes"
	"context"
	"errors"
	"io"
	"sync"
	"testing"

	"github.com/cairn-registry/cairn/internal/storage/driver"
)

// TestOpenBlobRanges reads deduplicated layers from several offsets, with
// and without the preconstruct cache, first concurrently (one shared
// rebuild) and then again (a cache hit when there is a cache).
func TestOpenBlobRanges(t *testing.T) {
	t.Parallel()
	layers := sharedLayers(t)
	for _, cached := range []bool{false, true} {
		t.Run(map[bool]string{false: "no-cache", true: "preconstruct"}[cached], func(t *testing.T) {
			opts := Options{}
			if cached {
				opts.PreconstructDir, opts.PreconstructSize = t.TempDir(), 64<<20
			}
			v := newEnv(t, nil, opts)
			if (v.eng.disk != nil) != cached {
				t.Fatalf("preconstruct cache present = %v, want %v", v.eng.disk != nil, cached)
			}
			for _, l := range layers {
				d := v.put(l.blob)
				v.process(d, ModeFull, outDeduplicated)
				size := int64(len(l.blob))
				offsets := []int64{0, 1, 511, 512, size / 3, size / 2, size - 1, size}
				var wg sync.WaitGroup
				for _, off := range offsets {
					wg.Go(func() {
						got, err := v.read(d, off)
						if err != nil {
							t.Errorf("%s: offset %d: %v", l.name, off, err)
							return
						}
						if !bytes.Equal(got, l.blob[off:]) {
							t.Errorf("%s: offset %d: %d bytes, want the blob's last %d", l.name, off, len(got), size-off)
						}
					})
				}
				wg.Wait()
				if t.Failed() {
					return
				}
				if cached {
					eventually(t, "the rebuild to be cached", func() bool { return v.eng.disk.Contains(string(d)) })
				}
				hits := v.m.lookup(CachePreconstruct + "/hit")
				for _, off := range []int64{0, size / 2} {
					got, err := v.read(d, off)
					if err != nil || !bytes.Equal(got, l.blob[off:]) {
						t.Fatalf("%s: re-read at %d: %d bytes, %v", l.name, off, len(got), err)
					}
				}
				if cached && v.m.lookup(CachePreconstruct+"/hit") != hits+2 {
					t.Fatalf("%s: re-reads were not preconstruct cache hits", l.name)
				}
			}
		})
	}
}

// TestOpenBlobPartialRead: a reader closed early does not break others
// or leave a truncated cache entry.
func TestOpenBlobPartialRead(t *testing.T) {
	t.Parallel()
	v := newEnv(t, nil, Options{PreconstructDir: t.TempDir(), PreconstructSize: 64 << 20})
	l := sharedLayers(t)[0]
	d := v.put(l.blob)
	v.process(d, ModeFull, outDeduplicated)
	ctx := context.Background()
	rc, err := v.eng.OpenBlob(ctx, d, 0)
	if err != nil {
		t.Fatal(err)
	}
	head := make([]byte, 100)
	if _, err := io.ReadFull(rc, head); err != nil {
		t.Fatal(err)
	}
	rc.Close()
	if !bytes.Equal(head, l.blob[:100]) {
		t.Fatal("first bytes differ")
	}
	v.wantBlob(l.blob)
	eventually(t, "the rebuild to be cached", func() bool { return v.eng.disk.Contains(string(d)) })
	v.wantBlob(l.blob)
}

// TestOpenBlobUnknown: a blob without a recipe is not found, by both calls.
func TestOpenBlobUnknown(t *testing.T) {
	t.Parallel()
	v := newEnv(t, nil, Options{})
	l := sharedLayers(t)[0]
	d := v.put(l.blob) // intact, never processed
	if _, err := v.eng.BlobSize(context.Background(), d); !errors.Is(err, driver.ErrNotFound) {
		t.Fatalf("BlobSize of an unprocessed blob: %v, want ErrNotFound", err)
	}
	if _, err := v.eng.OpenBlob(context.Background(), d, 0); !errors.Is(err, driver.ErrNotFound) {
		t.Fatalf("OpenBlob of an unprocessed blob: %v, want ErrNotFound", err)
	}
	if rc := v.eng.CachedBlob(d, 0); rc != nil {
		t.Fatal("CachedBlob without a prefetch cache returned a reader")
	}
}

// TestRestoreOnly: an engine without a metadata store serves recipes
// written by another, and ignores pushes and pulls.
func TestRestoreOnly(t *testing.T) {
	t.Parallel()
	v := newEnv(t, nil, Options{})
	l := sharedLayers(t)[2]
	d := v.put(l.blob)
	v.process(d, ModeFull, outDeduplicated)
	ro, err := New(v.d, nil, Options{Mode: ModeFull}, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer ro.Close()
	ro.Start(context.Background())
	ro.ManifestPushed("repo", d, manifest(t, false, d, []tlayer{l}))
	ro.ManifestPulled(context.Background(), "c", d, manifest(t, false, d, []tlayer{l}))
	ro.BlobPulled(context.Background(), "c", d)
	rc, err := ro.OpenBlob(context.Background(), d, 0)
	if err != nil {
		t.Fatal(err)
	}
	got, err := io.ReadAll(rc)
	rc.Close()
	if err != nil || !bytes.Equal(got, l.blob) {
		t.Fatalf("restore-only read: %d bytes, %v", len(got), err)
	}
	if _, err := ro.Stats(context.Background()); err == nil {
		t.Fatal("Stats without a metadata store succeeded")
	}
}
