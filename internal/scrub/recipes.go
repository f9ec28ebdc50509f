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
)

// badFile is a dedup file found corrupt or missing, and what the recipes
// say of it: one finding per file, however many recipes name it.
type badFile struct {
	d       digest.Digest
	path    string
	corrupt string // why it is corrupt; "" when it is missing
	// namedBy counts the recipes naming it; unservable those of layers
	// without intact data, whose pulls fail while it is bad.
	namedBy, unservable int64
	example             digest.Digest // a blob whose recipe names it
	// source is a blob with intact data whose recipe names the file: where
	// repair takes it from; sourceTar bounds that layer's decompression.
	source    digest.Digest
	sourceTar int64
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
	p := startPool(s.opts.Workers, func(j recipeJob) { s.checkRecipe(ctx, j) })
	for _, e := range s.blobs {
		if e.flags&bRecipe == 0 {
			continue
		}
		s.nListed.Add(1)
		j := recipeJob{k: e.k, intact: e.flags&bData != 0, rebuild: s.opts.Recipes == RecipesAll || sample[e.k]}
		if p.send(ctx, j) != nil {
			break
		}
	}
	p.wait()
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
	intact := j.intact && !corrupt
	broken := false
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
		if s.fileBroken(ctx, fk, f.Digest, d, intact, r.Tar.TarSize) {
			broken = true
		}
	}
	// A recipe naming a bad file cannot rebuild: the file's finding says
	// so, a rebuild would only say it again.
	if !broken && j.rebuild {
		s.verifyRebuild(ctx, d, r.Size)
	}
}

// fileBroken reports whether file fd, which blob's recipe names, is corrupt
// or missing, and records the recipe against it.
func (s *scrubber) fileBroken(ctx context.Context, fk key, fd, blob digest.Digest, intact bool, tarSize int64) bool {
	s.mu.Lock()
	bf, appeared := s.bad[fk], s.appeared[fk]
	s.mu.Unlock()
	if bf == nil {
		if appeared || s.fileSet.has(fk) {
			return false
		}
		// Not listed: missing, or written since the listing by dedup.
		fp := layout.File(fd)
		missing, err := s.missingNow(ctx, fp)
		if err != nil {
			s.unreadable(ctx, fp, fd, err)
			return true
		}
		if missing {
			// A GC deletes a blob's recipe before its files: a recipe
			// gone since is no witness.
			if gone, err := s.missingNow(ctx, layout.BlobRecipe(blob)); err != nil || gone {
				return true
			}
		}
		s.mu.Lock()
		if !missing {
			s.appeared[fk] = true
			s.mu.Unlock()
			return false
		}
		if bf = s.bad[fk]; bf == nil {
			bf = &badFile{d: fd, path: fp}
			s.bad[fk] = bf
		}
		s.mu.Unlock()
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	bf.namedBy++
	if !intact {
		bf.unservable++
	}
	if bf.example == "" {
		bf.example = blob
	}
	if intact && bf.source == "" {
		bf.source, bf.sourceTar = blob, tarSize
	}
	return true
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
	rc, err := s.eng.OpenBlob(ctx, d, 0)
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
