package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"slices"

	"github.com/opencontainers/go-digest"
	"github.com/vbatts/tar-split/tar/storage"

	"github.com/cairn-registry/cairn/internal/bench/dataset"
	"github.com/cairn-registry/cairn/internal/dedup"
	"github.com/cairn-registry/cairn/internal/meta"
)

// Issue 27 asks to evaluate never rebuilding what is not shared: keeping,
// for the stretches of a layer whose files no other layer holds, the
// original compressed segment (between two restart points, or the whole
// member) in place of those files' frames. A restore would copy such a
// segment instead of rebuilding it. This file measures what that would
// give on the stores `cairn-lab follow` builds, per rule for choosing the
// segments kept:
//   - alone: every file byte in the segment is in files no other layer of
//     the dataset holds (the files stay stored once: in the segment);
//   - new: every file byte is in files no earlier layer holds, which is all
//     a worker can know when it runs; a later layer holding one of them
//     stores it again.
type unsharedRule struct {
	Name     string `json:"name"`
	Producer string `json:"producer"` // "all": every layer`
	// Kept* are the segments the rule keeps: their compressed bytes, the
	// tar input they cover, and how many.
	KeptBlob int64 `json:"keptBlobBytes"`
	KeptTar  int64 `json:"keptTarBytes"`
	Segments int   `json:"segments"`
	// Frames are the stored bytes of the files only kept segments hold,
	// which a kept segment replaces.
	Frames int64 `json:"frameBytes"`
	// Twice are the stored bytes of files a kept segment holds and a later
	// layer stores again (rule new only).
	Twice int64 `json:"twiceBytes"`
}

// unsharedFigures are the rules' results over a setting's deduplicated
// layers.
type unsharedFigures struct {
	Blob  int64           `json:"blobBytes"` // deduplicated layers' blobs
	Tar   int64           `json:"tarBytes"`
	Rules []*unsharedRule `json:"rules"`
}

// tarFile is one payload of a layer's tar: where it lies and what it is.
type tarFile struct {
	digest   digest.Digest
	off, end int64
}

// segment is a stretch of a layer between two restart points (or a whole
// member): its tar input and an estimate of its compressed bytes.
type segment struct {
	in, end int64
	blob    int64
}

// unsharedLayer is what the evaluation keeps of one recipe.
type unsharedLayer struct {
	producer string
	files    []tarFile
	segs     []segment
}

// measureUnshared evaluates keeping unshared segments over the recipes of
// the dataset's deduplicated layers, taken in the dataset's order (the
// order they were pushed in), with the stored frame sizes from files.
func measureUnshared(ctx context.Context, ds *dataset.Dataset, recipes map[digest.Digest]*dedup.Recipe, files interface {
	Files(ctx context.Context, digests []digest.Digest) ([]meta.FileInfo, error)
}) (unsharedFigures, error) {
	var fig unsharedFigures
	var layers []unsharedLayer
	holders := map[digest.Digest]int{} // layers holding a file
	first := map[digest.Digest]int{}   // the first layer holding it
	for _, l := range ds.Layers {
		r := recipes[l.Digest]
		if r == nil {
			continue
		}
		ul, err := unsharedLayerOf(r, l.Size)
		if err != nil {
			return fig, fmt.Errorf("layer %s: %w", l.Digest, err)
		}
		ul.producer = producerName(l.Compression)
		seen := map[digest.Digest]bool{}
		for _, f := range ul.files {
			if seen[f.digest] {
				continue
			}
			seen[f.digest] = true
			if holders[f.digest] == 0 {
				first[f.digest] = len(layers)
			}
			holders[f.digest]++
		}
		layers = append(layers, ul)
		fig.Blob += l.Size
		fig.Tar += r.Tar.TarSize
	}
	stored, err := frameSizes(ctx, files, holders)
	if err != nil {
		return fig, err
	}
	rules := []struct {
		name string
		// fileKept says whether the rule lets layer i keep a segment
		// holding file d.
		fileKept func(i int, d digest.Digest) bool
	}{
		{"alone", func(i int, d digest.Digest) bool { return holders[d] == 1 }},
		{"new", func(i int, d digest.Digest) bool { return first[d] == i }},
	}
	producers := []string{"all"}
	for _, ul := range layers {
		if !slices.Contains(producers, ul.producer) {
			producers = append(producers, ul.producer)
		}
	}
	for _, rule := range rules {
		for _, p := range producers {
			fig.Rules = append(fig.Rules, keepUnshared(layers, rule.name, p, rule.fileKept, holders, stored))
		}
	}
	return fig, nil
}

