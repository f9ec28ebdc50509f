package dedup

import (
	"context"
	"slices"
	"testing"

	"github.com/opencontainers/go-digest"

	"github.com/cairn-registry/cairn/internal/dedup/pack"
	"github.com/cairn-registry/cairn/internal/layout"
	"github.com/cairn-registry/cairn/internal/testutil/layertest"
)

// TestRebuildFollowsParses: the files of a compress/gzip level-6 layer are
// stored as their parses (those of MinParseFile bytes and more), the
// recipe lists the copies its verifying rebuild found, covering most of
// the tar, and the layer restores byte-exact; a second layer holding most
// of the same files in another order, beside files of its own, follows the
// first one's stored parses too. A zstd layer's files stay zstd frames,
// and so do every layer's without Options.Parses.
func TestRebuildFollowsParses(t *testing.T) {
	var src []tfile
	for _, f := range layertest.GoSources(t, 3<<20, 96<<10) {
		src = append(src, tfile{f.Name, f.Body})
	}
	small := tfile{"etc/small.conf", fileBody(2, 3000)}
	filesA := append(slices.Clone(src), small)
	filesB := append([]tfile{{"app/own.txt", fileBody(8, 200_000)}}, src[1:]...)
	slices.Reverse(filesB)
	blobA := gzipStd(t, buildTar(t, filesA))
	blobB := gzipStd(t, buildTar(t, filesB))

	v := newEnv(t, nil, Options{Parses: true})
	for _, blob := range [][]byte{blobA, blobB} {
		l := v.put(blob)
		v.process(l, ModeFull, outDeduplicated)
		r, err := v.eng.recipe(t.Context(), l)
		if err != nil {
			t.Fatal(err)
		}
		var covered int64
		for _, m := range r.Compression.Members {
			for _, c := range m.Copies {
				covered += c.Size
			}
		}
		t.Logf("layer %s: copies cover %d of %d tar bytes", l.Encoded()[:12], covered, r.Tar.TarSize)
		if covered < r.Tar.TarSize/2 {
			t.Errorf("layer %s: copies cover %d of %d tar bytes, want at least half", l.Encoded()[:12], covered, r.Tar.TarSize)
		}
		v.eng.recipes.remove(l) // read again, as a cold node would
		v.wantBlob(blob)
	}

	// The stored forms: parses for the files large enough, zstd else.
	for _, f := range []tfile{src[0], small} {
		if got, want := pack.IsParseFrame(v.frame(f.body)), len(f.body) >= pack.MinParseFile; got != want {
			t.Errorf("%s (%d bytes): stored as a parse %v, want %v", f.name, len(f.body), got, want)
		}
	}
	off := newEnv(t, nil, Options{})
	l := off.put(blobA)
	off.process(l, ModeFull, outDeduplicated)
	if pack.IsParseFrame(off.frame(src[0].body)) {
		t.Error("without Options.Parses a file is stored as a parse")
	}
	off.wantBlob(blobA)

	z := fileBody(12, 50_000)
	zl := v.put(zstdKlaus(t, buildTar(t, []tfile{{"opt/z.bin", z}})))
	v.process(zl, ModeFull, outDeduplicated)
	if pack.IsParseFrame(v.frame(z)) {
		t.Error("a zstd layer's file is stored as a parse")
	}
}

// frame returns the stored bytes of the file with body.
func (v *env) frame(body []byte) []byte {
	v.t.Helper()
	infos, err := v.store.Files(context.Background(), []digest.Digest{digest.FromBytes(body)})
	if err != nil {
		v.t.Fatal(err)
	}
	loc := infos[0].Location
	if loc.IsZero() {
		v.t.Fatal("file not located")
	}
	b, err := v.d.GetContent(context.Background(), layout.Pack(loc.Pack))
	if err != nil {
		v.t.Fatal(err)
	}
	return b[loc.Offset : loc.Offset+loc.Length]
}
