package registry

import (
	"bytes"
	"context"
	"crypto/rand"
	"errors"
	"io"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/cairn-registry/cairn/internal/layout"
	"github.com/cairn-registry/cairn/internal/testutil/drivertest"

	"github.com/opencontainers/go-digest"

	"github.com/cairn-registry/cairn/internal/storage/driver"
	"github.com/cairn-registry/cairn/internal/storage/driver/inmemory"
)

func randomBytes(t *testing.T, n int) []byte {
	t.Helper()
	b := make([]byte, n)
	rand.Read(b)
	return b
}

// wantBlob checks that blob d is stored with exactly content.
func wantBlob(t *testing.T, r *Registry, d digest.Digest, content []byte) {
	t.Helper()
	got, err := r.d.GetContent(context.Background(), layout.BlobData(d))
	if err != nil {
		t.Fatalf("blob %s: %v", d, err)
	}
	if !bytes.Equal(got, content) {
		t.Fatalf("blob %s holds %d bytes hashing to %s, want %d bytes", d, len(got), digest.FromBytes(got), len(content))
	}
}

// gate is a body that yields first, then blocks until released, then
// yields rest: a chunk still streaming.
type gate struct {
	first, rest []byte
	reached     chan struct{}
	release     chan struct{}
	once        sync.Once
}

func newGate(first, rest []byte) *gate {
	return &gate{first: first, rest: rest, reached: make(chan struct{}), release: make(chan struct{})}
}

func (g *gate) Read(p []byte) (int, error) {
	if len(g.first) > 0 {
		n := copy(p, g.first)
		g.first = g.first[n:]
		return n, nil
	}
	g.once.Do(func() { close(g.reached) })
	<-g.release
	if len(g.rest) == 0 {
		return 0, io.EOF
	}
	n := copy(p, g.rest)
	g.rest = g.rest[n:]
	return n, nil
}

func TestUploadChunksAndCommit(t *testing.T) {
	drivertest.ForEach(t, func(t *testing.T, d driver.Driver) {
		ctx := context.Background()
		r := New(d, Options{})
		parts := [][]byte{randomBytes(t, 1000), randomBytes(t, 1), randomBytes(t, 70000)}
		all := bytes.Join(parts, nil)
		id, err := r.StartUpload(ctx, "a")
		if err != nil {
			t.Fatal(err)
		}
		off := int64(0)
		for _, p := range parts {
			n, err := r.AppendUpload(ctx, "a", id, bytes.NewReader(p), off)
			if err != nil {
				t.Fatal(err)
			}
			off += int64(len(p))
			if n != off {
				t.Fatalf("size %d, want %d", n, off)
			}
		}
		if _, err := r.AppendUpload(ctx, "a", id, bytes.NewReader([]byte("x")), 5); !isRange(err, off) {
			t.Fatalf("chunk at 5: %v, want a RangeError at %d", err, off)
		}
		if size, err := r.UploadSize(ctx, "a", id); err != nil || size != off {
			t.Fatalf("UploadSize = %d, %v", size, err)
		}
		if _, err := r.FinishUpload(ctx, "a", id, digest.FromBytes(all[1:]), nil, -1); !errors.Is(err, ErrDigestInvalid) {
			t.Fatalf("wrong digest: %v", err)
		}
		// A wrong digest cancels the session, as distribution does.
		if err := r.checkUpload(ctx, "a", id); !errors.Is(err, ErrUploadUnknown) {
			t.Fatalf("session after a wrong digest: %v", err)
		}

		id, _ = r.StartUpload(ctx, "a")
		for i, p := range parts[:2] {
			if _, err := r.AppendUpload(ctx, "a", id, bytes.NewReader(p), -1); err != nil {
				t.Fatalf("chunk %d: %v", i, err)
			}
		}
		if _, err := r.FinishUpload(ctx, "a", id, digest.FromBytes(all), bytes.NewReader(parts[2]), int64(len(parts[0])+1)); err != nil {
			t.Fatal(err)
		}
		wantBlob(t, r, digest.FromBytes(all), all)
		if _, err := d.Stat(ctx, layout.UploadDir("a", id)); !errors.Is(err, driver.ErrNotFound) {
			t.Fatalf("session left after commit: %v", err)
		}

		// Another algorithm is verified by reading the chunks.
		id, _ = r.StartUpload(ctx, "a")
		r.AppendUpload(ctx, "a", id, bytes.NewReader(parts[0]), 0)
		r.AppendUpload(ctx, "a", id, bytes.NewReader(parts[1]), -1)
		want512 := digest.SHA512.FromBytes(bytes.Join(parts[:2], nil))
		if _, err := r.FinishUpload(ctx, "a", id, digest.SHA512.FromBytes(parts[0]), nil, -1); !errors.Is(err, ErrDigestInvalid) {
			t.Fatalf("wrong sha512: %v", err)
		}
		id, _ = r.StartUpload(ctx, "a")
		r.AppendUpload(ctx, "a", id, bytes.NewReader(parts[0]), 0)
		r.AppendUpload(ctx, "a", id, bytes.NewReader(parts[1]), -1)
		if _, err := r.FinishUpload(ctx, "a", id, want512, nil, -1); err != nil {
			t.Fatal(err)
		}
		wantBlob(t, r, want512, bytes.Join(parts[:2], nil))

		// An empty upload is the empty blob.
		id, _ = r.StartUpload(ctx, "a")
		if _, err := r.FinishUpload(ctx, "a", id, digest.FromBytes(nil), nil, -1); err != nil {
			t.Fatal(err)
		}
		wantBlob(t, r, digest.FromBytes(nil), nil)
	})
}

