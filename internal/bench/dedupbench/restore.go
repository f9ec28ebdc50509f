package dedupbench

import (
	"github.com/cairn-registry/cairn/internal/iowatch"

	"bufio"
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"time"

	"github.com/opencontainers/go-digest"

	"github.com/cairn-registry/cairn/internal/bench/dataset"
	"github.com/cairn-registry/cairn/internal/dedup/layer"
	"github.com/cairn-registry/cairn/internal/dedup/recompress"
	"github.com/cairn-registry/cairn/internal/layout"
	"github.com/cairn-registry/cairn/internal/storage/driver"
	"github.com/cairn-registry/cairn/internal/storage/driver/filesystem"
)

// RestoreResult is figure (c) for one producer: a full restore (tar
// assembly from the file store piped into the recompressor) against the
// same encoder compressing the plain tar alone and against a read of the
// intact blob, under each GOMAXPROCS of RestoreFigures.Procs.
type RestoreResult struct {
	// Producer names what compressed the blobs, told by the encoder of
	// their recipes: "compress/gzip default" (stdlib-gzip/6: docker,
	// buildkit), "compress/gzip BestSpeed" (stdlib-gzip/1: crane, ko),
	// "pgzip", "zstd", "uncompressed", or another encoder family. Encoders
	// are the exact encoder ids met.
	Producer string   `json:"producer"`
	Encoders []string `json:"encoders"`
	// Derived is set when some of the blobs are no image's: the dataset's
	// compress/gzip default layers' tars, compressed by this producer
	// (dataset.Layer.Recompressed), because few images push its format.
	Derived bool `json:"derived,omitempty"`
	Layers  int  `json:"layers"`
	// BlobBytes and TarBytes are summed over the layers.
	BlobBytes int64        `json:"blobBytes"`
	TarBytes  int64        `json:"tarBytes"`
	Runs      []RestoreRun `json:"runs"`
}

// RestoreRun is one producer's figures under one GOMAXPROCS. Figures are
// MB/s (10^6 bytes/s) of blob bytes delivered, each layer's best of Repeat
// runs, summed over its layers.
type RestoreRun struct {
	Procs int `json:"procs"`
	// RestoreMBps is the restore, digest checked as a GET's is.
	RestoreMBps float64 `json:"restoreMBps"`
	// CompressorMBps is the encoder alone on the plain tar file.
	CompressorMBps float64 `json:"compressorMBps"`
	// IntactMBps is a read of the intact blob from a filesystem driver,
	// as a GET of an intact layer reads it (Driver.Reader, io.Copy).
	IntactMBps           float64 `json:"intactMBps"`
	RestorePerCompressor float64 `json:"restorePerCompressor"`
	RestorePerIntact     float64 `json:"restorePerIntact"`
	// AssembleMBps is the tar assembly alone, in tar bytes.
	AssembleMBps float64 `json:"assembleMBps"`
}

// RestoreFigures is figure (c) over a dataset.
type RestoreFigures struct {
	Repeat int `json:"repeat"`
	// Procs are the GOMAXPROCS values every figure was measured under,
	// in the order of each RestoreResult's Runs.
	Procs     []int           `json:"procs"`
	Producers []RestoreResult `json:"producers"`
	// Irreproducible lists the blobs no encoder reproduces (the GNU gzip
	// layer), by description and compression.
	Irreproducible []string `json:"irreproducible"`
	// Store is the file store used: unique payloads and their zstd bytes.
	StoreFiles int   `json:"storeFiles"`
	StoreBytes int64 `json:"storeBytes"`
}

// Producer names, in the order the figures list them.
const (
	producerGzipDefault   = "compress/gzip default"
	producerGzipBestSpeed = "compress/gzip BestSpeed"
	producerPgzip         = "pgzip"
	producerZstd          = "zstd"
	producerNone          = "uncompressed"
)

// producerOf names the producer of a blob whose recipe's first member has
// encoder id enc ("none" for an uncompressed blob).
func producerOf(enc string) string {
	fam, rest, _ := strings.Cut(enc, "/")
	switch fam {
	case "stdlib-gzip":
		switch rest {
		case "6":
			return producerGzipDefault
		case "1":
			return producerGzipBestSpeed
		}
		return "compress/gzip level " + rest
	case "pgzip":
		return producerPgzip
	case "klauspost-zstd":
		return producerZstd
	case "none":
		return producerNone
	}
	return fam
}

func producerRank(p string) int {
	switch p {
	case producerGzipDefault:
		return 0
	case producerGzipBestSpeed:
		return 1
	case producerPgzip:
		return 2
	case producerZstd:
		return 3
	case producerNone:
		return 5
	}
	return 4
}

// restoreBlob is one blob timed: a dataset layer or one derived from it.
type restoreBlob struct {
	l        *dataset.Layer
	rec      recompress.Recipe
	producer string
	derived  bool
}

