package config

import (
	"fmt"
	"time"
)

// GC configures the garbage collector that `cairn serve` runs on a schedule
// (storage.gc, cairn's own section); `cairn gc` reads the same keys.
type GC struct {
	// Enabled runs GC inside cairn serve every Interval (default false:
	// deleting data is opt-in).
	Enabled bool `yaml:"enabled"`
	// Interval between scheduled runs (default 24h).
	Interval time.Duration `yaml:"interval"`
	// Delay: nothing modified less than Delay before a run began is
	// deleted (default 1h); 0s is for a registry no one writes to.
	Delay time.Duration `yaml:"delay"`
	// DeleteUntagged deletes manifests no tag reaches (default false).
	DeleteUntagged bool `yaml:"deleteuntagged"`
	// BatchSize is the number of paths per bulk delete (default 1000).
	BatchSize int `yaml:"batchsize"`
	// Concurrency bounds manifest reads and bulk deletes in flight
	// (default 8).
	Concurrency int `yaml:"concurrency"`
}

// Defaults of storage.gc.
const (
	defaultGCInterval    = 24 * time.Hour
	defaultGCDelay       = time.Hour
	defaultGCBatchSize   = 1000
	defaultGCConcurrency = 8
	maxGCBatchSize       = 100000
	maxGCConcurrency     = 256
)

func defaultGC() GC {
	return GC{Interval: defaultGCInterval, Delay: defaultGCDelay, BatchSize: defaultGCBatchSize, Concurrency: defaultGCConcurrency}
}

func (g *GC) validate() error {
	switch {
	case g.Interval <= 0:
		return fmt.Errorf("config: storage.gc.interval: must be positive, not %s", g.Interval)
	case g.Delay < 0:
		return fmt.Errorf("config: storage.gc.delay: must not be negative, not %s", g.Delay)
	case g.BatchSize < 1 || g.BatchSize > maxGCBatchSize:
		return fmt.Errorf("config: storage.gc.batchsize: %d is not between 1 and %d", g.BatchSize, maxGCBatchSize)
	case g.Concurrency < 1 || g.Concurrency > maxGCConcurrency:
		return fmt.Errorf("config: storage.gc.concurrency: %d is not between 1 and %d", g.Concurrency, maxGCConcurrency)
	}
	return nil
}
