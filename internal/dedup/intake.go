package dedup

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/opencontainers/go-digest"

	"github.com/cairn-registry/cairn/internal/layout"
	"github.com/cairn-registry/cairn/internal/storage/driver"
)

// Deferred intake. A pushed image's layers are recorded in the metadata
// store (admit) by a background task; when that fails (the metadata store
// is down, or the intake queue is full) the image is written to storage
// instead (layout.DedupIntake: the manifest's digest, its layers and
// mode) and admitted later: this node retries every intakeRetry while it
// has deferred any, and every node drains all records on each scan, so a
// node that died before its retry loses nothing. A record is deleted only
// once admitted; admitting twice is harmless.

// intakeRetry is how soon a node retries the intake it deferred.
const intakeRetry = 10 * time.Second

// intakeRecord is the stored form of an intakeJob.
type intakeRecord struct {
	Layers []digest.Digest `json:"layers"`
	Mode   Mode            `json:"mode"`
}

// deferIntake stores j for a later admission. It runs when the metadata
// store failed, so it touches only storage.
func (w *Worker) deferIntake(ctx context.Context, j intakeJob, cause error) {
	b, err := json.Marshal(intakeRecord{Layers: j.layers, Mode: j.mode})
	if err == nil {
		err = w.d.PutContent(ctx, layout.DedupIntake(j.manifest), b)
	}
	if err != nil {
		w.log.Error("dedup: pushed image neither recorded nor deferred: run `cairn dedup run` to catch up", "manifest", j.manifest, "cause", cause, "err", err)
		return
	}
	w.deferred.Store(true)
	w.log.Warn("dedup: pushed image deferred: its layers are recorded once the metadata store answers", "manifest", j.manifest, "cause", cause)
}

// retryIntake drains the deferred intake if this node deferred any. Once
// the metadata store answers again it is checked against the storage at
// once: a Redis that restarted without persistence came back empty.
func (w *Worker) retryIntake(ctx context.Context) error {
	if !w.deferred.Load() {
		return nil
	}
	if err := w.drainIntake(ctx); err != nil {
		return err
	}
	if w.recovered != nil {
		return w.recovered(ctx)
	}
	return nil
}

// drainIntake admits every deferred image and deletes its record; one that
// fails again stays for the next pass.
func (w *Worker) drainIntake(ctx context.Context) error {
	paths, err := w.d.List(ctx, layout.DedupIntakeDir)
	if errors.Is(err, driver.ErrNotFound) || (err == nil && len(paths) == 0) {
		w.deferred.Store(false)
		return nil
	}
	if err != nil {
		return fmt.Errorf("dedup: listing deferred intake: %w", err)
	}
	var failed error
	for _, p := range paths {
		m, ok := layout.ParseDedupIntake(p)
		if !ok {
			continue
		}
		b, err := w.d.GetContent(ctx, p)
		if errors.Is(err, driver.ErrNotFound) {
			continue // another node admitted it
		}
		var rec intakeRecord
		if err == nil && json.Unmarshal(b, &rec) != nil {
			// Not ours to admit: dropped, and said so.
			w.log.Error("dedup: dropping a deferred intake record that does not parse", "path", p)
			rec, err = intakeRecord{}, nil
		} else if err == nil {
			err = w.admit(ctx, intakeJob{manifest: m, layers: rec.Layers, mode: rec.Mode})
		}
		if err == nil {
			_, err = w.d.DeleteFiles(ctx, []string{p})
		}
		if err != nil {
			failed = fmt.Errorf("dedup: deferred intake of %s: %w", m, err)
			continue
		}
		w.log.Info("dedup: deferred image recorded", "manifest", m, "layers", len(rec.Layers))
	}
	if failed == nil {
		w.deferred.Store(false)
	}
	return failed
}

// DeferredIntake counts the pushed images waiting in storage to be recorded
// (statistics: work the metadata store does not know of yet).
func (sc *Statistics) DeferredIntake(ctx context.Context) (int64, error) {
	paths, err := sc.d.List(ctx, layout.DedupIntakeDir)
	if errors.Is(err, driver.ErrNotFound) {
		return 0, nil
	}
	return int64(len(paths)), err
}
