package dedupbench

import (
	"github.com/cairn-registry/cairn/internal/iocount"

	"bufio"
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/opencontainers/go-digest"

	"github.com/cairn-registry/cairn/internal/bench/dataset"
	"github.com/cairn-registry/cairn/internal/dedup/layer"
	"github.com/cairn-registry/cairn/internal/dedup/recompress"
	"github.com/cairn-registry/cairn/internal/storage/driver/filesystem"
)

// RestoreResult is figure (c) for one encoder family: a full restore
// (tar assembly from the file store piped into the recompressor) against
// the same encoder compressing the plain tar alone.
type RestoreResult struct {
	// Family is the encoder family ("stdlib-gzip", "pgzip",
	// "klauspost-zstd", "none" for uncompressed layers); Encoders are the
	// exact encoder ids met.
	Family   string   `json:"family"`
	Encoders []string `json:"encoders"`
	Layers   int      `json:"layers"`
	// BlobBytes and TarBytes are summed over the layers.
	BlobBytes int64 `json:"blobBytes"`
	TarBytes  int64 `json:"tarBytes"`
	// MB/s of blob bytes delivered (10^6 bytes/s), each layer's best of
	// Repeat runs, summed: restore, the encoder alone on the plain tar,
	// and their ratio. AssembleMBps is the tar assembly alone, in tar
	// bytes.
	RestoreMBps    float64 `json:"restoreMBps"`
	CompressorMBps float64 `json:"compressorMBps"`
	Ratio          float64 `json:"restorePerCompressor"`
	AssembleMBps   float64 `json:"assembleMBps"`
}

// RestoreFigures is figure (c) over a dataset.
type RestoreFigures struct {
	Repeat   int             `json:"repeat"`
	Families []RestoreResult `json:"families"`
	// Irreproducible lists the blobs no encoder reproduces (the GNU gzip
	// layer), by description and compression.
	Irreproducible []string `json:"irreproducible"`
	// Store is the file store used: unique payloads and their zstd bytes.
	StoreFiles int   `json:"storeFiles"`
	StoreBytes int64 `json:"storeBytes"`
}

// measureRestore disassembles every distinct layer tar of ds into a
// DriverStore over a filesystem driver rooted in dir (removed afterwards),
// finds each blob's compression recipe, and times, per blob, a restore and
// the bare encoder, best of repeat runs. Restored bytes are checked against
// the blob's digest.
func measureRestore(ctx context.Context, ds *dataset.Dataset, dir string, repeat int, logf func(string, ...any)) (*RestoreFigures, error) {
	if repeat < 1 {
		repeat = 1
	}
	root := filepath.Join(dir, "restore-store")
	if err := os.RemoveAll(root); err != nil {
		return nil, fmt.Errorf("dedupbench: %w", err)
	}
	defer os.RemoveAll(root)
	drv, err := filesystem.New(root)
	if err != nil {
		return nil, fmt.Errorf("dedupbench: %w", err)
	}
	store, err := layer.NewDriverStore(drv)
	if err != nil {
		return nil, err
	}

	start := time.Now()
	recipes := make(map[digest.Digest]*layer.Recipe) // by diff ID
	for _, l := range ds.Layers {
		if _, ok := recipes[l.DiffID]; ok {
			continue
		}
		r, err := disassemble(ctx, l, store)
		if err != nil {
			return nil, err
		}
		recipes[l.DiffID] = r
	}
	fig := &RestoreFigures{Repeat: repeat}
	fig.StoreFiles, fig.StoreBytes, err = dirUsage(root)
	if err != nil {
		return nil, err
	}
	logf("restore: %d layer tars disassembled into %d files (%.1f MB stored) in %s", len(recipes), fig.StoreFiles, float64(fig.StoreBytes)/1e6, time.Since(start).Round(time.Millisecond))

	type acc struct {
		RestoreResult
		restore, comp, asm time.Duration
	}
	fams := map[string]*acc{}
	for _, l := range ds.Layers {
		rec, err := findRecipe(ctx, l)
		if errors.Is(err, recompress.ErrIrreproducible) {
			fig.Irreproducible = append(fig.Irreproducible, fmt.Sprintf("%s (%s)", l.Description, l.Compression))
			continue
		}
		if err != nil {
			return nil, err
		}
		fam, enc := "none", "none"
		if len(rec.Members) > 0 {
			enc = rec.Members[0].Encoder
			fam, _, _ = strings.Cut(enc, "/")
		}
		a := fams[fam]
		if a == nil {
			a = &acc{RestoreResult: RestoreResult{Family: fam}}
			fams[fam] = a
		}
		if !slices.Contains(a.Encoders, enc) {
			a.Encoders = append(a.Encoders, enc)
		}
		best := [3]time.Duration{}
		for i := range repeat {
			t, err := timeRestore(ctx, l, rec, recipes[l.DiffID], store)
			if err != nil {
				return nil, err
			}
			c, err := timeCompressor(l, rec)
			if err != nil {
				return nil, err
			}
			m, err := timeAssemble(ctx, recipes[l.DiffID], store)
			if err != nil {
				return nil, err
			}
			for j, d := range [3]time.Duration{t, c, m} {
				if i == 0 || d < best[j] {
					best[j] = d
				}
			}
		}
		a.Layers++
		a.BlobBytes += l.Size
		a.TarBytes += l.TarSize
		a.restore += best[0]
		a.comp += best[1]
		a.asm += best[2]
	}
	for _, a := range fams {
		a.RestoreMBps = mbps(a.BlobBytes, a.restore)
		a.CompressorMBps = mbps(a.BlobBytes, a.comp)
		a.AssembleMBps = mbps(a.TarBytes, a.asm)
		if a.CompressorMBps > 0 {
			a.Ratio = a.RestoreMBps / a.CompressorMBps
		}
		slices.Sort(a.Encoders)
		fig.Families = append(fig.Families, a.RestoreResult)
	}
	slices.SortFunc(fig.Families, func(x, y RestoreResult) int { return strings.Compare(x.Family, y.Family) })
	logf("restore: %d blobs timed in %s", len(ds.Layers)-len(fig.Irreproducible), time.Since(start).Round(time.Millisecond))
	return fig, nil
}

