package layer

import (
	"archive/tar"
	"bytes"
	"context"
	"fmt"
	"io"
	"math/rand/v2"
	"testing"

	"github.com/cairn-registry/cairn/internal/storage/driver/inmemory"
)

// benchTar is a layer-like tar: 2000 files of 1 KiB-256 KiB and one of
// 16 MiB, half-compressible content, about 270 MiB in all.
func benchTar(b *testing.B) []byte {
	rng := rand.New(rand.NewPCG(1, 2))
	src := rand.NewChaCha8([32]byte{7})
	body := func(n int) []byte {
		p := make([]byte, n)
		src.Read(p[:n/2]) // random half, zero half
		return p
	}
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	add := func(name string, p []byte) {
		if err := tw.WriteHeader(&tar.Header{Typeflag: tar.TypeReg, Name: name, Size: int64(len(p)), Mode: 0o644, ModTime: mtime, Format: tar.FormatPAX}); err != nil {
			b.Fatal(err)
		}
		tw.Write(p)
	}
	for i := range 2000 {
		add(fmt.Sprintf("usr/lib/pkg%d/file%d", i%50, i), body(1024+rng.IntN(256<<10)))
	}
	add("opt/big.bin", body(16<<20))
	tw.Close()
	return buf.Bytes()
}

func BenchmarkLayer(b *testing.B) {
	tb := benchTar(b)
	ctx := context.Background()
	stores := []struct {
		name string
		new  func() FileStore
	}{
		{"mem", func() FileStore { return newMemStore() }},
		{"driver-inmemory", func() FileStore {
			fs, err := NewDriverStore(inmemory.New())
			if err != nil {
				b.Fatal(err)
			}
			return fs
		}},
	}
	for _, s := range stores {
		b.Run("disassemble/"+s.name, func(b *testing.B) {
			b.SetBytes(int64(len(tb)))
			for b.Loop() {
				// A fresh store each time: every payload is new and stored.
				if _, err := Disassemble(ctx, bytes.NewReader(tb), s.new()); err != nil {
					b.Fatal(err)
				}
			}
		})
		b.Run("assemble/"+s.name, func(b *testing.B) {
			fs := s.new()
			r, err := Disassemble(ctx, bytes.NewReader(tb), fs)
			if err != nil {
				b.Fatal(err)
			}
			b.SetBytes(int64(len(tb)))
			for b.Loop() {
				if err := Assemble(ctx, io.Discard, r, fs); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(len(r.Meta)), "meta-bytes")
		})
	}
}
