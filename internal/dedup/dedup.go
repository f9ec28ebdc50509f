// Package dedup runs cairn's file-level layer deduplication (docs/architecture.md,
// "The life of a dedup layer"): a Worker splits the layers pushed manifests name into
// their files (package layer) and a byte-exact compression recipe (package
// recompress); a Source serves a layer whose intact copy was dropped by
// rebuilding it (restore.go), with caches; a Predictor, driven by what
// clients pull, warms them ahead of the pulls it expects (predict.go); and
// Statistics reports what dedup saves. Engine wires them together; its
// background work runs as tasks on a task.Runner.
//
// Storage holds the content: unique files in packs (package pack; before
// packs, one object each under cairn/files), and each processed layer's
// recipe at blobs/<alg>/<xx>/<hex>/recipe, beside the intact data (modes
// index and selective-hot) or instead of it (full, selective-cold). The
// metadata store (file reference counts and locations, pack records, layer
// states, pull maps) says where each file is; every pack carries its own
// index and every recipe its files, so it can be rebuilt from storage.
//
// Crash safety, in processing order (process.go): state pending → the
// recipe guessed by a probe (recompress.ProbeRecipe: the start of each
// member only) → file references taken per layer (idempotent) → missing
// files written into packs, located only once their pack is complete →
// recipe verified by a full rebuild from stored pieces, the layer's one
// full compression, on every core where it has restart points (a refuted
// guess: the full recipe search, and the rebuild again) → recipe file
// written → state recorded → only then the intact data deleted. A crash at any step leaves the
// layer served by whatever is still complete: the intact data, or a
// verified recipe.
package dedup

import (
	"bytes"
	"encoding/json"
	"fmt"
	"path"
	"runtime"
	"time"

	"github.com/klauspost/compress/zstd"
	"github.com/opencontainers/go-digest"
	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/noop"

	"github.com/cairn-registry/cairn/internal/dedup/layer"
	"github.com/cairn-registry/cairn/internal/dedup/pack"
	"github.com/cairn-registry/cairn/internal/dedup/recompress"
)

// Mode is how dedup treats the layers of a repository.
type Mode string

// Modes (README, "Deduplication").
const (
	ModeOff       Mode = "off"       // layers are left alone
	ModeIndex     Mode = "index"     // recipes made and verified, intact copies kept
	ModeFull      Mode = "full"      // intact copy deleted once the recipe verifies
	ModeSelective Mode = "selective" // intact copies kept only for popular layers
)

// ParseMode checks a configured mode; "" is off.
func ParseMode(s string) (Mode, error) {
	switch m := Mode(s); m {
	case "":
		return ModeOff, nil
	case ModeOff, ModeIndex, ModeFull, ModeSelective:
		return m, nil
	}
	return "", fmt.Errorf("dedup: unknown mode %q (want off, index, full or selective)", s)
}

// rank orders modes by how much they do; a layer shared by repositories
// with different modes gets the strongest.
func (m Mode) rank() int {
	switch m {
	case ModeIndex:
		return 1
	case ModeSelective:
		return 2
	case ModeFull:
		return 3
	}
	return 0
}

// RepoMode overrides the mode for repositories matching Pattern (a
// path.Match pattern such as "mirror/*", or an exact name).
type RepoMode struct {
	Pattern string
	Mode    Mode
}