func isRange(err error, size int64) bool {
	var re *RangeError
	return errors.As(err, &re) && re.Size == size
}

// TestUploadBusy: within a process a second request on a session that a
// chunk is streaming into is refused, and the streaming chunk cannot reach
// a blob the session was committed to (covered across processes below).
func TestUploadBusy(t *testing.T) {
	drivertest.ForEach(t, func(t *testing.T, d driver.Driver) {
		ctx := context.Background()
		r := New(d, Options{})
		a, b := randomBytes(t, 5000), randomBytes(t, 3000)
		id, _ := r.StartUpload(ctx, "a")
		r.AppendUpload(ctx, "a", id, bytes.NewReader(a), 0)
		g := newGate(b[:100], b[100:])
		done := make(chan error, 1)
		go func() {
			_, err := r.AppendUpload(ctx, "a", id, g, -1)
			done <- err
		}()
		<-g.reached
		var re *RangeError
		_, err := r.AppendUpload(ctx, "a", id, bytes.NewReader([]byte("x")), -1)
		if !errors.As(err, &re) || !re.Busy || re.Size != int64(len(a)) {
			t.Fatalf("concurrent PATCH: %v, want a busy RangeError at %d", err, len(a))
		}
		if _, err := r.FinishUpload(ctx, "a", id, digest.FromBytes(a), nil, -1); !errors.As(err, &re) || !re.Busy {
			t.Fatalf("concurrent commit: %v, want busy", err)
		}
		if err := r.CancelUpload(ctx, "a", id); !errors.As(err, &re) || !re.Busy {
			t.Fatalf("concurrent cancel: %v, want busy", err)
		}
		close(g.release)
		if err := <-done; err != nil {
			t.Fatal(err)
		}
		ab := append(bytes.Clone(a), b...)
		if _, err := r.FinishUpload(ctx, "a", id, digest.FromBytes(ab), nil, -1); err != nil {
			t.Fatal(err)
		}
		wantBlob(t, r, digest.FromBytes(ab), ab)
	})
}

