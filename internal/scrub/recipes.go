package scrub

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"

	"github.com/opencontainers/go-digest"

	"github.com/cairn-registry/cairn/internal/dedup"
	"github.com/cairn-registry/cairn/internal/dedup/layer"
	"github.com/cairn-registry/cairn/internal/layout"
	"github.com/cairn-registry/cairn/internal/meta"
	"github.com/cairn-registry/cairn/internal/parallel"
)

// badFile is a dedup file found corrupt or missing, and what the recipes
// say of it: one finding per file, however many recipes name it.
type badFile struct {
	d digest.Digest
	// path is the object at fault, or where the file should be: its
	// pack (at offset) when it has a location, else its own object.
	path   string
	offset int64
	// loc is where the file is read from, when in a pack (zero: an object
	// of its own, or not known without a metadata store).
	loc     meta.Location
	corrupt string // why it is corrupt; "" when it is missing
	missing string // why it counts as missing ("not stored", ...)
	// namedBy counts the recipes naming it; unservable those of layers
	// without intact data, whose pulls fail while it is bad.
	namedBy, unservable int64
	example             digest.Digest // a blob whose recipe names it
	// source is a blob with intact data whose recipe names the file: where
	// repair takes it from; sourceTar bounds that layer's decompression.
	source    digest.Digest
	sourceTar int64
	toPack    bool // repair writes it into a new pack
	repaired  bool
	repair    string
}

type recipeJob struct {
	k       key
	intact  bool // the blob's data is stored (and was not found corrupt)
	rebuild bool
}

// checkRecipes reads every recipe the blob listing found, looks up the files
// it names, and rebuilds the chosen ones.
func (s *scrubber) checkRecipes(ctx context.Context) error {
	sample := s.pickSample()
	p := parallel.StartPool(s.opts.Workers, func(j recipeJob) { s.checkRecipe(ctx, j) })
	for _, e := range s.blobs {
		if e.flags&bRecipe == 0 {
			continue
		}
		s.nListed.Add(1)
		j := recipeJob{k: e.k, intact: e.flags&bData != 0, rebuild: s.opts.Recipes == RecipesAll || sample[e.k]}
		if p.Send(ctx, j) != nil {
			break
		}
	}
	p.Wait()
	return ctx.Err()
}

// pickSample chooses Options.Sample recipes uniformly (reservoir sampling
// over the sorted blob set), the same ones for the same seed and store.
func (s *scrubber) pickSample() map[key]bool {
	if s.opts.Recipes != RecipesSample {
		return nil
	}
	rng := rand.New(rand.NewPCG(s.opts.Seed, 0x5c0b5c0b))
	n := s.opts.Sample
	res := make([]key, 0, n)
	seen := 0
	for _, e := range s.blobs {
		if e.flags&bRecipe == 0 {
			continue
		}
		seen++
		if len(res) < n {
			res = append(res, e.k)
		} else if j := rng.IntN(seen); j < n {
			res[j] = e.k
		}
	}
	m := make(map[key]bool, len(res))
	for _, k := range res {
		m[k] = true
	}
	return m
}

func (s *scrubber) checkRecipe(ctx context.Context, j recipeJob) {
	if ctx.Err() != nil {
		return
	}
	d := s.keys.Digest(j.k)
	p := layout.BlobRecipe(d)
	b, ok := s.readListed(ctx, p, d)
	if !ok {
		return
	}
	s.nRecipes.Add(1)
	r, err := dedup.DecodeRecipe(d, b)
	if err != nil {
		s.add(Finding{Kind: KindBadRecipe, Path: p, Digest: string(d), Detail: oneLine(err.Error())})
		return
	}
	s.mu.Lock()
	_, corrupt := s.corrupt[j.k]
	s.mu.Unlock()
	named := recipeUse{blob: d, intact: j.intact && !corrupt, tarSize: r.Tar.TarSize}
	broken, packed := false, false
	var unknown []fileRef
	seen := make(map[digest.Digest]bool, len(r.Tar.Files))
	for _, f := range r.Tar.Files {
		if seen[f.Digest] {
			continue
		}
		seen[f.Digest] = true
		fk, ok := s.keys.Of(f.Digest)
		if !ok || !f.Digest.Algorithm().Available() {
			s.add(Finding{Kind: KindBadRecipe, Path: p, Digest: string(d), Detail: fmt.Sprintf("names a file by %q, not a digest", f.Digest)})
			return
		}
		switch s.fileState(fk) {
		case fileBad:
			s.noteBad(fk, nil, named)
			broken = true
		case fileUnknown:
			unknown = append(unknown, fileRef{fk, f.Digest})
		}
		if !s.objectSet.has(fk) {
			packed = true
		}
	}
	if len(unknown) > 0 && s.resolveFiles(ctx, unknown, named) {
		broken = true
	}
	if packed && s.meta == nil && corrupt {
		s.mu.Lock()
		s.needMeta[j.k] = true // for repair: it cannot rebuild the blob
		s.mu.Unlock()
	}
	switch {
	case broken || !j.rebuild:
		// A recipe naming a bad file cannot rebuild: the file's finding
		// says so, a rebuild would only say it again.
	case packed && s.meta == nil:
		s.nRebuildSkipped.Add(1) // said once, in the report's notes
	default:
		s.verifyRebuild(ctx, d, r.Size)
	}
}

// verifyRebuild rebuilds blob d from its recipe through dedup's restore,
// as a pull would, and checks the result.
func (s *scrubber) verifyRebuild(ctx context.Context, d digest.Digest, size int64) {
	var got digest.Digest
	var n int64
	var err error
	for range 2 {
		got, n, err = s.rebuildDigest(ctx, d, io.Discard, &s.nRebuiltB)
		// One more try after an error that may be storage's.
		if err == nil || ctx.Err() != nil || errors.Is(err, dedup.ErrRebuildMismatch) || errors.Is(err, layer.ErrMismatch) {
			break
		}
	}
	if ctx.Err() != nil {
		return
	}
	s.nRebuilt.Add(1)
	if err == nil && got == d && n == size {
		return
	}
	p := layout.BlobRecipe(d)
	if gone, _ := s.missingNow(ctx, p); gone {
		s.nVanished.Add(1) // deleted by a GC meanwhile
		return
	}
	detail := fmt.Sprintf("rebuilt %d bytes hashing to %s, want %d bytes", n, got, size)
	if err != nil {
		detail = "rebuild failed: " + oneLine(err.Error())
	}
	s.add(Finding{Kind: KindRebuildFailed, Path: p, Digest: string(d), Detail: detail})
}

// rebuildDigest streams the rebuild of blob d into w and a hash.
func (s *scrubber) rebuildDigest(ctx context.Context, d digest.Digest, w io.Writer, progress interface{ Add(int64) int64 }) (digest.Digest, int64, error) {
	rc, err := s.src.OpenBlob(ctx, d, 0)
	if err != nil {
		return "", 0, err
	}
	defer rc.Close()
	h := d.Algorithm().Hash()
	bp := s.bufs.Get().(*[]byte)
	defer s.bufs.Put(bp)
	n, err := io.CopyBuffer(io.MultiWriter(h, w), &progressReader{r: rc, n: progress}, *bp)
	return digest.NewDigest(d.Algorithm(), h), n, err
}