// Options configures an Engine. Zero values take the defaults noted.
type Options struct {
	// Mode applies to repositories no RepoModes entry matches.
	Mode      Mode
	RepoModes []RepoMode
	// Workers process layers in parallel (default half the CPUs, at least 1).
	Workers int
	// Parses stores every file of pack.MinParseFile bytes and more, whatever
	// compressed its layer, as a parse frame at pack.ParseLevel, so that
	// restores of compress/flate level-6 layers follow the files' tokens
	// (pack.Writer.KeepParses, recompress "Copies"). Off by default: on
	// the Debian full profile copies cover 72% of the level-6 input and
	// those restores run 1.4–1.5× faster per core, but the worker spends
	// 15% more CPU and the layers that follow nothing (zstd, pgzip,
	// BestSpeed, uncompressed) restore 17–33% slower, reading DEFLATE
	// where they read zstd.
	Parses bool
	// QueueSize bounds layers waiting in memory (default 4096); beyond it
	// layers stay pending in the metadata store and are picked up by the
	// periodic scan.
	QueueSize int
	// TempDir holds spooled blobs while they are processed ("" = os default).
	TempDir string
	// SharedStore: other processes use the metadata store too (Redis), so
	// layers are processed under a lease. A bolt store is one process's:
	// a lease there could only be left by a killed predecessor.
	SharedStore bool

	// Selective mode: a layer pulled at least HotPulls times within
	// HotWindow keeps (or gets back) its intact copy (defaults 3, 1h).
	HotPulls  int64
	HotWindow time.Duration

	// PreconstructDir and PreconstructSize bound the on-disk cache of
	// restored layers (size 0: restores are shared but not kept).
	PreconstructDir  string
	PreconstructSize int64
	// PrefetchSize bounds the in-memory cache of intact layers read ahead
	// for predicted pulls (0: off).
	PrefetchSize int64
	// Predict enables restoring/prefetching the layers of a pulled image
	// ahead of their GETs; RepullRatio is the share of repeated pulls above
	// which a client also gets the layers it pulled before (default 0.5).
	Predict     bool
	RepullRatio float64
	// PredictRebuilds bounds the predicted rebuilds running at once
	// (default one fewer than GOMAXPROCS, at least 1). Together they use
	// at most GOMAXPROCS-1 cores (at least 1): a core is left to serving.
	// A rebuild a GET waits for never waits for them, and none starts
	// while a GET waits for one (cache.Disk).
	PredictRebuilds int

	// Tracer traces each layer's processing (nil: not traced).
	Tracer trace.Tracer

	// Packs tunes how unique files are packed and read back (package
	// pack; zero values take its defaults).
	Packs pack.Options

	// Events, when set, learns of each layer the worker deduplicated.
	Events LayerEvents
}

// LayerEvents learns of layers whose intact copy the worker replaced by
// their recipe (notifications' dedup events).
type LayerEvents interface {
	LayerDeduplicated(layer digest.Digest)
}

// ModeFor returns the mode for repo.
func (o *Options) ModeFor(repo string) Mode {
	for _, rm := range o.RepoModes {
		if rm.Pattern == repo {
			return rm.Mode
		}
		if ok, _ := path.Match(rm.Pattern, repo); ok {
			return rm.Mode
		}
	}
	if o.Mode == "" {
		return ModeOff
	}
	return o.Mode
}

// Active reports whether any repository has dedup on.
func (o *Options) Active() bool {
	if o.Mode != "" && o.Mode != ModeOff {
		return true
	}
	for _, rm := range o.RepoModes {
		if rm.Mode != ModeOff {
			return true
		}
	}
	return false
}

func (o Options) withDefaults() Options {
	if o.Workers <= 0 {
		o.Workers = max(1, runtime.GOMAXPROCS(0)/2)
	}
	if o.QueueSize <= 0 {
		o.QueueSize = 4096
	}
	if o.HotPulls <= 0 {
		o.HotPulls = 3
	}
	if o.HotWindow <= 0 {
		o.HotWindow = time.Hour
	}
	if o.RepullRatio <= 0 {
		o.RepullRatio = 0.5
	}
	if o.PredictRebuilds <= 0 {
		o.PredictRebuilds = max(1, runtime.GOMAXPROCS(0)-1)
	}
	if o.Tracer == nil {
		o.Tracer = noop.NewTracerProvider().Tracer("")
	}
	return o
}

