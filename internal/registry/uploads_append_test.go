package registry

import (
	"bytes"
	"context"
	"errors"
	"path"
	"testing"

	"github.com/opencontainers/go-digest"

	"github.com/cairn-registry/cairn/internal/layout"
	"github.com/cairn-registry/cairn/internal/storage/driver"
	"github.com/cairn-registry/cairn/internal/storage/driver/filesystem"
)

// chunkObjects returns the names of the chunk objects (not records) of a
// session.
func chunkObjects(t *testing.T, d driver.Driver, repo, id string) []string {
	t.Helper()
	names, err := d.List(context.Background(), layout.UploadChunksDir(repo, id))
	if err != nil {
		t.Fatal(err)
	}
	var objs []string
	for _, p := range names {
		if b := path.Base(p); len(b) == 33 {
			objs = append(objs, b)
		}
	}
	return objs
}

// TestUploadAppendsInPlace: on the filesystem the chunks of one client
// through one node grow one file, which the commit moves into place; a
// node that did not create that file (another node, or this one after a
// restart) writes its own, and the commit joins them.
func TestUploadAppendsInPlace(t *testing.T) {
	ctx := context.Background()
	d, err := filesystem.New(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	var parts [][]byte
	var all []byte
	// Each case pushes new bytes: a blob already stored is not written again.
	fresh := func() {
		parts = [][]byte{randomBytes(t, 3000), randomBytes(t, 1), randomBytes(t, 70000), randomBytes(t, 500)}
		all = bytes.Join(parts, nil)
	}

	t.Run("one node", func(t *testing.T) {
		fresh()
		r := New(d, Options{})
		id, _ := r.StartUpload(ctx, "a")
		off := int64(0)
		for _, p := range parts[:3] {
			if _, err := r.AppendUpload(ctx, "a", id, bytes.NewReader(p), off); err != nil {
				t.Fatal(err)
			}
			off += int64(len(p))
		}
		if objs := chunkObjects(t, d, "a", id); len(objs) != 1 {
			t.Fatalf("three chunks from one node wrote objects %v, want one", objs)
		}
		if _, err := r.FinishUpload(ctx, "a", id, digest.FromBytes(all), bytes.NewReader(parts[3]), off); err != nil {
			t.Fatal(err)
		}
		wantBlob(t, r, digest.FromBytes(all), all)
	})

	t.Run("resumed after a restart", func(t *testing.T) {
		fresh()
		before := New(d, Options{})
		id, _ := before.StartUpload(ctx, "b")
		before.AppendUpload(ctx, "b", id, bytes.NewReader(parts[0]), 0)
		before.AppendUpload(ctx, "b", id, bytes.NewReader(parts[1]), -1)
		after := New(d, Options{}) // the same store, a new process
		if _, err := after.AppendUpload(ctx, "b", id, bytes.NewReader(parts[2]), -1); err != nil {
			t.Fatal(err)
		}
		if objs := chunkObjects(t, d, "b", id); len(objs) != 2 {
			t.Fatalf("objects %v, want the first node's and the restarted one's", objs)
		}
		if _, err := after.FinishUpload(ctx, "b", id, digest.FromBytes(all), bytes.NewReader(parts[3]), -1); err != nil {
			t.Fatal(err)
		}
		wantBlob(t, after, digest.FromBytes(all), all)
	})

	t.Run("another node's single object is copied, not moved", func(t *testing.T) {
		fresh()
		n1, n2 := New(d, Options{}), New(d, Options{})
		id, _ := n1.StartUpload(ctx, "c")
		n1.AppendUpload(ctx, "c", id, bytes.NewReader(all), 0)
		// n1 starts the next chunk: its file is open for appending when
		// n2 commits the session.
		head, err := n1.readHead(ctx, "c", id)
		if err != nil {
			t.Fatal(err)
		}
		late, err := n1.chunkWriter(ctx, "c", id, head)
		if err != nil || !late.appended {
			t.Fatalf("n1's next chunk: %+v, %v; want an append to its object", late, err)
		}
		if _, err := n2.FinishUpload(ctx, "c", id, digest.FromBytes(all), nil, -1); err != nil {
			t.Fatal(err)
		}
		if _, err := late.w.Write(randomBytes(t, 4096)); err != nil {
			t.Fatal(err)
		}
		if err := late.w.Commit(ctx); err != nil {
			t.Fatal(err)
		}
		wantBlob(t, n2, digest.FromBytes(all), all)
	})

	t.Run("bytes written but never published", func(t *testing.T) {
		fresh()
		r := New(d, Options{})
		id, _ := r.StartUpload(ctx, "d")
		r.AppendUpload(ctx, "d", id, bytes.NewReader(parts[0]), 0)
		head, err := r.readHead(ctx, "d", id)
		if err != nil {
			t.Fatal(err)
		}
		// A chunk appended to the object whose record and head were never
		// written (the process died, or the head write failed).
		if _, err := r.writeChunk(ctx, "d", id, head, bytes.NewReader(randomBytes(t, 777)), -1); err != nil {
			t.Fatal(err)
		}
		// The client resumes at the Range it was last told.
		rest := bytes.Join(parts[1:], nil)
		if _, err := r.AppendUpload(ctx, "d", id, bytes.NewReader(rest), int64(len(parts[0]))); err != nil {
			t.Fatal(err)
		}
		if objs := chunkObjects(t, d, "d", id); len(objs) != 2 {
			t.Fatalf("objects %v: the chunk after unpublished bytes must start a new object", objs)
		}
		if _, err := r.FinishUpload(ctx, "d", id, digest.FromBytes(all), nil, -1); err != nil {
			t.Fatal(err)
		}
		wantBlob(t, r, digest.FromBytes(all), all)

		// The same with nothing after: the commit must not move the
		// object with the unpublished bytes in it.
		fresh()
		id, _ = r.StartUpload(ctx, "d")
		r.AppendUpload(ctx, "d", id, bytes.NewReader(all), 0)
		head, _ = r.readHead(ctx, "d", id)
		r.writeChunk(ctx, "d", id, head, bytes.NewReader(randomBytes(t, 99)), -1)
		if _, err := r.FinishUpload(ctx, "d", id, digest.FromBytes(all), nil, -1); err != nil {
			t.Fatal(err)
		}
		wantBlob(t, r, digest.FromBytes(all), all)
	})
}

// TestUploadUnsyncedAfterRestart: on the filesystem chunks join unsynced,
// under the machine's boot id. A commit after the machine restarted (a new
// epoch) cannot trust them: it verifies the bytes, stores them when they
// survived, and refuses (storing nothing) when they did not.
func TestUploadUnsyncedAfterRestart(t *testing.T) {
	ctx := context.Background()
	d, err := filesystem.New(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	if d.CacheEpoch() == "" {
		t.Skip("no boot id on this system: every chunk is synced")
	}
	push := func(r *Registry, repo string, data []byte) (string, string) {
		id, _ := r.StartUpload(ctx, repo)
		r.AppendUpload(ctx, repo, id, bytes.NewReader(data[:1000]), 0)
		r.AppendUpload(ctx, repo, id, bytes.NewReader(data[1000:]), -1)
		head, err := r.readHead(ctx, repo, id)
		if err != nil || head.Unsynced != r.epoch {
			t.Fatalf("head %+v, %v: want Unsynced %q", head, err, r.epoch)
		}
		return id, chunkObjects(t, d, repo, id)[0]
	}
	rebooted := func() *Registry {
		r := New(d, Options{})
		r.epoch = "another-boot"
		return r
	}

	data := randomBytes(t, 50000)
	id, _ := push(New(d, Options{}), "a", data)
	if _, err := rebooted().FinishUpload(ctx, "a", id, digest.FromBytes(data), nil, -1); err != nil {
		t.Fatalf("bytes that survived: %v", err)
	}
	wantBlob(t, New(d, Options{}), digest.FromBytes(data), data)

	// The crash lost the bytes: the file reads as zeros.
	data = randomBytes(t, 50000)
	id, obj := push(New(d, Options{}), "a", data)
	if err := d.PutContent(ctx, layout.UploadChunk("a", id, obj), make([]byte, len(data))); err != nil {
		t.Fatal(err)
	}
	r := rebooted()
	if _, err := r.FinishUpload(ctx, "a", id, digest.FromBytes(data), nil, -1); !errors.Is(err, ErrDigestInvalid) {
		t.Fatalf("commit of lost bytes: %v, want DIGEST_INVALID", err)
	}
	if ok, _ := r.exists(ctx, layout.BlobData(digest.FromBytes(data))); ok {
		t.Fatal("lost bytes were stored as the blob")
	}

	// Chunks under two epochs: verified even by the newest.
	data = randomBytes(t, 50000)
	first := New(d, Options{})
	id, _ = first.StartUpload(ctx, "a")
	first.AppendUpload(ctx, "a", id, bytes.NewReader(data[:1000]), 0)
	r = rebooted()
	r.AppendUpload(ctx, "a", id, bytes.NewReader(data[1000:]), -1)
	if head, _ := r.readHead(ctx, "a", id); head.Unsynced != epochMixed {
		t.Fatalf("head after chunks under two epochs: Unsynced %q", head.Unsynced)
	}
	if _, err := r.FinishUpload(ctx, "a", id, digest.FromBytes(data), nil, -1); err != nil {
		t.Fatal(err)
	}
	wantBlob(t, r, digest.FromBytes(data), data)
}
