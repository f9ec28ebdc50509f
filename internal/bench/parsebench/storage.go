package parsebench

import (
	"bytes"
	"compress/gzip"
	"context"
	"fmt"
	"io"

	"github.com/klauspost/compress/zstd"

	"github.com/cairn-registry/cairn/internal/dedup/recompress/deflate"
)

// The price of keeping parses. A file stored as its own raw DEFLATE
// (level 6, tokens kept) gives its parse to a rebuild; stored as a zstd
// frame (what packs hold today) it gives only its bytes. MeasureStorage
// prices the switch per size class and per rule (a file keeps its parse
// when its DEFLATE is at most a given share larger than its zstd frame),
// against the bytes whose parse it gives.

// StorageClass is one size class of unique files.
type StorageClass struct {
	Name         string `json:"name"`
	Files        int    `json:"files"`
	Bytes        int64  `json:"bytes"`
	ZstdBytes    int64  `json:"zstd_bytes"`
	DeflateBytes int64  `json:"deflate_bytes"`
}

// StorageRule is what keeping parses costs under one rule.
type StorageRule struct {
	// MinSize is the least file size kept as a parse; MaxExtra the most
	// its DEFLATE may exceed its zstd frame, as a share of the frame, for
	// files up to LargeSize (larger ones are streamed: always a parse).
	MinSize   int64   `json:"min_size"`
	MaxExtra  float64 `json:"max_extra"`
	LargeSize int64   `json:"large_size,omitempty"`
	// ParseBytes are the files (uncompressed) kept as parses; Stored is
	// every unique file's storage under the rule, against ZstdBytes.
	ParseBytes  int64 `json:"parse_bytes"`
	StoredBytes int64 `json:"stored_bytes"`
}

// StorageReport is MeasureStorage's result.
type StorageReport struct {
	Layers    int            `json:"layers"`
	Classes   []StorageClass `json:"classes"`
	ZstdBytes int64          `json:"zstd_bytes"`
	Rules     []StorageRule  `json:"rules"`
}

var storageBounds = []struct {
	name string
	max  int64
}{{"<4K", 4 << 10}, {"4K-16K", 16 << 10}, {"16K-64K", 64 << 10}, {"64K-256K", 256 << 10}, {"256K-1M", 1 << 20}, {">=1M", 1 << 62}}

// MeasureStorage prices keeping the parses of the unique files of layers.
func MeasureStorage(ctx context.Context, layers []Layer, log io.Writer) (*StorageReport, error) {
	// As packs compress a file (pack.NewStore).
	zenc, err := zstd.NewWriter(nil, zstd.WithEncoderConcurrency(1))
	if err != nil {
		return nil, err
	}
	r := &StorageReport{}
	for _, b := range storageBounds {
		r.Classes = append(r.Classes, StorageClass{Name: b.name})
	}
	for _, min := range []int64{4 << 10, 16 << 10} {
		for _, extra := range []float64{0.05, 0.10, 0.20, 1e9} {
			r.Rules = append(r.Rules, StorageRule{MinSize: min, MaxExtra: extra})
		}
	}
	for _, extra := range []float64{0, 0.05, 0.10, 0.20} {
		r.Rules = append(r.Rules, StorageRule{MinSize: 4 << 10, MaxExtra: extra, LargeSize: 4 << 20})
	}
	seen := map[[32]byte]bool{}
	var buf bytes.Buffer
	for _, l := range layers {
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		rc, err := l.Open()
		if err != nil {
			return nil, err
		}
		zr, err := gzip.NewReader(rc)
		if err != nil {
			rc.Close()
			return nil, fmt.Errorf("parsebench: %s: %w", l.Name, err)
		}
		out, err := io.ReadAll(zr)
		rc.Close()
		if err != nil {
			return nil, fmt.Errorf("parsebench: %s: %w", l.Name, err)
		}
		files, err := tarFiles(out)
		if err != nil {
			return nil, err
		}
		r.Layers++
		for _, f := range files {
			if seen[f.sum] {
				continue
			}
			seen[f.sum] = true
			data := out[f.off : f.off+f.size]
			z := int64(len(zenc.EncodeAll(data, nil)))
			buf.Reset()
			w, err := deflate.NewWriter(&buf, 6)
			if err != nil {
				return nil, err
			}
			w.KeepTokens()
			w.Write(data)
			if err := w.Close(); err != nil {
				return nil, err
			}
			d := int64(buf.Len())
			c := 0
			for f.size >= storageBounds[c].max {
				c++
			}
			cl := &r.Classes[c]
			cl.Files++
			cl.Bytes += f.size
			cl.ZstdBytes += z
			cl.DeflateBytes += d
			r.ZstdBytes += z
			for i := range r.Rules {
				u := &r.Rules[i]
				large := u.LargeSize > 0 && f.size > u.LargeSize
				if f.size >= u.MinSize && (large || float64(d) <= float64(z)*(1+u.MaxExtra)) {
					u.ParseBytes += f.size
					u.StoredBytes += d
				} else {
					u.StoredBytes += z
				}
			}
		}
		if log != nil {
			fmt.Fprintf(log, "storage: %s: %d unique files so far\n", l.Name, len(seen))
		}
	}
	return r, nil
}
