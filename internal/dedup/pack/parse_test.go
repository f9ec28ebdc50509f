package pack

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"testing"

	"github.com/cairn-registry/cairn/internal/dedup/layer"
	"github.com/cairn-registry/cairn/internal/layout"
)

// TestParseFrames: with KeepParses, files of MinParseFile bytes and more
// are stored as parse frames (the large one streamed), the rest as zstd;
// Stream reads them all back; StreamParses hands out each parse frame's
// file as a *Parsed whose tokens inflate to exactly its bytes; a damaged
// parse frame reads as a corrupt file.
func TestParseFrames(t *testing.T) {
	e := newEnv(t, Options{})
	e.parseLevel = 6
	payloads := files(21, 30, 20_000)
	large := make([]byte, 0, 6<<20)
	r := rand.New(rand.NewPCG(22, 1))
	for len(large) < 6<<20 {
		large = fmt.Appendf(large, "%x\n", r.Uint64()%1000)
	}
	payloads = append(payloads, large)
	id, entries := e.onePack(payloads)
	ctx := context.Background()
	b, err := e.d.GetContent(ctx, layout.Pack(id))
	if err != nil {
		t.Fatal(err)
	}
	for _, en := range entries {
		if got, want := IsParseFrame(b[en.Offset:en.Offset+en.Length]), en.Size >= MinParseFile; got != want {
			t.Errorf("file of %d bytes: parse frame %v, want %v", en.Size, got, want)
		}
	}
	e.readAll(payloads)

	ps, err := e.store.StreamParses(ctx, recipeOf(payloads))
	if err != nil {
		t.Fatal(err)
	}
	for i, want := range payloads {
		rc, err := ps.Next()
		if err != nil {
			t.Fatalf("file %d: %v", i, err)
		}
		p, ok := rc.(*Parsed)
		if ok != (len(want) >= MinParseFile) {
			t.Fatalf("file %d (%d bytes): handed out as %T", i, len(want), rc)
		}
		if ok {
			var n int
			for _, tk := range p.Tokens {
				n += tk.Size()
			}
			if p.Level != 6 || n != len(want) {
				t.Errorf("file %d: level %d, tokens of %d bytes, want 6 and %d", i, p.Level, n, len(want))
			}
		}
		got, err := io.ReadAll(rc)
		rc.Close()
		if err != nil || string(got) != string(want) {
			t.Fatalf("file %d: %d bytes (%v), want %d", i, len(got), err, len(want))
		}
	}
	ps.Close()

	// A damaged parse frame: the small one whole, the large one streamed.
	for _, k := range []int{len(entries) - 1, firstParse(entries)} {
		en := entries[k]
		bad := append([]byte(nil), b...)
		bad[en.Offset+en.Length/2] ^= 0x21
		if err := e.d.PutContent(ctx, layout.Pack(id), bad); err != nil {
			t.Fatal(err)
		}
		rc, err := e.store.Open(ctx, en.Digest)
		var got []byte
		if err == nil {
			got, err = io.ReadAll(rc)
			rc.Close()
		}
		if err == nil {
			// The bits may still inflate, to other bytes, which Assemble
			// catches by the digest.
			if string(got) == string(payloads[k]) {
				t.Errorf("damaged parse frame of %d bytes reads as the file", en.Size)
			}
			continue
		}
		if !errors.Is(err, layer.ErrCorruptFile) {
			t.Errorf("damaged parse frame of %d bytes: %v, want ErrCorruptFile", en.Size, err)
		}
	}
}

func firstParse(entries []Entry) int {
	for i, en := range entries {
		if en.Size >= MinParseFile && en.Size <= smallFile {
			return i
		}
	}
	return 0
}
