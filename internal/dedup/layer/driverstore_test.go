package layer

import (
	"archive/tar"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"sync/atomic"
	"testing"
	"testing/iotest"

	"github.com/opencontainers/go-digest"

	"github.com/cairn-registry/cairn/internal/layout"
	"github.com/cairn-registry/cairn/internal/storage/driver"
	"github.com/cairn-registry/cairn/internal/storage/driver/inmemory"
)

func TestDriverStore(t *testing.T) {
	ctx := context.Background()
	d := inmemory.New()
	fs, err := NewDriverStore(d)
	if err != nil {
		t.Fatal(err)
	}
	small := "small payload"
	large := strings.Repeat("large payload, streamed through a writer ", 200000) // > putContentMax
	tb := buildTar(t, tar.FormatPAX, []member{reg("s", small), reg("l", large), reg("dup", small), reg("e", "")}, nil)
	r := roundTrip(t, tb, fs)
	if len(r.Files) != 3 {
		t.Fatalf("recipe lists %d payloads, want 3", len(r.Files))
	}

	for _, body := range []string{small, large} {
		dg := digest.FromString(body)
		p, err := FilePath(dg)
		if err != nil {
			t.Fatal(err)
		}
		if want := layout.FilesDir + "/sha256/" + dg.Encoded()[:2] + "/" + dg.Encoded(); p != want {
			t.Fatalf("FilePath = %s, want %s", p, want)
		}
		stored, err := d.GetContent(ctx, p)
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.HasPrefix(stored, []byte{0x28, 0xb5, 0x2f, 0xfd}) {
			t.Errorf("%s is not zstd", p)
		}
		if len(body) > 1<<20 && len(stored) > len(body)/10 {
			t.Errorf("%s: %d compressed bytes for a %d-byte repetitive payload", p, len(stored), len(body))
		}
	}
	t.Run("never overwrites", func(t *testing.T) {
		dg := digest.FromString(small)
		p, _ := FilePath(dg)
		before, _ := d.GetContent(ctx, p)
		if err := fs.Put(ctx, dg, 5, strings.NewReader("other")); err != nil {
			t.Fatal(err)
		}
		after, _ := d.GetContent(ctx, p)
		if !bytes.Equal(before, after) {
			t.Fatal("Put replaced an existing payload")
		}
	})
	t.Run("short input is not stored", func(t *testing.T) {
		for _, size := range []int64{100, putContentMax + 100} {
			dg := digest.FromString("never stored " + string(rune('a'+size%26)))
			if err := fs.Put(ctx, dg, size, strings.NewReader("too short")); err == nil {
				t.Fatalf("Put of %d bytes from a 9-byte reader succeeded", size)
			}
			if has, err := fs.Has(ctx, dg); err != nil || has {
				t.Fatalf("after failed Put: Has = %v, %v", has, err)
			}
		}
	})
	t.Run("no temp files left", func(t *testing.T) {
		err := d.Walk(ctx, layout.TmpDir, func(fi driver.FileInfo) error {
			if !fi.IsDir {
				t.Errorf("temp file left behind: %s", fi.Path)
			}
			return nil
		})
		if err != nil && !errors.Is(err, driver.ErrNotFound) {
			t.Fatal(err)
		}
	})
	t.Run("missing and invalid digests", func(t *testing.T) {
		if _, err := fs.Open(ctx, digest.FromString("absent")); !errors.Is(err, driver.ErrNotFound) {
			t.Fatalf("Open of absent payload = %v, want ErrNotFound", err)
		}
		if _, err := fs.Has(ctx, digest.Digest("sha256:../../etc")); err == nil {
			t.Fatal("Has accepted an invalid digest")
		}
	})
	t.Run("open reads back", func(t *testing.T) {
		rc, err := fs.Open(ctx, digest.FromString(large))
		if err != nil {
			t.Fatal(err)
		}
		got, err := io.ReadAll(rc)
		rc.Close()
		if err != nil || string(got) != large {
			t.Fatalf("read back %d bytes (%v), want %d", len(got), err, len(large))
		}
	})
}

// TestDriverStoreCorrupt: stored bytes that do not decode are a corrupt
// file, named by its digest; the driver's own read failure is not.
func TestDriverStoreCorrupt(t *testing.T) {
	ctx := context.Background()
	small := "small payload"
	large := strings.Repeat("large payload, streamed through a writer ", 200000)
	tb := buildTar(t, tar.FormatPAX, []member{reg("s", small), reg("l", large)}, nil)
	damages := []struct {
		name   string
		damage func([]byte) []byte
	}{
		{"byte flipped in the middle", func(b []byte) []byte { b[len(b)/2] ^= 0x40; return b }},
		{"magic flipped", func(b []byte) []byte { b[0] ^= 0x01; return b }},
		{"truncated", func(b []byte) []byte { return b[:len(b)/2] }},
		{"empty", func(b []byte) []byte { return nil }},
	}
	for _, body := range []string{small, large} {
		for _, dm := range damages {
			t.Run(fmt.Sprintf("%d bytes/%s", len(body), dm.name), func(t *testing.T) {
				d := inmemory.New()
				fs, err := NewDriverStore(d)
				if err != nil {
					t.Fatal(err)
				}
				r := roundTrip(t, tb, fs)
				dg := digest.FromString(body)
				p, _ := FilePath(dg)
				stored, err := d.GetContent(ctx, p)
				if err != nil {
					t.Fatal(err)
				}
				if err := d.PutContent(ctx, p, dm.damage(bytes.Clone(stored))); err != nil {
					t.Fatal(err)
				}
				wantFileError(t, Verify(ctx, r, fs), dg, ErrCorruptFile)
			})
		}
	}
	t.Run("driver read error", func(t *testing.T) {
		d := &failingReads{Driver: inmemory.New(), err: errors.New("connection reset")}
		fs, err := NewDriverStore(d)
		if err != nil {
			t.Fatal(err)
		}
		r := roundTrip(t, tb, fs)
		d.fail.Store(true)
		err = Verify(ctx, r, fs)
		wantFileError(t, err, digest.FromString(small), d.err)
		if errors.Is(err, ErrCorruptFile) {
			t.Fatalf("a failed read is reported as a corrupt file: %v", err)
		}
	})
}

// failingReads is a driver whose readers fail after a few bytes once fail
// is set.
type failingReads struct {
	driver.Driver
	err  error
	fail atomic.Bool
}

func (d *failingReads) Reader(ctx context.Context, path string, offset int64) (io.ReadCloser, error) {
	rc, err := d.Driver.Reader(ctx, path, offset)
	if err != nil || !d.fail.Load() {
		return rc, err
	}
	return struct {
		io.Reader
		io.Closer
	}{io.MultiReader(io.LimitReader(rc, 6), iotest.ErrReader(d.err)), rc}, nil
}
