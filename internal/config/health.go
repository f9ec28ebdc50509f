package config

import (
	"fmt"
	"net/http"
	"time"
)

// Health configures distribution's periodic health checks. While any check
// fails (Threshold times in a row, where it has one), the API's /v2/
// answers 503 and the debug listener's /readyz and /debug/health report
// the failure; each recovers when its check passes again.
type Health struct {
	StorageDriver StorageDriverCheck `yaml:"storagedriver"`
	File          []FileCheck        `yaml:"file"`
	HTTP          []HTTPCheck        `yaml:"http"`
	TCP           []TCPCheck         `yaml:"tcp"`
}

// StorageDriverCheck lists the storage root every Interval.
type StorageDriverCheck struct {
	Enabled   bool          `yaml:"enabled"`
	Interval  time.Duration `yaml:"interval"`  // default 10s
	Threshold int           `yaml:"threshold"` // failures in a row that count (default 1)
}

// FileCheck fails while File exists: creating it takes the registry out of
// rotation.
type FileCheck struct {
	File     string        `yaml:"file"`
	Interval time.Duration `yaml:"interval"`
}

// HTTPCheck sends HEAD to URI and fails on another status than StatusCode.
type HTTPCheck struct {
	URI        string              `yaml:"uri"`
	Headers    map[string][]string `yaml:"headers"`
	StatusCode int                 `yaml:"statuscode"` // default 200
	Timeout    time.Duration       `yaml:"timeout"`    // default 1s
	Interval   time.Duration       `yaml:"interval"`
	Threshold  int                 `yaml:"threshold"`
}

// TCPCheck connects to Addr and fails when it cannot.
type TCPCheck struct {
	Addr      string        `yaml:"addr"`
	Timeout   time.Duration `yaml:"timeout"` // default 1s
	Interval  time.Duration `yaml:"interval"`
	Threshold int           `yaml:"threshold"`
}

// Defaults of the health checks, as distribution's.
const (
	defaultCheckInterval = 10 * time.Second
	defaultCheckTimeout  = time.Second
)

func (c *StorageDriverCheck) setDefaults() { c.Interval = defaultCheckInterval }
func (c *FileCheck) setDefaults()          { c.Interval = defaultCheckInterval }
func (c *HTTPCheck) setDefaults() {
	c.Interval, c.Timeout, c.StatusCode = defaultCheckInterval, defaultCheckTimeout, http.StatusOK
}
func (c *TCPCheck) setDefaults() { c.Interval, c.Timeout = defaultCheckInterval, defaultCheckTimeout }

func (h *Health) validate() error {
	positive := func(key string, d time.Duration) error {
		if d <= 0 {
			return fmt.Errorf("config: health.%s: must be positive, not %s", key, d)
		}
		return nil
	}
	if h.StorageDriver.Enabled {
		if err := positive("storagedriver.interval", h.StorageDriver.Interval); err != nil {
			return err
		}
	}
	for i, f := range h.File {
		if f.File == "" {
			return fmt.Errorf("config: health.file[%d].file: required", i)
		}
		if err := positive(fmt.Sprintf("file[%d].interval", i), f.Interval); err != nil {
			return err
		}
	}
	for i, c := range h.HTTP {
		if c.URI == "" {
			return fmt.Errorf("config: health.http[%d].uri: required", i)
		}
		if err := positive(fmt.Sprintf("http[%d].interval", i), c.Interval); err != nil {
			return err
		}
		if err := positive(fmt.Sprintf("http[%d].timeout", i), c.Timeout); err != nil {
			return err
		}
	}
	for i, c := range h.TCP {
		if c.Addr == "" {
			return fmt.Errorf("config: health.tcp[%d].addr: required", i)
		}
		if err := positive(fmt.Sprintf("tcp[%d].interval", i), c.Interval); err != nil {
			return err
		}
		if err := positive(fmt.Sprintf("tcp[%d].timeout", i), c.Timeout); err != nil {
			return err
		}
	}
	return nil
}
