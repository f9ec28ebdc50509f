package config

import (
	"fmt"
	"strconv"
	"strings"
	"time"
)

// Dedup configures file-level layer deduplication (storage.dedup, cairn's
// own section). Restores of layers deduplicated earlier work whatever the
// mode: the mode only decides what happens to layers pushed from now on.
type Dedup struct {
	// Mode is off (default), index, full or selective.
	Mode string `yaml:"mode"`
	// Repositories overrides the mode per repository: keys are names or
	// path.Match patterns ("mirror/*"); exact names win over patterns,
	// longer patterns over shorter ones.
	Repositories map[string]string `yaml:"repositories"`
	// Workers process layers in parallel (default 0: half the CPUs, at
	// least one, so dedup never takes every core from serving).
	Workers int `yaml:"workers"`
	// Metadata is the embedded metadata store.
	Metadata DedupMetadata `yaml:"metadata"`
	// Selective tunes selective mode.
	Selective DedupSelective `yaml:"selective"`
	Cache     DedupCache     `yaml:"cache"`
	Predictor DedupPredictor `yaml:"predictor"`
	Packs     DedupPacks     `yaml:"packs"`
}

// DedupPacks tunes the packs that hold unique files.
type DedupPacks struct {
	// Size a pack is ended at, with an optional unit (default 32MiB).
	Size string `yaml:"size"`
	// ReadAhead is how many ranged reads one restore keeps in flight
	// (default 4).
	ReadAhead int `yaml:"readahead"`
	// CompactBelow: GC moves the live files out of a pack whose live share
	// fell below it (default 0.5; 0 < value <= 1).
	CompactBelow float64 `yaml:"compactbelow"`
	// Parses stores the files of compress/flate layers as their own raw
	// DEFLATE, from which restores follow the layers' tokens instead of
	// searching (issue 27; default off until it pays: see docs).
	Parses bool `yaml:"parses"`
}

// DedupMetadata locates the metadata store: an embedded bolt file (one
// process), or Redis (several serve nodes, and the CLI beside them).
type DedupMetadata struct {
	// Path defaults to <rootdirectory>/cairn-meta.db with the filesystem
	// driver; object-store drivers must set it or Redis.
	Path string `yaml:"path"`
	// Redis, when given, replaces the bolt file.
	Redis *DedupRedis `yaml:"redis"`
}

// DedupRedis is a Redis server holding the metadata. With no Addr, the
// top-level redis section's connection is used (one server: its Lua scripts
// touch keys of several hash slots, so not Redis Cluster).
type DedupRedis struct {
	Addr     string `yaml:"addr"`
	Username string `yaml:"username"`
	Password string `yaml:"password"`
	DB       int    `yaml:"db"`
	// Prefix starts every key (default "cairn:"), so registries can share
	// a server.
	Prefix string `yaml:"prefix"`
}

// DedupSelective: a layer pulled at least Pulls times within Window keeps
// its intact copy (defaults 3 and 1h).
type DedupSelective struct {
	Pulls  int           `yaml:"pulls"`
	Window time.Duration `yaml:"window"`
}

// DedupCache bounds the restore caches.
type DedupCache struct {
	Preconstruct DedupDiskCache `yaml:"preconstruct"`
	Prefetch     DedupMemCache  `yaml:"prefetch"`
}

// DedupDiskCache is the on-disk cache of restored layers.
type DedupDiskCache struct {
	// Dir defaults to <rootdirectory>/cairn-cache/preconstruct with the
	// filesystem driver, else to the user cache directory.
	Dir string `yaml:"dir"`
	// Size in bytes, with an optional unit: 512MiB, 10GiB (default 2GiB;
	// 0 shares restores without keeping them).
	Size string `yaml:"size"`
}

// DedupMemCache is the in-memory cache of prefetched intact layers.
type DedupMemCache struct {
	// Size in bytes with an optional unit (default 0: off).
	Size string `yaml:"size"`
}

// DedupPredictor configures prediction of layer pulls from manifest pulls.
type DedupPredictor struct {
	Enabled bool `yaml:"enabled"`
	// RepullRatio above which a client also gets layers it pulled before
	// (default 0.5).
	RepullRatio float64 `yaml:"repullratio"`
	// Rebuilds bounds the predicted rebuilds running at once (default 0:
	// one fewer than the CPUs, at least one, so that a core is left to
	// serving). GETs never wait for them.
	Rebuilds int `yaml:"rebuilds"`
}

// Defaults of storage.dedup.
const (
	defaultPreconstructSize = "2GiB"
	maxDedupWorkers         = 256
)