// TestUploadAcrossNodes: two registries over one store (two nodes behind a
// load balancer) share no lock. A commit on one node while the other
// streams a chunk into the same session stores exactly the verified bytes;
// chunks written at once at the same offset fork the session, and the
// commit takes the fork its head names, or refuses.
func TestUploadAcrossNodes(t *testing.T) {
	drivertest.ForEach(t, func(t *testing.T, d driver.Driver) {
		ctx := context.Background()
		n1, n2 := New(d, Options{}), New(d, Options{})
		a, b := randomBytes(t, 4000), randomBytes(t, 6000)

		t.Run("commit while the other node streams", func(t *testing.T) {
			id, _ := n1.StartUpload(ctx, "a")
			n1.AppendUpload(ctx, "a", id, bytes.NewReader(a), 0)
			g := newGate(b[:1000], b[1000:])
			done := make(chan error, 1)
			go func() {
				_, err := n2.AppendUpload(ctx, "a", id, g, -1)
				done <- err
			}()
			<-g.reached
			if _, err := n1.FinishUpload(ctx, "a", id, digest.FromBytes(a), nil, -1); err != nil {
				t.Fatal(err)
			}
			close(g.release)
			<-done // succeeds or fails; either way it must not touch the blob
			wantBlob(t, n1, digest.FromBytes(a), a)
			if err := n1.checkUpload(ctx, "a", id); !errors.Is(err, ErrUploadUnknown) {
				t.Fatalf("session after commit: %v", err)
			}
		})

		t.Run("forked chunks", func(t *testing.T) {
			id, _ := n1.StartUpload(ctx, "a")
			n1.AppendUpload(ctx, "a", id, bytes.NewReader(a), 0)
			head, err := n1.readHead(ctx, "a", id)
			if err != nil {
				t.Fatal(err)
			}
			// Both nodes write a chunk at the same offset before either
			// publishes; n2 publishes last, so head names its fork.
			b1, b2 := randomBytes(t, 700), randomBytes(t, 700)
			c1, err := n1.writeChunk(ctx, "a", id, head, bytes.NewReader(b1), -1)
			if err != nil {
				t.Fatal(err)
			}
			c2, err := n2.writeChunk(ctx, "a", id, head, bytes.NewReader(b2), -1)
			if err != nil {
				t.Fatal(err)
			}
			if err := n1.publishChunk(ctx, "a", id, head, c1); err != nil {
				t.Fatal(err)
			}
			if err := n2.publishChunk(ctx, "a", id, head, c2); err != nil {
				t.Fatal(err)
			}
			// n1's client thinks the upload is a+b1: refused.
			ab1 := append(bytes.Clone(a), b1...)
			if _, err := n1.FinishUpload(ctx, "a", id, digest.FromBytes(ab1), nil, -1); !errors.Is(err, ErrDigestInvalid) {
				t.Fatalf("commit of the fork head does not name: %v", err)
			}
			if ok, _ := n1.exists(ctx, layout.BlobData(digest.FromBytes(ab1))); ok {
				t.Fatal("the losing fork was stored")
			}
		})

		t.Run("forked chunks, head's fork committed", func(t *testing.T) {
			id, _ := n1.StartUpload(ctx, "a")
			n1.AppendUpload(ctx, "a", id, bytes.NewReader(a), 0)
			head, _ := n1.readHead(ctx, "a", id)
			b1, b2 := randomBytes(t, 900), randomBytes(t, 900)
			c1, _ := n1.writeChunk(ctx, "a", id, head, bytes.NewReader(b1), -1)
			c2, _ := n2.writeChunk(ctx, "a", id, head, bytes.NewReader(b2), -1)
			n1.publishChunk(ctx, "a", id, head, c1)
			n2.publishChunk(ctx, "a", id, head, c2)
			// A later chunk on n2 continues its fork.
			tail := randomBytes(t, 50)
			if _, err := n2.AppendUpload(ctx, "a", id, bytes.NewReader(tail), int64(len(a)+len(b2))); err != nil {
				t.Fatal(err)
			}
			want := bytes.Join([][]byte{a, b2, tail}, nil)
			if _, err := n1.FinishUpload(ctx, "a", id, digest.FromBytes(want), nil, -1); err != nil {
				t.Fatal(err)
			}
			wantBlob(t, n1, digest.FromBytes(want), want)
		})
	})
}

// failAfter yields b, then fails like a client that went away.
type failAfter struct{ b []byte }

func (f *failAfter) Read(p []byte) (int, error) {
	if len(f.b) == 0 {
		return 0, io.ErrUnexpectedEOF
	}
	n := copy(p, f.b)
	f.b = f.b[n:]
	return n, nil
}

// TestUploadResumeAfterCutChunk: a chunk cut short keeps nothing, neither
// in the session nor on the store; the client resumes at the Range the
// session held before it.
func TestUploadResumeAfterCutChunk(t *testing.T) {
	drivertest.ForEach(t, func(t *testing.T, d driver.Driver) {
		ctx := context.Background()
		r := New(d, Options{})
		all := randomBytes(t, 3<<20)
		id, _ := r.StartUpload(ctx, "a")
		first := 1 << 20
		if _, err := r.AppendUpload(ctx, "a", id, bytes.NewReader(all[:first]), 0); err != nil {
			t.Fatal(err)
		}
		before := chunkObjects(t, d, "a", id)
		cut := 2<<20 + 12345
		n, err := r.AppendUpload(ctx, "a", id, &failAfter{all[first:cut]}, int64(first))
		if !errors.Is(err, io.ErrUnexpectedEOF) {
			t.Fatalf("cut chunk: %v", err)
		}
		if n != int64(first) {
			t.Fatalf("cut chunk: session holds %d bytes, want %d", n, first)
		}
		if after := chunkObjects(t, d, "a", id); !slices.Equal(after, before) {
			t.Fatalf("cut chunk left objects: %v, before it %v", after, before)
		}
		if _, err := r.FinishUpload(ctx, "a", id, digest.FromBytes(all), bytes.NewReader(all[first:]), int64(first)); err != nil {
			t.Fatal(err)
		}
		wantBlob(t, r, digest.FromBytes(all), all)
	})
}

