package layer

import (
	"archive/tar"
	"bytes"
	"context"
	"errors"
	"io"
	"strings"
	"testing"

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
