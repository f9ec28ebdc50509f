package recompress

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"strings"
	"testing"
)

// allEncoders lists every encoder id FindRecipe can return.
func allEncoders() []string {
	var ids []string
	for _, l := range stdlibLevels {
		ids = append(ids, stdlibID(l))
	}
	for _, l := range klausLevels {
		ids = append(ids, klausID(l))
	}
	for _, b := range pgzipBlocks {
		for _, l := range klausLevels {
			ids = append(ids, pgzipID(l, b))
		}
	}
	return append(ids, zstdCandidates()...)
}

func encodeWith(t testing.TB, id string, plain []byte) []byte {
	t.Helper()
	var buf bytes.Buffer
	enc, err := newEncoder(id, &buf, 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := io.Copy(enc, bytes.NewReader(plain)); err != nil {
		t.Fatal(err)
	}
	if err := enc.Close(); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

// TestGoldenEncoderOutput pins each encoder's output for a fixed input. If a
// Go toolchain or klauspost/compress / pgzip bump changes any of them, this
// fails: recipes stored by the old build would no longer rebuild, so such a
// bump needs a migration (keep the old encoder or restore intact copies).
func TestGoldenEncoderOutput(t *testing.T) {
	plain := testInput(1 << 20)
	got := map[string]string{}
	for _, id := range allEncoders() {
		sum := sha256.Sum256(encodeWith(t, id, plain))
		got[id] = hex.EncodeToString(sum[:])
	}
	for id, h := range got {
		want, ok := goldenSHA256[id]
		if !ok {
			t.Errorf("encoder %s has no golden hash; add %q: %q", id, id, h)
			continue
		}
		if h != want {
			t.Errorf("encoder %s output changed: sha256 %s, golden %s", id, h, want)
		}
	}
	for id := range goldenSHA256 {
		if _, ok := got[id]; !ok {
			t.Errorf("golden encoder %s is no longer offered", id)
		}
	}
	if t.Failed() {
		for _, id := range allEncoders() {
			fmt.Printf("\t%q: %q,\n", id, got[id])
		}
	}
}

func BenchmarkFindRecipe(b *testing.B) {
	plain := testInput(8 << 20)
	for _, id := range []string{"stdlib-gzip/6", "klauspost-gzip/5", "pgzip/5/1MiB", "klauspost-zstd/2"} {
		blob := wrapGzip(b, id, encodeWith(b, id, plain), plain)
		rec, err := FindRecipe(context.Background(), bytes.NewReader(blob), int64(len(blob)), opener(plain))
		if err != nil {
			b.Fatalf("%s: %v", id, err)
		}
		b.Run("find/"+id, func(b *testing.B) {
			b.SetBytes(int64(len(plain)))
			for b.Loop() {
				if _, err := FindRecipe(context.Background(), bytes.NewReader(blob), int64(len(blob)), opener(plain)); err != nil {
					b.Fatal(err)
				}
			}
		})
		b.Run("rebuild/"+id, func(b *testing.B) {
			b.SetBytes(int64(len(plain)))
			for b.Loop() {
				if err := Rebuild(io.Discard, rec, bytes.NewReader(plain), 0); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// wrapGzip turns a raw deflate body into a gzip member with the header the
// encoder's producer would write.
func wrapGzip(t testing.TB, id string, body, plain []byte) []byte {
	t.Helper()
	if strings.HasPrefix(id, famZstd) {
		return body
	}
	hdr := []byte{0x1f, 0x8b, 8, 0, 0, 0, 0, 0, 0, 255}
	if strings.HasPrefix(id, famPgzip) {
		copy(hdr[4:8], pgzipMTime)
	}
	var tr [8]byte
	crc := crc32IEEE(plain)
	tr[0], tr[1], tr[2], tr[3] = byte(crc), byte(crc>>8), byte(crc>>16), byte(crc>>24)
	n := uint32(len(plain))
	tr[4], tr[5], tr[6], tr[7] = byte(n), byte(n>>8), byte(n>>16), byte(n>>24)
	return append(append(hdr, body...), tr[:]...)
}
