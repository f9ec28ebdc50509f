package gcs

import (
	"context"
	"errors"
	"fmt"
	"sync"

	"cloud.google.com/go/storage"
)

// DeleteFiles implements driver.Driver. GCS's JSON API has no multi-object
// delete worth having (a batch request is still one delete per object, with
// its own per-object quota), so each path gets one DELETE request, many in
// flight at once, none preceded by a listing or a stat. A 404 means the file
// is gone, which is what the caller wants.
func (d *Driver) DeleteFiles(ctx context.Context, paths []string) (int, error) {
	var errs []error
	keys := make([]string, 0, len(paths))
	of := make([]int, 0, len(paths)) // of[i] is the index in paths of keys[i]
	for i, p := range paths {
		key, err := d.fileKey(p)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		keys = append(keys, key)
		of = append(of, i)
	}
	res, notTried := d.deleteObjects(ctx, keys)
	n := 0
	for i, err := range res {
		if err == nil || errors.Is(err, storage.ErrObjectNotExist) {
			n++
			continue
		}
		errs = append(errs, fmt.Errorf("gcs: delete %s: %w", paths[of[i]], err))
	}
	if notTried > 0 {
		errs = append(errs, fmt.Errorf("gcs: %d of %d paths not deleted: %w", notTried, len(keys), ctx.Err()))
	}
	return n, errors.Join(errs...)
}

// deleteObjects deletes keys with one request each, concurrently, with at
// most cap(d.deleteSlots) requests in flight across the whole driver. res[i]
// is nil when keys[i] was deleted, storage.ErrObjectNotExist when there was
// no such object, and the failure otherwise. When ctx ends, the keys not yet
// started are left alone: res covers only the ones tried and notTried counts
// the rest.
func (d *Driver) deleteObjects(ctx context.Context, keys []string) (res []error, notTried int) {
	res = make([]error, len(keys))
	var wg sync.WaitGroup
	started := 0
slots:
	for ; started < len(keys); started++ {
		// Checked first: select picks at random among ready cases.
		if ctx.Err() != nil {
			break
		}
		select {
		case d.deleteSlots <- struct{}{}:
		case <-ctx.Done():
			break slots
		}
		i := started
		wg.Go(func() {
			defer func() { <-d.deleteSlots }()
			res[i] = d.bucket.Object(keys[i]).Delete(ctx)
		})
	}
	wg.Wait()
	return res[:started], len(keys) - started
}