// measureRestore disassembles every distinct layer tar of ds into a
// DriverStore over a filesystem driver in a new directory under dir
// (removed afterwards), stores every blob intact in the same driver, finds
// each blob's compression recipe, and times, per blob, a restore, the bare
// encoder, the assembly and the intact read, best of repeat runs, under
// each GOMAXPROCS of procs in turn. Restored bytes are checked against the
// blob's digest. Besides the dataset's blobs it times its compress/gzip
// default layers' tars compressed with BestSpeed, a format no image of the
// dataset pushes.
func measureRestore(ctx context.Context, ds *dataset.Dataset, dir string, repeat int, procs []int, logf func(string, ...any)) (*RestoreFigures, error) {
	if repeat < 1 {
		repeat = 1
	}
	if len(procs) == 0 {
		procs = []int{runtime.GOMAXPROCS(0)}
	}
	// A directory of its own: two runs sharing a work dir must not remove
	// each other's store.
	root, err := os.MkdirTemp(dir, "restore-store-")
	if err != nil {
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
	fig := &RestoreFigures{Repeat: repeat, Procs: procs}
	fig.StoreFiles, fig.StoreBytes, err = dirUsage(root)
	if err != nil {
		return nil, err
	}
	logf("restore: %d layer tars disassembled into %d files (%.1f MB stored) in %s", len(recipes), fig.StoreFiles, float64(fig.StoreBytes)/1e6, time.Since(start).Round(time.Millisecond))

	var blobs []restoreBlob
	add := func(l *dataset.Layer, derived bool) error {
		rec, err := findRecipe(ctx, l)
		if errors.Is(err, recompress.ErrIrreproducible) {
			fig.Irreproducible = append(fig.Irreproducible, fmt.Sprintf("%s (%s)", l.Description, l.Compression))
			return nil
		}
		if err != nil {
			return err
		}
		enc := "none"
		if len(rec.Members) > 0 {
			enc = rec.Members[0].Encoder
		}
		if err := putIntact(ctx, drv, l); err != nil {
			return err
		}
		blobs = append(blobs, restoreBlob{l: l, rec: rec, producer: producerOf(enc), derived: derived})
		return nil
	}
	fast := map[digest.Digest]bool{} // diff IDs with a BestSpeed blob
	for _, l := range ds.Layers {
		if err := add(l, false); err != nil {
			return nil, err
		}
		if l.Compression == dataset.GzipStdlibBestSpeed {
			fast[l.DiffID] = true
		}
	}
	native := len(fast)
	for _, b := range slices.Clone(blobs) {
		if b.producer != producerGzipDefault || fast[b.l.DiffID] {
			continue
		}
		fast[b.l.DiffID] = true
		d, err := b.l.Recompressed(ctx, dataset.GzipStdlibBestSpeed)
		if err != nil {
			return nil, fmt.Errorf("dedupbench: %w", err)
		}
		if err := add(d, true); err != nil {
			return nil, err
		}
	}
	logf("restore: %d blobs (%d derived with BestSpeed) stored intact, recipes found, in %s", len(blobs), len(fast)-native, time.Since(start).Round(time.Millisecond))

	results := map[string]*RestoreResult{}
	for _, b := range blobs {
		r := results[b.producer]
		if r == nil {
			r = &RestoreResult{Producer: b.producer}
			results[b.producer] = r
		}
		for _, m := range b.rec.Members {
			if !slices.Contains(r.Encoders, m.Encoder) {
				r.Encoders = append(r.Encoders, m.Encoder)
			}
		}
		if len(b.rec.Members) == 0 && !slices.Contains(r.Encoders, "none") {
			r.Encoders = append(r.Encoders, "none")
		}
		r.Derived = r.Derived || b.derived
		r.Layers++
		r.BlobBytes += b.l.Size
		r.TarBytes += b.l.TarSize
	}
	for _, n := range procs {
		runs, err := timeRestores(ctx, n, blobs, recipes, store, drv, repeat)
		if err != nil {
			return nil, err
		}
		for p, run := range runs {
			results[p].Runs = append(results[p].Runs, run)
		}
		logf("restore: %d blobs timed under GOMAXPROCS %d, %s so far", len(blobs), n, time.Since(start).Round(time.Millisecond))
	}
	for _, r := range results {
		slices.Sort(r.Encoders)
		fig.Producers = append(fig.Producers, *r)
	}
	slices.SortFunc(fig.Producers, func(x, y RestoreResult) int {
		if c := producerRank(x.Producer) - producerRank(y.Producer); c != 0 {
			return c
		}
		return strings.Compare(x.Producer, y.Producer)
	})
	return fig, nil
}

// timeRestores times every blob under runtime.GOMAXPROCS(procs), restoring
// the previous setting before it returns, and sums the figures by producer.
func timeRestores(ctx context.Context, procs int, blobs []restoreBlob, recipes map[digest.Digest]*layer.Recipe, store layer.FileStore, drv driver.Driver, repeat int) (map[string]RestoreRun, error) {
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(procs))
	type sums struct {
		blob, tar                  int64
		restore, comp, intact, asm time.Duration
	}
	by := map[string]*sums{}
	for _, b := range blobs {
		var best [4]time.Duration
		for i := range repeat {
			t, err := timeRestore(ctx, b.l, b.rec, recipes[b.l.DiffID], store)
			if err != nil {
				return nil, err
			}
			c, err := timeCompressor(b.l, b.rec)
			if err != nil {
				return nil, err
			}
			m, err := timeAssemble(ctx, recipes[b.l.DiffID], store)
			if err != nil {
				return nil, err
			}
			r, err := timeIntact(ctx, drv, b.l)
			if err != nil {
				return nil, err
			}
			for j, d := range [4]time.Duration{t, c, m, r} {
				if i == 0 || d < best[j] {
					best[j] = d
				}
			}
		}
		s := by[b.producer]
		if s == nil {
			s = &sums{}
			by[b.producer] = s
		}
		s.blob += b.l.Size
		s.tar += b.l.TarSize
		s.restore += best[0]
		s.comp += best[1]
		s.asm += best[2]
		s.intact += best[3]
	}
	runs := make(map[string]RestoreRun, len(by))
	for p, s := range by {
		run := RestoreRun{
			Procs:          procs,
			RestoreMBps:    mbps(s.blob, s.restore),
			CompressorMBps: mbps(s.blob, s.comp),
			IntactMBps:     mbps(s.blob, s.intact),
			AssembleMBps:   mbps(s.tar, s.asm),
		}
		if run.CompressorMBps > 0 {
			run.RestorePerCompressor = run.RestoreMBps / run.CompressorMBps
		}
		if run.IntactMBps > 0 {
			run.RestorePerIntact = run.RestoreMBps / run.IntactMBps
		}
		runs[p] = run
	}
	return runs, nil
}

