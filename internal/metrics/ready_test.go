package metrics

import (
	"context"
	"errors"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cairn-registry/cairn/internal/storage/driver"
	"github.com/cairn-registry/cairn/internal/storage/driver/inmemory"
)

// refusing is a store whose writes fail as a read-only mount's do while
// readOnly is set; it counts the writes tried.
type refusing struct {
	driver.Driver
	readOnly atomic.Bool
	puts     atomic.Int64
}

func (r *refusing) PutContent(ctx context.Context, p string, b []byte) error {
	r.puts.Add(1)
	if r.readOnly.Load() {
		return driver.Refused(driver.ErrReadOnly, errors.New("open "+p+": read-only file system"))
	}
	return r.Driver.PutContent(ctx, p, b)
}

// StorageWritable writes a probe, removes it, names a refusal, and probes
// at most once per interval (the verdict is kept meanwhile).
func TestStorageWritable(t *testing.T) {
	ctx := context.Background()
	d := &refusing{Driver: inmemory.New()}
	check := StorageWritable(d, time.Hour)
	if err := check(ctx); err != nil {
		t.Fatalf("writable store: %v", err)
	}
	var left []string
	d.Walk(ctx, "/", func(fi driver.FileInfo) error {
		if !fi.IsDir {
			left = append(left, fi.Path)
		}
		return nil
	})
	if len(left) != 0 {
		t.Errorf("the probe left %v", left)
	}
	d.readOnly.Store(true)
	if err := check(ctx); err != nil || d.puts.Load() != 1 {
		t.Errorf("within the interval: %v after %d writes; want the kept verdict, one write", err, d.puts.Load())
	}

	d = &refusing{Driver: inmemory.New()}
	d.readOnly.Store(true)
	check = StorageWritable(d, time.Hour)
	err := check(ctx)
	if !errors.Is(err, driver.ErrReadOnly) || !strings.Contains(err.Error(), "read-only") {
		t.Errorf("read-only store: %v", err)
	}
}