func defaultDedup() Dedup {
	return Dedup{
		Mode:      "off",
		Selective: DedupSelective{Pulls: 3, Window: time.Hour},
		Cache:     DedupCache{Preconstruct: DedupDiskCache{Size: defaultPreconstructSize}, Prefetch: DedupMemCache{Size: "0"}},
		Predictor: DedupPredictor{Enabled: true, RepullRatio: 0.5},
		Packs:     DedupPacks{Size: "32MiB", ReadAhead: 4, CompactBelow: 0.5},
	}
}

var dedupModes = []string{"off", "index", "full", "selective"}

func validMode(m string) bool {
	for _, v := range dedupModes {
		if m == v {
			return true
		}
	}
	return false
}

func (d *Dedup) validate() error {
	if !validMode(d.Mode) {
		return fmt.Errorf("config: storage.dedup.mode: %q is not one of %s", d.Mode, strings.Join(dedupModes, ", "))
	}
	for repo, m := range d.Repositories {
		if !validMode(m) {
			return fmt.Errorf("config: storage.dedup.repositories.%s: %q is not one of %s", repo, m, strings.Join(dedupModes, ", "))
		}
	}
	switch {
	case d.Workers < 0 || d.Workers > maxDedupWorkers:
		return fmt.Errorf("config: storage.dedup.workers: %d is not between 0 (half the CPUs) and %d", d.Workers, maxDedupWorkers)
	case d.Selective.Pulls < 1:
		return fmt.Errorf("config: storage.dedup.selective.pulls: must be at least 1, not %d", d.Selective.Pulls)
	case d.Selective.Window <= 0:
		return fmt.Errorf("config: storage.dedup.selective.window: must be positive, not %s", d.Selective.Window)
	case d.Predictor.RepullRatio < 0 || d.Predictor.RepullRatio > 1:
		return fmt.Errorf("config: storage.dedup.predictor.repullratio: %g is not between 0 and 1", d.Predictor.RepullRatio)
	case d.Predictor.Rebuilds < 0 || d.Predictor.Rebuilds > maxDedupWorkers:
		return fmt.Errorf("config: storage.dedup.predictor.rebuilds: %d is not between 0 (one fewer than the CPUs) and %d", d.Predictor.Rebuilds, maxDedupWorkers)
	case d.Packs.ReadAhead < 1 || d.Packs.ReadAhead > 64:
		return fmt.Errorf("config: storage.dedup.packs.readahead: %d is not between 1 and 64", d.Packs.ReadAhead)
	case !(d.Packs.CompactBelow > 0 && d.Packs.CompactBelow <= 1):
		return fmt.Errorf("config: storage.dedup.packs.compactbelow: %g is not in (0, 1]", d.Packs.CompactBelow)
	}
	if n, err := ParseBytes(d.Packs.Size); err != nil || n < 1<<20 || n > 5<<30 {
		if err == nil {
			err = fmt.Errorf("%q is not between 1MiB and 5GiB", d.Packs.Size)
		}
		return fmt.Errorf("config: storage.dedup.packs.size: %w", err)
	}
	if r := d.Metadata.Redis; r != nil {
		if d.Metadata.Path != "" {
			return fmt.Errorf("config: storage.dedup.metadata: give path or redis, not both")
		}
	}
	if _, err := ParseBytes(d.Cache.Preconstruct.Size); err != nil {
		return fmt.Errorf("config: storage.dedup.cache.preconstruct.size: %w", err)
	}
	if _, err := ParseBytes(d.Cache.Prefetch.Size); err != nil {
		return fmt.Errorf("config: storage.dedup.cache.prefetch.size: %w", err)
	}
	return nil
}

// Active reports whether dedup is on for any repository.
func (d *Dedup) Active() bool {
	if d.Mode != "off" {
		return true
	}
	for _, m := range d.Repositories {
		if m != "off" {
			return true
		}
	}
	return false
}

// byteUnits are the suffixes ParseBytes accepts, longest first.
var byteUnits = []struct {
	suffix string
	mult   int64
}{
	{"TiB", 1 << 40}, {"GiB", 1 << 30}, {"MiB", 1 << 20}, {"KiB", 1 << 10},
	{"TB", 1e12}, {"GB", 1e9}, {"MB", 1e6}, {"KB", 1e3}, {"kB", 1e3},
	{"B", 1},
}

// ParseBytes reads a size such as 512MiB, 2GB or 1048576.
func ParseBytes(s string) (int64, error) {
	s = strings.TrimSpace(s)
	mult := int64(1)
	num := s
	for _, u := range byteUnits {
		if n, ok := strings.CutSuffix(s, u.suffix); ok {
			num, mult = strings.TrimSpace(n), u.mult
			break
		}
	}
	n, err := strconv.ParseInt(num, 10, 64)
	if err != nil || n < 0 || (n > 0 && mult > (1<<62)/n) {
		return 0, fmt.Errorf("%q is not a size such as 512MiB or 10GiB", s)
	}
	return n * mult, nil
}