// putIntact stores blob l in d where a registry keeps intact blobs.
func putIntact(ctx context.Context, d driver.Driver, l *dataset.Layer) error {
	f, err := l.Open()
	if err != nil {
		return fmt.Errorf("dedupbench: %w", err)
	}
	defer f.Close()
	w, err := d.Writer(ctx, layout.BlobData(l.Digest), false)
	if err != nil {
		return fmt.Errorf("dedupbench: %w", err)
	}
	if _, err := io.Copy(w, f); err != nil {
		w.Cancel(ctx)
		return fmt.Errorf("dedupbench: store %q intact: %w", l.Description, err)
	}
	if err := w.Commit(ctx); err != nil {
		return fmt.Errorf("dedupbench: store %q intact: %w", l.Description, err)
	}
	return w.Close()
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
	// As the dedup worker does: keep the restart points that reproduce
	// the blob.
	tar, err := l.OpenTar()
	if err != nil {
		return rec, fmt.Errorf("dedupbench: %w", err)
	}
	defer tar.Close()
	if rec, err = recompress.Check(io.Discard, rec, bufio.NewReaderSize(tar, 1<<20), blob); err != nil {
		return rec, fmt.Errorf("dedupbench: check recipe for %q (%s): %w", l.Description, l.Compression, err)
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
	cw := &iowatch.Writer{W: h}
	err := recompress.Rebuild(cw, rec, bufio.NewReaderSize(pr, 1<<20), 0)
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
	cw := &iowatch.Writer{W: sha256.New()}
	if err := recompress.Rebuild(cw, rec, bufio.NewReaderSize(f, 1<<20), 0); err != nil {
		return 0, fmt.Errorf("dedupbench: compress %q: %w", l.Description, err)
	}
	return time.Since(start), nil
}

// timeIntact times a read of the intact blob the way a GET of an intact
// layer reads it: Driver.Reader from offset 0, copied with io.Copy.
func timeIntact(ctx context.Context, d driver.Driver, l *dataset.Layer) (time.Duration, error) {
	start := time.Now()
	rc, err := d.Reader(ctx, layout.BlobData(l.Digest), 0)
	if err != nil {
		return 0, fmt.Errorf("dedupbench: read %q intact: %w", l.Description, err)
	}
	cw := &iowatch.Writer{W: io.Discard}
	_, err = io.Copy(cw, rc)
	rc.Close()
	d2 := time.Since(start)
	if err != nil {
		return 0, fmt.Errorf("dedupbench: read %q intact: %w", l.Description, err)
	}
	if cw.N != l.Size {
		return 0, fmt.Errorf("dedupbench: read %q intact: %d bytes, want %d", l.Description, cw.N, l.Size)
	}
	return d2, nil
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
