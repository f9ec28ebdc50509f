package metrics

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/google/uuid"

	"github.com/cairn-registry/cairn/internal/layout"
	"github.com/cairn-registry/cairn/internal/storage/driver"
)

// DefaultProbeEvery is how often StorageWritable writes its probe at most.
const DefaultProbeEvery = 10 * time.Second

// StorageWritable returns a readiness check that proves the store takes
// writes: it writes a small probe object (layout.ReadyProbe, named for
// this process) and deletes it. Listing the root (StorageReady) passes on
// a read-only mount, a full disk or a bucket without write permission,
// where the first push would fail. On an object store a probe is two
// requests, so one runs at most every `every` (DefaultProbeEvery when
// <= 0) and its verdict is kept until then; callers during a probe wait
// for it. A refusal is named (read-only, no space, permission denied).
func StorageWritable(d driver.Driver, every time.Duration) func(ctx context.Context) error {
	if every <= 0 {
		every = DefaultProbeEvery
	}
	p := &writeProbe{d: d, every: every, path: layout.ReadyProbe(uuid.NewString())}
	return p.check
}

type writeProbe struct {
	d     driver.Driver
	every time.Duration
	path  string

	mu   sync.Mutex // held during a probe: one at a time
	at   time.Time  // of the last verdict; zero: none yet
	last error
}

func (p *writeProbe) check(ctx context.Context) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if !p.at.IsZero() && time.Since(p.at) < p.every {
		return p.last
	}
	err := p.probe(ctx)
	if ctx.Err() != nil && err != nil {
		// The caller gave up (its timeout): no verdict on the store.
		return err
	}
	p.at, p.last = time.Now(), err
	return err
}

func (p *writeProbe) probe(ctx context.Context) error {
	err := p.d.PutContent(ctx, p.path, []byte("cairn readiness probe\n"))
	if err == nil {
		err = p.d.Delete(ctx, p.path)
		if errors.Is(err, driver.ErrNotFound) {
			err = nil
		}
	}
	if err == nil {
		return nil
	}
	cause := "cannot be written"
	switch {
	case errors.Is(err, driver.ErrReadOnly):
		cause = "is read-only"
	case errors.Is(err, driver.ErrNoSpace):
		cause = "has no space left"
	case errors.Is(err, driver.ErrPermission):
		cause = "refuses writes (permission denied)"
	}
	return fmt.Errorf("storage (%s) %s: %w", p.d.Name(), cause, err)
}
