package azure

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"sync"
	"sync/atomic"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore"
)

const (
	// maxBatch is the blob batch API's limit of sub-requests per request.
	maxBatch = 256
	// batchesInFlight bounds concurrent batch requests: each carries 256
	// deletes, so a few already keep the service busy without throttling.
	batchesInFlight = 4
)

// Auto-mode states of the batch API (Driver.batch).
const (
	batchUnknown int32 = iota
	batchWorks
	batchRefused
)

// target is a file to delete: its path (for errors) and blob name.
type target struct{ path, name string }

// DeleteFiles implements driver.Driver. Invalid paths (and "/") are errors;
// valid ones are deleted without a listing, by blob batch requests of up to
// 256 deletes or by parallel single deletes. A blob that is not there counts
// as deleted.
func (d *Driver) DeleteFiles(ctx context.Context, paths []string) (int, error) {
	var errs []error
	ts := make([]target, 0, len(paths))
	for _, p := range paths {
		if err := d.filePath(p); err != nil {
			errs = append(errs, err)
			continue
		}
		ts = append(ts, target{p, d.blobName(p)})
	}
	n, err := d.deleteTargets(ctx, ts)
	if err != nil {
		errs = append(errs, err)
	}
	return n, errors.Join(errs...)
}

// deleteNames deletes blobs by name (from a listing below the root).
func (d *Driver) deleteNames(ctx context.Context, names []string) (int, error) {
	ts := make([]target, len(names))
	for i, name := range names {
		ts[i] = target{d.pathOf(name), name}
	}
	return d.deleteTargets(ctx, ts)
}

func (d *Driver) deleteTargets(ctx context.Context, ts []target) (int, error) {
	if len(ts) == 0 {
		return 0, nil
	}
	if err := ctx.Err(); err != nil {
		return 0, failAll(ts, err)
	}
	switch {
	case len(ts) == 1, // a batch of one saves no request
		d.batchMode == batchFalse,
		d.batchMode == batchAuto && d.batch.Load() == batchRefused:
		return d.deleteSingles(ctx, ts)
	case d.batchMode == batchAuto && d.batch.Load() == batchUnknown:
		// The first batch goes alone: if the service refuses it, the rest
		// go as single deletes instead of failing several batches at once.
		first := ts[:min(len(ts), maxBatch)]
		n, refused, err := d.deleteBatch(ctx, first)
		if refused {
			d.batch.Store(batchRefused)
			return d.deleteSingles(ctx, ts)
		}
		if err == nil || n > 0 {
			d.batch.CompareAndSwap(batchUnknown, batchWorks)
		}
		m, err2 := d.deleteBatches(ctx, ts[len(first):])
		return n + m, errors.Join(err, err2)
	default:
		return d.deleteBatches(ctx, ts)
	}
}

// deleteBatches deletes ts in batches, a few requests in flight.
func (d *Driver) deleteBatches(ctx context.Context, ts []target) (int, error) {
	if len(ts) == 0 {
		return 0, nil
	}
	var (
		next    atomic.Int64 // index of the next batch
		deleted atomic.Int64
		mu      sync.Mutex
		errs    []error
		wg      sync.WaitGroup
	)
	batches := (len(ts) + maxBatch - 1) / maxBatch
	for range min(batches, batchesInFlight) {
		wg.Go(func() {
			for {
				i := int(next.Add(1) - 1)
				if i >= batches {
					return
				}
				chunk := ts[i*maxBatch : min(len(ts), (i+1)*maxBatch)]
				if err := ctx.Err(); err != nil {
					mu.Lock()
					errs = append(errs, failAll(chunk, err))
					mu.Unlock()
					continue
				}
				n, refused, err := d.deleteBatch(ctx, chunk)
				if refused && d.batchMode == batchAuto {
					// Refused after batches worked (a proxy, a
					// changed account): these go one by one.
					n, err = d.deleteSingles(ctx, chunk)
				}
				deleted.Add(int64(n))
				if err != nil {
					mu.Lock()
					errs = append(errs, err)
					mu.Unlock()
				}
			}
		})
	}
	wg.Wait()
	return int(deleted.Load()), errors.Join(errs...)
}