// allCores lets a rebuild use every core: a GET waits for it.
const allCores = 0

// predictProcs is the cores one predicted rebuild may use: the
// predictions running at once share GOMAXPROCS-1 (at least one core).
func (o Options) predictProcs() int {
	return max(1, (runtime.GOMAXPROCS(0)-1)/o.PredictRebuilds)
}

// recipeVersion is written into every recipe file; a reader refuses others.
const recipeVersion = 1

// Recipe is a recipe file: everything needed to rebuild one blob
// byte for byte from the file store.
type Recipe struct {
	Version     int               `json:"version"`
	Digest      digest.Digest     `json:"digest"`
	Size        int64             `json:"size"`
	Compression recompress.Recipe `json:"compression"`
	Tar         layer.Recipe      `json:"tar"`
}

// DecodeRecipe parses the recipe file of blob d and checks that it
// describes d, as a restore would before trusting it (cairn scrub reads
// recipes this way to check the files they name).
func DecodeRecipe(d digest.Digest, b []byte) (*Recipe, error) { return decodeRecipe(d, b) }

// Recipe files are stored as one zstd frame of their JSON: the tar
// skeleton's headers, the file digests and the restart points compress
// about tenfold. A file that does not start with zstd's magic is plain JSON
// (written before, and read as it is).
var zstdMagic = []byte{0x28, 0xb5, 0x2f, 0xfd}

// maxRecipe bounds a recipe file decompressed: a layer of a million files
// needs about 200 MiB of JSON.
const maxRecipe = 512 << 20

// encodeRecipe returns the bytes of r's recipe file.
func encodeRecipe(r *Recipe) ([]byte, error) {
	b, err := json.Marshal(r)
	if err != nil {
		return nil, err
	}
	enc, err := zstd.NewWriter(nil, zstd.WithEncoderConcurrency(1), zstd.WithEncoderLevel(zstd.SpeedBetterCompression))
	if err != nil {
		return nil, err
	}
	defer enc.Close()
	return enc.EncodeAll(b, make([]byte, 0, len(b)/4)), nil
}

func decodeRecipe(d digest.Digest, b []byte) (*Recipe, error) {
	if bytes.HasPrefix(b, zstdMagic) {
		dec, err := zstd.NewReader(nil, zstd.WithDecoderConcurrency(1), zstd.WithDecoderMaxMemory(maxRecipe))
		if err != nil {
			return nil, err
		}
		defer dec.Close()
		if b, err = dec.DecodeAll(b, nil); err != nil {
			return nil, fmt.Errorf("dedup: recipe of %s: %w", d, err)
		}
	}
	var r Recipe
	if err := json.Unmarshal(b, &r); err != nil {
		return nil, fmt.Errorf("dedup: recipe of %s: %w", d, err)
	}
	if r.Version != recipeVersion || r.Digest != d || r.Size != r.Compression.Size {
		return nil, fmt.Errorf("dedup: recipe of %s: version %d for %s (%d bytes) does not describe it", d, r.Version, r.Digest, r.Size)
	}
	return &r, nil
}

// summary is what the metadata store keeps per processed layer: enough for
// statistics and selective mode without reading recipe files.
type summary struct {
	Size        int64    `json:"size"`                  // compressed blob size
	TarSize     int64    `json:"tarSize,omitempty"`     // uncompressed size
	RecipeBytes int64    `json:"recipeBytes,omitempty"` // recipe file size
	Files       int      `json:"files,omitempty"`       // distinct files
	Encoders    []string `json:"encoders,omitempty"`    // one per member
	Reason      string   `json:"reason,omitempty"`      // why irreproducible
	// Mode is the strongest mode of the repositories that pushed the layer.
	Mode Mode `json:"mode,omitempty"`
	// Revived: a file was taken back from GC; the recipe is not trusted to
	// replace the intact copy until a check with no GC running.
	Revived bool `json:"revived,omitempty"`
}
