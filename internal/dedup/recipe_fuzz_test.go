package dedup

import (
	"bytes"
	stdgzip "compress/gzip"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"
	"sync"
	"testing"

	"github.com/klauspost/compress/zstd"
	"github.com/opencontainers/go-digest"

	"github.com/cairn-registry/cairn/internal/dedup/layer"
	"github.com/cairn-registry/cairn/internal/dedup/recompress"
	"github.com/cairn-registry/cairn/internal/storage/driver/inmemory"
	"github.com/cairn-registry/cairn/internal/testutil/layertest"
)

// maxFuzzRebuild bounds what one fuzzed rebuild may write; the recipes the
// seeds come from rebuild blobs of a few KiB.
const maxFuzzRebuild = 16 << 20

// FuzzDecodeRecipe reads arbitrary bytes as the recipe file of a blob, as a
// restore does from storage that may be damaged or written by another
// version. decodeRecipe must never panic; a recipe it accepts describes the
// blob asked for and survives encoding (decode(encode(r)) == r); and
// rebuilding from it (tar assembly from the file store into the
// recompressor) must fail cleanly or write a bounded number of bytes,
// never panic or hang: a restore runs in the serving process. The seeds
// are real recipes, of plain, gzip (stdlib, klauspost, pgzip) and zstd
// layers; each must rebuild its blob exactly.
//
//cairn:fuzztime 30s
func FuzzDecodeRecipe(f *testing.F) {
	ctx := context.Background()
	fs, err := layer.NewDriverStore(inmemory.New())
	if err != nil {
		f.Fatal(err)
	}
	files := append(sharedFiles()[:2], tfile{"etc/empty", nil}, tfile{"etc/hosts", []byte("127.0.0.1 localhost\n")})
	raw := buildTar(f, files)
	// Read-only once fuzzing starts.
	blobs := map[digest.Digest][]byte{}
	seeds := map[string]bool{}
	for _, blob := range [][]byte{
		raw,
		layertest.Gzip(f, raw, stdgzip.DefaultCompression),
		layertest.Gzip(f, raw, stdgzip.BestSpeed),
		layertest.KlausGzip(f, raw, 9),
		layertest.PGzip(f, raw, 5, 1<<20),
		layertest.Zstd(f, raw, zstd.SpeedDefault),
	} {
		rec := makeRecipe(f, fs, blob, raw)
		b, err := json.Marshal(rec)
		if err != nil {
			f.Fatal(err)
		}
		blobs[rec.Digest] = blob
		seeds[string(b)] = true
		f.Add(b)
		if len(rec.Compression.Members) > 0 && strings.HasPrefix(rec.Compression.Members[0].Encoder, "pgzip/") {
			// A damaged block size once made pgzip exhaust memory.
			rec.Compression.Members[0].Encoder = "pgzip/5/65536MiB"
			if b, err = json.Marshal(rec); err != nil {
				f.Fatal(err)
			}
			f.Add(b)
		}
	}
	f.Add([]byte(`{"version":1,"digest":"sha256:x","size":0,"compression":{"format":"none","size":0},"tar":{}}`))
	f.Add([]byte(`{}`))

	f.Fuzz(func(t *testing.T, b []byte) {
		// The digest a restore asks for comes from a validated path; take
		// the recipe's own so that the fuzzer reaches past the check.
		var probe struct {
			Digest digest.Digest `json:"digest"`
		}
		_ = json.Unmarshal(b, &probe)
		want := probe.Digest
		if want.Validate() != nil {
			want = digest.FromString("some other blob")
		}
		r, err := decodeRecipe(want, b)
		if err != nil {
			if r != nil {
				t.Fatalf("decodeRecipe failed (%v) yet returned a recipe", err)
			}
			return
		}
		if r.Version != recipeVersion || r.Digest != want || r.Size != r.Compression.Size {
			t.Fatalf("decodeRecipe accepted version %d of %s (%d bytes) for %s", r.Version, r.Digest, r.Size, want)
		}
		enc, err := json.Marshal(r)
		if err != nil {
			t.Fatalf("an accepted recipe does not encode: %v", err)
		}
		r2, err := decodeRecipe(want, enc)
		if err != nil {
			t.Fatalf("an encoded recipe does not decode: %v\n%s", err, enc)
		}
		if enc2, _ := json.Marshal(r2); !bytes.Equal(enc, enc2) {
			t.Fatalf("recipe changes through encode/decode:\n%s\n%s", enc, enc2)
		}

		var out bytes.Buffer
		err = rebuildForFuzz(ctx, r, fs, &limitWriter{w: &out, n: maxFuzzRebuild})
		if errors.Is(err, errRebuildTooLarge) {
			t.Fatalf("rebuild wrote over %d bytes from a %d-byte recipe", maxFuzzRebuild, len(b))
		}
		if blob, ok := blobs[r.Digest]; ok && err == nil && !bytes.Equal(out.Bytes(), blob) {
			t.Fatalf("rebuild of %s succeeded with other bytes", r.Digest)
		}
		if seeds[string(b)] && err != nil {
			t.Fatalf("a real recipe does not rebuild: %v", err)
		}
	})
}