// TestPurgeFailedUploads: a session whose newest chunk failed, with no
// chunk since, is purged by PurgeFailedUploads and by PurgeUploads' failed
// rule once its failure is older than the cutoff; a session a later chunk
// joined is kept, and so is one whose failure is newer.
func TestPurgeFailedUploads(t *testing.T) {
	ctx := context.Background()
	d := inmemory.New()
	r := New(d, Options{})
	data := randomBytes(t, 1<<16)
	fail := func(id string) {
		t.Helper()
		if _, err := r.AppendUpload(ctx, "a", id, &failAfter{data}, -1); !errors.Is(err, io.ErrUnexpectedEOF) {
			t.Fatalf("cut chunk: %v", err)
		}
	}
	abandoned, _ := r.StartUpload(ctx, "a")
	fail(abandoned)
	resumed, _ := r.StartUpload(ctx, "a")
	fail(resumed)
	if _, err := r.AppendUpload(ctx, "a", resumed, bytes.NewReader(data), 0); err != nil {
		t.Fatal(err)
	}
	healthy, _ := r.StartUpload(ctx, "a")
	if _, err := r.AppendUpload(ctx, "a", healthy, bytes.NewReader(data), 0); err != nil {
		t.Fatal(err)
	}

	// A cutoff before the failures purges nothing.
	if n, err := r.PurgeFailedUploads(ctx, time.Now().Add(-time.Hour), false); n != 0 || err != nil {
		t.Fatalf("early purge: %d, %v", n, err)
	}
	if n, err := r.PurgeFailedUploads(ctx, time.Now().Add(time.Second), true); n != 1 || err != nil {
		t.Fatalf("dry run: %d, %v; want 1", n, err)
	}
	if _, err := r.UploadSize(ctx, "a", abandoned); err != nil {
		t.Fatalf("dry run deleted the session: %v", err)
	}
	// The dry run forgot what it counted; the store's walk still finds it.
	if n, err := r.PurgeUploads(ctx, time.Now().Add(-time.Hour), time.Now().Add(time.Second), false); n != 1 || err != nil {
		t.Fatalf("purge: %d, %v; want 1", n, err)
	}
	if _, err := r.UploadSize(ctx, "a", abandoned); !errors.Is(err, ErrUploadUnknown) {
		t.Fatalf("abandoned session after the purge: %v", err)
	}
	for _, id := range []string{resumed, healthy} {
		if n, err := r.UploadSize(ctx, "a", id); err != nil || n != int64(len(data)) {
			t.Fatalf("session %s after the purge: %d, %v", id, n, err)
		}
	}

	// Seen failing by this process: purged without a walk.
	again, _ := r.StartUpload(ctx, "a")
	fail(again)
	if n, err := r.PurgeFailedUploads(ctx, time.Now().Add(time.Second), false); n != 1 || err != nil {
		t.Fatalf("purge: %d, %v; want 1", n, err)
	}
	if _, err := r.UploadSize(ctx, "a", again); !errors.Is(err, ErrUploadUnknown) {
		t.Fatalf("failed session after the purge: %v", err)
	}
}

