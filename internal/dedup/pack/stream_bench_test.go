package pack

import (
	"bytes"
	"context"
	"io"
	"path/filepath"
	"testing"

	"github.com/opencontainers/go-digest"

	"github.com/cairn-registry/cairn/internal/meta/bolt"
	"github.com/cairn-registry/cairn/internal/storage/driver/inmemory"
	"github.com/cairn-registry/cairn/internal/testutil/layertest"
)

// BenchmarkStreamFrames reads files back as a restore of a layer that
// follows no parses does (Stream), stored as zstd frames or as parse
// frames: what storing every file as a parse costs the restores of zstd,
// pgzip and uncompressed layers.
func BenchmarkStreamFrames(b *testing.B) {
	var payloads [][]byte
	var total int64
	for _, f := range layertest.GoSources(b, 16<<20, 64<<10) {
		payloads = append(payloads, f.Body)
		total += int64(len(f.Body))
	}
	for _, bc := range []struct {
		name  string
		level int
	}{{"zstd", 0}, {"parse", ParseLevel}} {
		b.Run(bc.name, func(b *testing.B) {
			ctx := context.Background()
			m, err := bolt.Open(filepath.Join(b.TempDir(), "meta.db"))
			if err != nil {
				b.Fatal(err)
			}
			defer m.Close()
			s, err := NewStore(inmemory.New(), m, Options{}, nil)
			if err != nil {
				b.Fatal(err)
			}
			files := recipeOf(payloads)
			var ds []digest.Digest
			for _, f := range files {
				ds = append(ds, f.Digest)
			}
			if _, err := m.AddLayerRefs(ctx, digest.FromString("layer"), ds); err != nil {
				b.Fatal(err)
			}
			w := s.NewWriter(0)
			w.KeepParses(bc.level)
			for i, p := range payloads {
				if err := w.Put(ctx, files[i].Digest, int64(len(p)), bytes.NewReader(p)); err != nil {
					b.Fatal(err)
				}
			}
			if err := w.Flush(ctx); err != nil {
				b.Fatal(err)
			}
			b.SetBytes(total)
			b.ResetTimer()
			for b.Loop() {
				ps, err := s.Stream(ctx, files)
				if err != nil {
					b.Fatal(err)
				}
				for range files {
					rc, err := ps.Next()
					if err != nil {
						b.Fatal(err)
					}
					if _, err := io.Copy(io.Discard, rc); err != nil {
						b.Fatal(err)
					}
					rc.Close()
				}
				ps.Close()
			}
		})
	}
}