// makeRecipe builds blob's recipe as processing does (disassemble the tar
// into fs, find the compression recipe) and checks that it rebuilds blob.
func makeRecipe(t testing.TB, fs layer.FileStore, blob, raw []byte) *Recipe {
	ctx := context.Background()
	tr, err := layer.Disassemble(ctx, bytes.NewReader(raw), fs)
	if err != nil {
		t.Fatal(err)
	}
	comp, err := recompress.FindRecipe(ctx, bytes.NewReader(blob), int64(len(blob)), func() io.Reader { return bytes.NewReader(raw) })
	if err != nil {
		t.Fatal(err)
	}
	rec := &Recipe{Version: recipeVersion, Digest: digest.FromBytes(blob), Size: int64(len(blob)), Compression: comp, Tar: *tr}
	var out bytes.Buffer
	if err := rebuildForFuzz(ctx, rec, fs, &out); err != nil || !bytes.Equal(out.Bytes(), blob) {
		t.Fatalf("seed recipe does not rebuild its blob: %v", err)
	}
	return rec
}

// rebuildForFuzz is the restore path's use of a recipe (Engine.rebuild):
// layer.Assemble into a pipe, recompress.Rebuild from it, the digest
// checked at the end. It is spelled out here rather than called so that the
// target does not depend on the engine's wiring, only on the two packages
// that interpret recipe contents.
func rebuildForFuzz(ctx context.Context, r *Recipe, fs layer.FileStore, w io.Writer) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	pr, pw := io.Pipe()
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		pw.CloseWithError(layer.Assemble(ctx, pw, &r.Tar, fs))
	}()
	v := digest.SHA256.Digester()
	n := &countWriter{}
	err := recompress.Rebuild(io.MultiWriter(w, v.Hash(), n), r.Compression, pr, 0)
	pr.CloseWithError(errors.New("rebuild ended"))
	cancel()
	wg.Wait()
	if err != nil {
		return err
	}
	if n.n != r.Size || v.Digest() != r.Digest {
		return fmt.Errorf("rebuilt %d bytes %s, recipe says %d bytes %s", n.n, v.Digest(), r.Size, r.Digest)
	}
	return nil
}

type countWriter struct{ n int64 }

func (c *countWriter) Write(p []byte) (int, error) { c.n += int64(len(p)); return len(p), nil }

var errRebuildTooLarge = errors.New("rebuild output over the fuzz bound")

type limitWriter struct {
	w io.Writer
	n int64
}

func (l *limitWriter) Write(p []byte) (int, error) {
	if int64(len(p)) > l.n {
		return 0, errRebuildTooLarge
	}
	l.n -= int64(len(p))
	return l.w.Write(p)
}
