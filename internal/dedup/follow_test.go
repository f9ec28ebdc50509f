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
// first one's stored parses too. Both keep their block headers. Without
// Options.Parses every file is a zstd frame and no header is kept.
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
		if !hasHeaders(r) {
			t.Errorf("layer %s: no block headers in the recipe", l.Encoded()[:12])
		}
		covered := r.Compression.CopiedBytes()
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
	if r, err := off.eng.recipe(t.Context(), l); err != nil || hasHeaders(r) {
		t.Errorf("without Options.Parses: block headers kept (%v)", err)
	}
	off.wantBlob(blobA)
}

// hasHeaders reports whether r keeps any block header.
func hasHeaders(r *Recipe) bool {
	for _, m := range r.Compression.Members {
		if len(m.Headers) > 0 {
			return true
		}
	}
	return false
}

// TestFollowsParsesOfOtherProducers: files a zstd, pgzip or BestSpeed
// layer stores first are stored as parses at pack.ParseLevel (they are
// stored once, and serve the level-6 layers that hold them later), and a
// later compress/gzip level-6 layer made of those files follows them: its
// recipe lists copies over most of its tar, and it restores byte-exact.
func TestFollowsParsesOfOtherProducers(t *testing.T) {
	var src []tfile
	for _, f := range layertest.GoSources(t, 2<<20, 96<<10) {
		src = append(src, tfile{f.Name, f.Body})
	}
	// Each producer stores a third of the files first.
	third := len(src) / 3
	firsts := map[string][]byte{
		"zstd":      zstdKlaus(t, buildTar(t, src[:third])),
		"pgzip":     layertest.PGzip(t, buildTar(t, src[third:2*third]), 5, 0),
		"BestSpeed": layertest.Gzip(t, buildTar(t, src[2*third:]), 1),
	}
	v := newEnv(t, nil, Options{Parses: true})
	for _, name := range []string{"zstd", "pgzip", "BestSpeed"} {
		l := v.put(firsts[name])
		v.process(l, ModeFull, outDeduplicated)
		v.eng.recipes.remove(l)
		v.wantBlob(firsts[name])
	}
	for _, f := range []tfile{src[0], src[third], src[len(src)-1]} {
		frame := v.frame(f.body)
		if !pack.IsParseFrame(frame) || frame[3] != pack.ParseLevel {
			t.Errorf("%s (%d bytes): stored as %q, want a parse at level %d", f.name, len(f.body), frame[:min(4, len(frame))], pack.ParseLevel)
		}
	}

	// The level-6 layer holds the same files in another order: none of
	// its files is written again, so every copy follows a parse another
	// producer's layer stored.
	files := slices.Clone(src)
	slices.Reverse(files)
	blob := gzipStd(t, buildTar(t, files))
	l := v.put(blob)
	v.process(l, ModeFull, outDeduplicated)
	r, err := v.eng.recipe(t.Context(), l)
	if err != nil {
		t.Fatal(err)
	}
	covered := r.Compression.CopiedBytes()
	t.Logf("level-6 layer: copies cover %d of %d tar bytes", covered, r.Tar.TarSize)
	if covered < r.Tar.TarSize/2 {
		t.Errorf("copies cover %d of %d tar bytes, want at least half", covered, r.Tar.TarSize)
	}
	v.eng.recipes.remove(l) // read again, as a cold node would
	v.wantBlob(blob)
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