func disassemble(ctx context.Context, l *dataset.Layer, store layer.FileStore) (*layer.Recipe, error) {
	f, err := l.OpenTar()
	if err != nil {
		return nil, fmt.Errorf("dedupbench: %w", err)
	}
	defer f.Close()
	r, err := layer.Disassemble(ctx, bufio.NewReaderSize(f, 1<<20), store)
	if err != nil {
		return nil, fmt.Errorf("dedupbench: disassemble %q: %w", l.Description, err)
	}
	if r.TarDigest != l.DiffID {
		return nil, fmt.Errorf("dedupbench: disassemble %q: recipe for %s, tar is %s", l.Description, r.TarDigest, l.DiffID)
	}
	return r, nil
}

func findRecipe(ctx context.Context, l *dataset.Layer) (recompress.Recipe, error) {
	blob, err := l.Open()
	if err != nil {
		return recompress.Recipe{}, fmt.Errorf("dedupbench: %w", err)
	}
	defer blob.Close()
	var openErr error
	rec, err := recompress.FindRecipe(ctx, blob, l.Size, func() io.Reader {
		f, err := l.OpenTar()
		if err != nil {
			openErr = err
			return errReader{err}
		}
		return f
	})
	if openErr != nil {
		return rec, fmt.Errorf("dedupbench: %w", openErr)
	}
	if err != nil {
		return rec, fmt.Errorf("dedupbench: recipe for %q (%s): %w", l.Description, l.Compression, err)
	}
	return rec, nil
}

type errReader struct{ err error }

func (e errReader) Read([]byte) (int, error) { return 0, e.err }

// timeRestore times Assemble piped into Rebuild, as a pull of a
// deduplicated layer runs, and checks the bytes.
func timeRestore(ctx context.Context, l *dataset.Layer, rec recompress.Recipe, tarRec *layer.Recipe, store layer.FileStore) (time.Duration, error) {
	start := time.Now()
	pr, pw := io.Pipe()
	go func() { pw.CloseWithError(layer.Assemble(ctx, pw, tarRec, store)) }()
	h := sha256.New()
	cw := &iocount.Writer{W: h}
	err := recompress.Rebuild(cw, rec, bufio.NewReaderSize(pr, 1<<20))
	pr.CloseWithError(errors.New("restore stopped"))
	d := time.Since(start)
	if err != nil {
		return 0, fmt.Errorf("dedupbench: restore %q: %w", l.Description, err)
	}
	if got := digest.NewDigest(digest.SHA256, h); got != l.Digest || cw.N != l.Size {
		return 0, fmt.Errorf("dedupbench: restore %q gave %s (%d bytes), want %s (%d bytes)", l.Description, got, cw.N, l.Digest, l.Size)
	}
	return d, nil
}

// timeCompressor times the same encoder alone over the plain tar file,
// writing into the same hashing sink.
func timeCompressor(l *dataset.Layer, rec recompress.Recipe) (time.Duration, error) {
	f, err := l.OpenTar()
	if err != nil {
		return 0, fmt.Errorf("dedupbench: %w", err)
	}
	defer f.Close()
	start := time.Now()
	cw := &iocount.Writer{W: sha256.New()}
	if err := recompress.Rebuild(cw, rec, bufio.NewReaderSize(f, 1<<20)); err != nil {
		return 0, fmt.Errorf("dedupbench: compress %q: %w", l.Description, err)
	}
	return time.Since(start), nil
}

func timeAssemble(ctx context.Context, tarRec *layer.Recipe, store layer.FileStore) (time.Duration, error) {
	start := time.Now()
	if err := layer.Assemble(ctx, io.Discard, tarRec, store); err != nil {
		return 0, fmt.Errorf("dedupbench: assemble: %w", err)
	}
	return time.Since(start), nil
}

func dirUsage(root string) (files int, bytes int64, err error) {
	err = filepath.WalkDir(root, func(_ string, d os.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		fi, err := d.Info()
		if err != nil {
			return err
		}
		files++
		bytes += fi.Size()
		return nil
	})
	if err != nil {
		return 0, 0, fmt.Errorf("dedupbench: %w", err)
	}
	return files, bytes, nil
}

func mbps(bytes int64, d time.Duration) float64 {
	if d <= 0 {
		return 0
	}
	return float64(bytes) / 1e6 / d.Seconds()
}
