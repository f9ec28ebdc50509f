package s3

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/aws/aws-sdk-go-v2/service/s3/types"

	"github.com/cairn-registry/cairn/internal/repeat"
)

// DeleteError is a path a DeleteObjects response reports as not deleted.
type DeleteError struct {
	Path    string
	Code    string // S3's error code, e.g. AccessDenied
	Message string
}

func (e *DeleteError) Error() string {
	return fmt.Sprintf("%s: delete %s: %s: %s", driverName, e.Path, e.Code, e.Message)
}

// BatchError is a DeleteObjects request that failed as a whole (after the
// SDK's retries): none of its Paths is known to be deleted.
type BatchError struct {
	Paths []string
	Err   error
}

func (e *BatchError) Error() string {
	return fmt.Sprintf("%s: deleting %d paths (first %s): %v", driverName, len(e.Paths), e.Paths[0], e.Err)
}

func (e *BatchError) Unwrap() error { return e.Err }

// DeleteFiles deletes the files at paths with DeleteObjects requests of up to
// deletebatchsize keys, maxdeleteconcurrency of them in flight, and never a
// listing or HEAD first: S3 deletes a missing key without complaint. The
// per-key errors of each response are returned, and keys reported as
// throttled are sent again after a backoff.
func (d *Driver) DeleteFiles(ctx context.Context, paths []string) (int, error) {
	if err := ctx.Err(); err != nil {
		return 0, err
	}
	var errs []error
	keys := make([]string, 0, len(paths))
	for _, p := range paths {
		if err := checkFile(p); err != nil {
			errs = append(errs, err)
			continue
		}
		keys = append(keys, d.key(p))
	}
	n, err := d.deleteKeys(ctx, keys)
	return n, errors.Join(append(errs, err)...)
}

// deleteKeys deletes keys in concurrent batches and returns how many are gone.
func (d *Driver) deleteKeys(ctx context.Context, keys []string) (int, error) {
	var (
		mu      sync.Mutex
		deleted int
		errs    []error
		wg      sync.WaitGroup
	)
	sem := make(chan struct{}, d.deleteConcurrency)
	for start := 0; start < len(keys); start += d.deleteBatchSize {
		select {
		case sem <- struct{}{}:
		case <-ctx.Done():
			mu.Lock()
			errs = append(errs, &BatchError{Paths: d.pathsOf(keys[start:]), Err: ctx.Err()})
			mu.Unlock()
			start = len(keys) // stop issuing batches
			continue
		}
		batch := keys[start:min(start+d.deleteBatchSize, len(keys))]
		wg.Go(func() {
			defer func() { <-sem }()
			n, err := d.deleteBatch(ctx, batch)
			mu.Lock()
			defer mu.Unlock()
			deleted += n
			if err != nil {
				errs = append(errs, err)
			}
		})
	}
	wg.Wait()
	return deleted, errors.Join(errs...)
}

// retryableKeyCodes are per-key errors worth sending the key again for.
var retryableKeyCodes = map[string]bool{
	"SlowDown": true, "InternalError": true, "ServiceUnavailable": true, "RequestTimeout": true,
}

// deleteBatch sends one DeleteObjects request for keys (at most 1000), and
// again for the keys its response reports as throttled. A repeated key is
// sent once and counted for each time it is listed. Its own retry, not the
// SDK's nor repeat.Retry: the request succeeds while single keys fail, so
// only those keys go again, after a jittered backoff.
func (d *Driver) deleteBatch(ctx context.Context, keys []string) (int, error) {
	count := make(map[string]int, len(keys))
	ids := make([]types.ObjectIdentifier, 0, len(keys))
	for _, k := range keys {
		if count[k] == 0 {
			ids = append(ids, types.ObjectIdentifier{Key: aws.String(k)})
		}
		count[k]++
	}
	deleted := 0
	var errs []error
	for attempt := 1; ; attempt++ {
		out, err := d.client.DeleteObjects(ctx, &s3.DeleteObjectsInput{
			Bucket: &d.bucket,
			Delete: &types.Delete{Objects: ids, Quiet: aws.Bool(true)},
		}, withContentMD5)
		if err != nil {
			errs = append(errs, &BatchError{Paths: d.idPaths(ids, count), Err: err})
			return deleted, errors.Join(errs...)
		}
		var retry []types.ObjectIdentifier
		gone := 0
		for _, id := range ids {
			gone += count[*id.Key]
		}
		for _, e := range out.Errors {
			k, code := aws.ToString(e.Key), aws.ToString(e.Code)
			c := count[k]
			switch {
			case c == 0:
				continue // not a key of this request
			case code == "NoSuchKey":
				continue // some stores report it; gone is gone
			case retryableKeyCodes[code] && attempt < d.keyRetry.attempts:
				retry = append(retry, types.ObjectIdentifier{Key: e.Key})
			default:
				errs = append(errs, &DeleteError{Path: d.pathOf(k), Code: code, Message: aws.ToString(e.Message)})
			}
			gone -= c
		}
		deleted += gone
		if len(retry) == 0 {
			return deleted, errors.Join(errs...)
		}
		if err := repeat.Sleep(ctx, d.keyRetry.delay(attempt, rand.Float64())); err != nil {
			errs = append(errs, &BatchError{Paths: d.idPaths(retry, count), Err: err})
			return deleted, errors.Join(errs...)
		}
		ids = retry
	}
}

func (d *Driver) pathsOf(keys []string) []string {
	out := make([]string, len(keys))
	for i, k := range keys {
		out[i] = d.pathOf(k)
	}
	return out
}

func (d *Driver) idPaths(ids []types.ObjectIdentifier, count map[string]int) []string {
	var out []string
	for _, id := range ids {
		for range count[*id.Key] {
			out = append(out, d.pathOf(*id.Key))
		}
	}
	return out
}
