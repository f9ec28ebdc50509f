package dedup

import (
	"bytes"
	"context"
	"errors"
	"io"
	"log/slog"
	"strings"
	"sync"
	"testing"

	"github.com/opencontainers/go-digest"

	"github.com/cairn-registry/cairn/internal/storage/driver"
	"github.com/cairn-registry/cairn/internal/testutil/logbuf"
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
// written by another whose files are objects of their own (a store
// deduplicated before packs: packs are located through the metadata
// store), and ignores pushes and pulls.
func TestRestoreOnly(t *testing.T) {
	t.Parallel()
	v := newEnv(t, nil, Options{})
	l := sharedLayers(t)[2]
	d := v.put(l.blob)
	v.process(d, ModeFull, outDeduplicated)
	for _, f := range l.files {
		fd := digest.FromBytes(f.body)
		if err := v.eng.files.Legacy().Put(context.Background(), fd, int64(len(f.body)), bytes.NewReader(f.body)); err != nil {
			t.Fatal(err)
		}
	}
	ro, err := New(v.d, nil, Options{Mode: ModeFull}, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer ro.Close()
	ro.Start(context.Background())
	ro.ManifestPushed(context.Background(), "repo", parsed(t, d, imageManifest(t, false, d, []tlayer{l})))
	ro.ManifestPulled(context.Background(), "c", parsed(t, d, imageManifest(t, false, d, []tlayer{l})))
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

// TestRestoreFailure: a deduplicated layer whose rebuild fails (a unique
// file missing or corrupt in the store, a recipe that no longer reproduces
// the blob) never reads as a complete blob, with or without the
// preconstruct cache; the failure is logged at ERROR naming the layer and
// the file at fault, and counted by reason.
func TestRestoreFailure(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	cases := []struct {
		name   string
		reason string
		damage func(v *env, l digest.Digest, file digest.Digest)
	}{
		{"missing file", failMissingFile, func(v *env, _, f digest.Digest) {
			v.loseFile(f)
		}},
		{"corrupt file", failCorruptFile, func(v *env, _, f digest.Digest) {
			v.flipFileByte(f)
		}},
		{"recipe mismatch", failMismatch, func(v *env, l, _ digest.Digest) {
			// Another gzip header mtime: every byte is rebuilt, but the
			// digest does not match.
			r, err := v.eng.recipe(ctx, l)
			if err != nil {
				v.t.Fatal(err)
			}
			r.Compression.Members[0].Header[4] ^= 0x01
		}},
	}
	for _, l := range sharedLayers(t) {
		for _, cached := range []bool{false, true} {
			for _, tc := range cases {
				if tc.reason == failMismatch && l.mediaType != mtOCIGzip {
					continue
				}
				name := l.name + "/" + map[bool]string{false: "no-cache", true: "preconstruct"}[cached] + "/" + tc.name
				t.Run(name, func(t *testing.T) {
					t.Parallel()
					opts := Options{}
					if cached {
						opts.PreconstructDir, opts.PreconstructSize = t.TempDir(), 64<<20
					}
					v := newEnv(t, nil, opts)
					var logs logbuf.Buffer
					v.eng.log = slog.New(slog.NewTextHandler(&logs, nil))
					d := v.put(l.blob)
					v.process(d, ModeFull, outDeduplicated)
					file := payloadDigests(l.files)[0]
					tc.damage(v, d, file)

					rc, err := v.eng.OpenBlob(ctx, d, 0)
					if err != nil {
						t.Fatal(err)
					}
					// A client reads exactly the blob's length (as an HTTP
					// response body does): it must not get that far.
					n, err := io.ReadFull(rc, make([]byte, len(l.blob)))
					rc.Close()
					if err == nil {
						t.Fatalf("read the whole %d-byte blob from a failed rebuild", n)
					}
					if got := v.m.failures(tc.reason); got != 1 {
						t.Fatalf("rebuild failures %q = %d, want 1 (%v)", tc.reason, got, err)
					}
					want := []string{"level=ERROR", "layer=" + string(d), "reason=" + tc.reason}
					if tc.reason != failMismatch {
						want = append(want, "file="+string(file))
					}
					line := ""
					for _, ln := range strings.Split(logs.String(), "\n") {
						if strings.Contains(ln, "level=ERROR") {
							line = ln
						}
					}
					for _, w := range want {
						if !strings.Contains(line, w) {
							t.Fatalf("ERROR line lacks %q:\n%s", w, logs.String())
						}
					}
				})
			}
		}
	}
}

// TestRestoreReaderGone: a rebuild that stops because its output failed
// (a reader that went away, a full cache disk) or its context ended is no
// failure of the layer: not logged at ERROR, not counted.
func TestRestoreReaderGone(t *testing.T) {
	t.Parallel()
	v := newEnv(t, nil, Options{})
	var logs logbuf.Buffer
	v.eng.log = slog.New(slog.NewTextHandler(&logs, nil))
	l := sharedLayers(t)[0]
	d := v.put(l.blob)
	v.process(d, ModeFull, outDeduplicated)
	r, err := v.eng.recipe(t.Context(), d)
	if err != nil {
		t.Fatal(err)
	}
	if err := v.eng.restore(t.Context(), r, &failAfter{n: 100}, allCores); err == nil {
		t.Fatal("restore into a failing writer succeeded")
	}
	ctx, cancel := context.WithCancel(t.Context())
	if err := v.eng.restore(ctx, r, &failAfter{n: 100, then: cancel}, allCores); err == nil {
		t.Fatal("restore with a cancelled context succeeded")
	}
	v.m.mu.Lock()
	defer v.m.mu.Unlock()
	if len(v.m.failed) != 0 || strings.Contains(logs.String(), "level=ERROR") {
		t.Fatalf("counted %v, logged:\n%s", v.m.failed, logs.String())
	}
}

// failAfter accepts n bytes, then calls then (if set) and fails.
type failAfter struct {
	n    int
	then func()
}

func (f *failAfter) Write(p []byte) (int, error) {
	if len(p) <= f.n {
		f.n -= len(p)
		return len(p), nil
	}
	if f.then != nil {
		f.then()
		f.n = 1 << 30 // the context ends the rebuild, not this writer
		return len(p), nil
	}
	return 0, io.ErrClosedPipe
}