// keepUnshared applies one rule to the layers of producer p (or all).
func keepUnshared(layers []unsharedLayer, name, p string, fileKept func(i int, d digest.Digest) bool, holders map[digest.Digest]int, stored map[digest.Digest]int64) *unsharedRule {
	ur := &unsharedRule{Name: name, Producer: p}
	outside := map[digest.Digest]bool{} // some copy lies outside a kept segment
	inKept := map[digest.Digest]bool{}
	for i, ul := range layers {
		if p != "all" && ul.producer != p {
			for _, f := range ul.files {
				outside[f.digest] = true
			}
			continue
		}
		{
			k := 0
			for _, s := range ul.segs {
				for k < len(ul.files) && ul.files[k].end <= s.in {
					k++
				}
				keep := true
				var inside []digest.Digest
				for j := k; j < len(ul.files) && ul.files[j].off < s.end; j++ {
					f := ul.files[j]
					inside = append(inside, f.digest)
					if !fileKept(i, f.digest) {
						keep = false
					}
				}
				for _, d := range inside {
					if keep {
						inKept[d] = true
					} else {
						outside[d] = true
					}
				}
				if keep {
					ur.KeptBlob += s.blob
					ur.KeptTar += s.end - s.in
					ur.Segments++
				}
			}
		}
	}
	for d := range inKept {
		switch {
		case !outside[d]:
			ur.Frames += stored[d]
		case holders[d] > 1:
			ur.Twice += stored[d]
		}
	}
	return ur
}

// frameSizes returns the stored bytes of each file in ds.
func frameSizes(ctx context.Context, files interface {
	Files(ctx context.Context, digests []digest.Digest) ([]meta.FileInfo, error)
}, ds map[digest.Digest]int) (map[digest.Digest]int64, error) {
	all := make([]digest.Digest, 0, len(ds))
	for d := range ds {
		all = append(all, d)
	}
	out := make(map[digest.Digest]int64, len(all))
	for len(all) > 0 {
		n := min(len(all), 4096)
		infos, err := files.Files(ctx, all[:n])
		if err != nil {
			return nil, err
		}
		for _, fi := range infos {
			out[fi.Digest] = fi.Location.Length
		}
		all = all[n:]
	}
	return out, nil
}

// unsharedLayerOf lists r's payloads with their tar offsets and cuts its
// input into segments at the restart points. A segment's compressed bytes
// come from the points' bit offsets; a member's own, which the recipe does
// not keep, from the blob's size shared out by input size.
func unsharedLayerOf(r *dedup.Recipe, blobSize int64) (unsharedLayer, error) {
	var ul unsharedLayer
	payloads := 0
	err := tarEntries(r, func(e *storage.Entry, off int64) {
		if e.Type != storage.FileType || e.Size == 0 {
			return
		}
		if payloads < len(r.Tar.Files) {
			ul.files = append(ul.files, tarFile{digest: r.Tar.Files[payloads].Digest, off: off, end: off + e.Size})
		}
		payloads++
	})
	if err != nil {
		return ul, err
	}
	if payloads != len(r.Tar.Files) {
		return ul, errors.New("payloads and the recipe's files differ in number")
	}
	var total int64
	for _, m := range r.Compression.Members {
		total += m.Size
	}
	var base int64
	for _, m := range r.Compression.Members {
		memberBlob := int64(float64(blobSize) * float64(m.Size) / float64(max(total, 1)))
		bits := 8*memberBlob - 8*int64(len(m.Header)+len(m.Trailer))
		var prevIn, prevBit int64
		for _, p := range m.Restarts {
			ul.segs = append(ul.segs, segment{in: base + prevIn, end: base + p.In, blob: (p.Bit - prevBit) / 8})
			prevIn, prevBit = p.In, p.Bit
		}
		ul.segs = append(ul.segs, segment{in: base + prevIn, end: base + m.Size, blob: max(bits-prevBit, 0) / 8})
		base += m.Size
	}
	return ul, nil
}

// writeUnshared prints the rules' figures for one setting.
func writeUnshared(w io.Writer, s *followSetting) {
	u := s.Unshared
	if u.Blob == 0 {
		return
	}
	pct := func(n, of int64) string { return fmt.Sprintf("%.1f%%", 100*float64(n)/float64(max(of, 1))) }
	fmt.Fprintf(w, "\nkeeping the original segments no other layer's files are in (parses %v), of %.1f MB of deduplicated blobs, %.1f MB of tar:\n", s.Parses, float64(u.Blob)/1e6, float64(u.Tar)/1e6)
	fmt.Fprintf(w, "  %-6s %-16s %9s %9s %9s %11s %11s %11s\n", "rule", "producer", "segments", "blob", "tar", "kept MB", "frames MB", "twice MB")
	for _, r := range u.Rules {
		fmt.Fprintf(w, "  %-6s %-16s %9d %9s %9s %11.1f %11.1f %11.1f\n", r.Name, r.Producer, r.Segments, pct(r.KeptBlob, u.Blob), pct(r.KeptTar, u.Tar),
			float64(r.KeptBlob)/1e6, float64(r.Frames)/1e6, float64(r.Twice)/1e6)
	}
	fmt.Fprintf(w, "  (blob, tar: shares a restore copies instead of rebuilding; kept MB replace frames MB of stored files; twice MB are stored again by a later layer)\n")
}
