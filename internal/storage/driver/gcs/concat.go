package gcs

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"strconv"
	"sync"

	"cloud.google.com/go/storage"

	"github.com/cairn-registry/cairn/internal/storage/driver"
)

var _ driver.Concatenator = (*Driver)(nil)

const (
	// maxComposeSources is how many objects one compose request joins.
	maxComposeSources = 32
	// concatInfix names the intermediate objects of a join of more than
	// maxComposeSources objects; like partInfix, List and Walk never show it.
	concatInfix = "~concat~"
	// concatStats bounds the metadata reads of one Concat in flight.
	concatStats = 32
)

// Concat implements driver.Concatenator by composing objects on the server.
// GCS composes whole objects only, so each range must be one (offset 0, its
// object's size, checked with a metadata read per source, in parallel);
// anything else, or more than 1024 components in all, is ErrUnsupported.
// The sources are named at the generations read, so a source replaced
// meanwhile fails the call. More than 32 sources are composed in a tree
// through intermediate objects, deleted at the end.
func (d *Driver) Concat(ctx context.Context, dst string, srcs []driver.FileRange) error {
	dstKey, err := d.fileKey(dst)
	if err != nil {
		return err
	}
	var ranges []driver.FileRange
	for _, s := range srcs {
		if _, err := d.fileKey(s.Path); err != nil {
			return err
		}
		if s.Offset != 0 {
			return fmt.Errorf("gcs: concat %s: %s from %d is not a whole object: %w", dst, s.Path, s.Offset, errors.ErrUnsupported)
		}
		if s.Length > 0 {
			ranges = append(ranges, s)
		}
	}
	if len(ranges) == 0 {
		return d.PutContent(ctx, dst, nil)
	}
	objs, parts, err := d.concatSources(ctx, dst, ranges)
	if err != nil {
		return err
	}
	var temps []string
	defer func() {
		for _, k := range temps {
			// Best effort: an intermediate object left behind is
			// invisible to List and Walk, like an append's part.
			_ = d.bucket.Object(k).Delete(context.WithoutCancel(ctx))
		}
	}()
	for len(objs) > maxComposeSources {
		var next []*storage.ObjectHandle
		for i := 0; i < len(objs); i += maxComposeSources {
			key := dstKey + concatInfix + rand.Text()
			temps = append(temps, key)
			attrs, err := d.bucket.Object(key).ComposerFrom(objs[i:min(i+maxComposeSources, len(objs))]...).Run(ctx)
			if err != nil {
				return fail("concat", dst, err)
			}
			next = append(next, d.bucket.Object(key).Generation(attrs.Generation))
		}
		objs = next
	}
	c := d.bucket.Object(dstKey).ComposerFrom(objs...)
	c.ContentType = contentType
	c.Metadata = map[string]string{componentsMeta: strconv.FormatInt(parts, 10)}
	if _, err := c.Run(ctx); err != nil {
		return fail("concat", dst, err)
	}
	return nil
}

// concatSources reads the metadata of each range's object and returns the
// objects at the generations read and their components in all. A range
// shorter than its object is ErrUnsupported (it is not a whole object); a
// longer one is an error.
func (d *Driver) concatSources(ctx context.Context, dst string, ranges []driver.FileRange) ([]*storage.ObjectHandle, int64, error) {
	objs := make([]*storage.ObjectHandle, len(ranges))
	comps := make([]int64, len(ranges))
	errs := make([]error, len(ranges))
	sem := make(chan struct{}, concatStats)
	var wg sync.WaitGroup
	for i, r := range ranges {
		sem <- struct{}{}
		wg.Go(func() {
			defer func() { <-sem }()
			key, _ := d.fileKey(r.Path)
			attrs, err := d.bucket.Object(key).Attrs(ctx)
			switch {
			case err != nil:
				errs[i] = fail("concat", r.Path, err)
			case attrs.Size > r.Length:
				errs[i] = fmt.Errorf("gcs: concat %s: %s holds %d bytes, more than the %d asked for: %w", dst, r.Path, attrs.Size, r.Length, errors.ErrUnsupported)
			case attrs.Size < r.Length:
				errs[i] = fmt.Errorf("gcs: concat %s: %s holds %d bytes, want %d", dst, r.Path, attrs.Size, r.Length)
			default:
				objs[i] = d.bucket.Object(key).Generation(attrs.Generation)
				comps[i] = components(attrs)
			}
		})
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		return nil, 0, err
	}
	var parts int64
	for _, c := range comps {
		parts += c
	}
	if parts > d.maxComponents {
		return nil, 0, fmt.Errorf("gcs: concat %s: %d components, over GCS's %d: %w", dst, parts, d.maxComponents, errors.ErrUnsupported)
	}
	return objs, parts, nil
}