func TestUploadChunkBound(t *testing.T) {
	ctx := context.Background()
	r := New(inmemory.New(), Options{MaxUploadChunks: 3})
	id, _ := r.StartUpload(ctx, "a")
	for i := range 3 {
		if _, err := r.AppendUpload(ctx, "a", id, bytes.NewReader([]byte{byte(i)}), -1); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := r.AppendUpload(ctx, "a", id, bytes.NewReader([]byte{3}), -1); !errors.Is(err, ErrUploadInvalid) {
		t.Fatalf("fourth chunk: %v, want ErrUploadInvalid", err)
	}
	if _, err := r.FinishUpload(ctx, "a", id, digest.FromBytes([]byte{0, 1, 2}), nil, -1); err != nil {
		t.Fatal(err)
	}
	wantBlob(t, r, digest.FromBytes([]byte{0, 1, 2}), []byte{0, 1, 2})
}

func TestParseChunkRecord(t *testing.T) {
	name := recordName(newChunkName("0badcafe", 4096), 8192)
	c, ok := parseChunkRecord(name)
	if !ok || c.start != 4096 || c.end != 8192 || c.dataName() != name[:33] || c.owner() != "0badcafe" {
		t.Fatalf("parse %q = %+v, %v", name, c, ok)
	}
	for _, bad := range []string{
		name[:33], "assembled-" + newChunkName("0badcafe", 0), name[:49] + "g",
		recordName(newChunkName("0badcafe", 10), 10), recordName(newChunkName("0badcafe", 10), 9),
		"ffffffffffffffff-0000000000000000-ffffffffffffffff",
	} {
		if _, ok := parseChunkRecord(bad); ok {
			t.Errorf("parse %q: accepted", bad)
		}
	}
}

// writerLog records the paths Writer is asked for; Unwrap lets driver.As
// find the optional interfaces of the driver it wraps.
type writerLog struct {
	driver.Driver
	mu    sync.Mutex
	paths []string
}

func (w *writerLog) Unwrap() driver.Driver { return w.Driver }

func (w *writerLog) Writer(ctx context.Context, p string, appending bool) (driver.FileWriter, error) {
	w.mu.Lock()
	w.paths = append(w.paths, p)
	w.mu.Unlock()
	return w.Driver.Writer(ctx, p, appending)
}

// TestUploadWhole: a blob sent whole with its digest is stored and linked,
// on a driver that stages writes without a chunk object; a wrong digest or
// a body cut short stores nothing and never harms the blob already stored
// under that digest.
func TestUploadWhole(t *testing.T) {
	drivertest.ForEach(t, func(t *testing.T, base driver.Driver) {
		ctx := context.Background()
		d := &writerLog{Driver: base}
		r := New(d, Options{})
		_, stages := driver.As[driver.Stager](base)
		blob := randomBytes(t, 300<<10)
		dg := digest.FromBytes(blob)

		id, _ := r.StartUpload(ctx, "a")
		if n, err := r.FinishUpload(ctx, "a", id, dg, bytes.NewReader(blob), -1); err != nil || n != int64(len(blob)) {
			t.Fatalf("FinishUpload = %d, %v", n, err)
		}
		wantBlob(t, r, dg, blob)
		if ok, err := r.exists(ctx, layout.LayerLink("a", dg)); !ok || err != nil {
			t.Fatalf("link after the upload: %v, %v", ok, err)
		}
		if stages && len(d.paths) != 0 {
			t.Errorf("a whole blob on a staging driver was written through %q, want straight to its path", d.paths)
		}
		if drivertest.Exists(t, d, layout.UploadDir("a", id)) {
			t.Error("session left after the upload")
		}

		// A re-push of the same digest cut short, or with other bytes,
		// leaves the stored blob as it is.
		id, _ = r.StartUpload(ctx, "b")
		if _, err := r.FinishUpload(ctx, "b", id, dg, &failAfter{blob[:100<<10]}, 0); !errors.Is(err, io.ErrUnexpectedEOF) {
			t.Fatalf("cut body: %v", err)
		}
		wantBlob(t, r, dg, blob)
		id, _ = r.StartUpload(ctx, "b")
		other := randomBytes(t, len(blob))
		if _, err := r.FinishUpload(ctx, "b", id, dg, bytes.NewReader(other), -1); !errors.Is(err, ErrDigestInvalid) {
			t.Fatalf("other bytes under the digest: %v, want ErrDigestInvalid", err)
		}
		wantBlob(t, r, dg, blob)
		if err := r.checkUpload(ctx, "b", id); !errors.Is(err, ErrUploadUnknown) {
			t.Fatalf("session after a wrong digest: %v", err)
		}
		// A new blob with a wrong digest is not stored at all.
		wrong := digest.FromBytes(other[1:])
		id, _ = r.StartUpload(ctx, "b")
		if _, err := r.FinishUpload(ctx, "b", id, wrong, bytes.NewReader(other), -1); !errors.Is(err, ErrDigestInvalid) {
			t.Fatalf("wrong digest: %v", err)
		}
		if drivertest.Exists(t, d, layout.BlobData(wrong)) {
			t.Error("a blob with a wrong digest was stored")
		}
		// The same digest pushed again whole replaces it with the same bytes.
		id, _ = r.StartUpload(ctx, "b")
		if _, err := r.FinishUpload(ctx, "b", id, dg, bytes.NewReader(blob), -1); err != nil {
			t.Fatal(err)
		}
		wantBlob(t, r, dg, blob)
	})
}