// deleteBatch sends one batch request. refused reports that the service
// answered the request as a whole with an error that says it does not serve
// blob batches here; then nothing in ts was deleted by it.
func (d *Driver) deleteBatch(ctx context.Context, ts []target) (n int, refused bool, err error) {
	bb, err := d.client.NewBatchBuilder()
	if err != nil {
		return 0, false, fmt.Errorf("%s: batch delete: %w", driverName, err)
	}
	for _, t := range ts {
		if err := bb.Delete(t.name, nil); err != nil {
			return 0, false, fmt.Errorf("%s: batch delete %s: %w", driverName, t.path, err)
		}
	}
	resp, err := d.client.SubmitBatch(ctx, bb, nil)
	if err != nil {
		return 0, batchRefusal(err), failAll(ts, fmt.Errorf("batch delete: %w", err))
	}
	answered := make([]bool, len(ts))
	var errs []error
	var retry []target
	for i, item := range resp.Responses {
		if item.ContentID != nil {
			i = *item.ContentID
		}
		if i < 0 || i >= len(ts) || answered[i] {
			continue
		}
		answered[i] = true
		switch {
		case item.Error == nil, isNotFound(item.Error):
			n++
		case retryable(item.Error):
			retry = append(retry, ts[i])
		default:
			errs = append(errs, fmt.Errorf("%s: delete %s: %w", driverName, ts[i].path, item.Error))
		}
	}
	for i, ok := range answered {
		if !ok {
			retry = append(retry, ts[i])
		}
	}
	// Throttled or unanswered sub-requests go again one by one, with the
	// client's retry policy behind each.
	if len(retry) > 0 {
		m, err := d.deleteSingles(ctx, retry)
		n += m
		errs = append(errs, err)
	}
	return n, false, errors.Join(errs...)
}

// batchRefusal reports a whole-batch failure that means "no blob batch
// here" (bad request, unknown resource or method, not implemented) rather
// than a failure single deletes would share (auth, throttling, network).
func batchRefusal(err error) bool {
	var re *azcore.ResponseError
	if !errors.As(err, &re) {
		return false
	}
	switch re.StatusCode {
	case http.StatusBadRequest, http.StatusNotFound, http.StatusMethodNotAllowed, http.StatusNotImplemented:
		return true
	}
	return false
}

// retryable reports a sub-request failure worth another try.
func retryable(err error) bool {
	var re *azcore.ResponseError
	if !errors.As(err, &re) {
		return false
	}
	switch re.StatusCode {
	case http.StatusRequestTimeout, http.StatusTooManyRequests, http.StatusInternalServerError,
		http.StatusBadGateway, http.StatusServiceUnavailable, http.StatusGatewayTimeout:
		return true
	}
	return false
}

// deleteSingles deletes ts one request each, up to maxDeletes in flight.
func (d *Driver) deleteSingles(ctx context.Context, ts []target) (int, error) {
	var (
		next    atomic.Int64
		deleted atomic.Int64
		mu      sync.Mutex
		errs    []error
		wg      sync.WaitGroup
	)
	for range min(len(ts), d.maxDeletes) {
		wg.Go(func() {
			for {
				i := int(next.Add(1) - 1)
				if i >= len(ts) {
					return
				}
				err := ctx.Err()
				if err == nil {
					_, err = d.client.NewBlobClient(ts[i].name).Delete(ctx, nil)
				}
				if err == nil || isNotFound(err) {
					deleted.Add(1)
					continue
				}
				mu.Lock()
				errs = append(errs, fmt.Errorf("%s: delete %s: %w", driverName, ts[i].path, err))
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	return int(deleted.Load()), errors.Join(errs...)
}

// failAll returns err for each of ts, naming its path: the contract wants
// every failed path reported, also when they failed together.
func failAll(ts []target, err error) error {
	errs := make([]error, len(ts))
	for i, t := range ts {
		errs[i] = fmt.Errorf("%s: delete %s: %w", driverName, t.path, err)
	}
	return errors.Join(errs...)
}
