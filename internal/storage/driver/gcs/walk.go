package gcs

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"cloud.google.com/go/storage"
	"google.golang.org/api/iterator"

	"github.com/cairn-registry/cairn/internal/storage/driver"
)

// Walk implements driver.Driver with one flat listing (no delimiter): keys
// arrive in lexical order, which is the walk's order, and each directory is
// synthesised just before the first key below it. A directory skipped with
// ErrSkipDir is not paged through: when a page ends inside it, the listing
// resumes after it.
func (d *Driver) Walk(ctx context.Context, path string, fn driver.WalkFn) error {
	prefix, err := d.dirPrefix(path)
	if err != nil {
		return err
	}
	base := path // entries are base + "/" + rel
	if path == "/" {
		base = ""
	}
	q := &storage.Query{Prefix: prefix}
	if err := q.SetAttrSelection([]string{"Name", "Size", "Updated", "Created"}); err != nil {
		return fmt.Errorf("gcs: walk %s: %w", path, err)
	}
	var (
		found bool
		open  string // rel directory whose ancestors and itself were visited
		skip  string // rel prefix (with "/") being skipped, or ""
	)
	call := func(fi driver.FileInfo) error {
		if err := ctx.Err(); err != nil {
			return err
		}
		return fn(fi)
	}
	for {
		it := d.bucket.Objects(ctx, q)
		it.PageInfo().MaxSize = d.pageSize
		resumed := false
		for !resumed {
			attrs, err := it.Next()
			if errors.Is(err, iterator.Done) {
				if !found && path != "/" {
					return driver.PathNotFoundError{Path: path, Driver: driverName}
				}
				return nil
			}
			if err != nil {
				return fail("walk", path, err)
			}
			p := d.keyPath(attrs.Name)
			if p == "" {
				continue
			}
			found = true
			rel := p[len(base)+1:]
			if skip != "" && strings.HasPrefix(rel, skip) {
				if pi := it.PageInfo(); pi.Remaining() == 0 && pi.Token != "" {
					// '0' follows '/': the first key after the skipped directory.
					q.StartOffset = prefix + skip[:len(skip)-1] + "0"
					resumed = true
				}
				continue
			}
			skip = ""
			dir := ""
			if i := strings.LastIndexByte(rel, '/'); i >= 0 {
				dir = rel[:i]
			}
			// Visit the directories between the last one visited and this key.
			skipped := false
			for j := commonDir(open, dir) + 1; j <= len(dir); j++ {
				if j < len(dir) && dir[j] != '/' {
					continue
				}
				open = dir[:j]
				err := call(driver.FileInfo{Path: base + "/" + open, IsDir: true})
				if errors.Is(err, driver.ErrSkipDir) {
					skip, skipped = open+"/", true
					break
				}
				if err != nil {
					return err
				}
			}
			if skipped {
				continue
			}
			open = dir
			err = call(fileInfo(p, attrs))
			if errors.Is(err, driver.ErrSkipDir) {
				// A file's ErrSkipDir skips the rest of its directory.
				if dir == "" {
					return nil
				}
				skip = dir + "/"
				continue
			}
			if err != nil {
				return err
			}
		}
	}
}

// commonDir returns the length of the leading whole segments that the
// relative directories a and b share ("" is the walk root): 0 when none, so
// that commonDir(a, b)+1 is where b's first segment not in a ends at the
// earliest.
func commonDir(a, b string) int {
	n := 0
	for i := 0; i <= len(a) && i <= len(b); i++ {
		endA := i == len(a) || a[i] == '/'
		endB := i == len(b) || b[i] == '/'
		if endA && endB {
			n = i
			continue
		}
		if endA || endB || a[i] != b[i] {
			break
		}
	}
	return n
}

// Delete implements driver.Driver: the object at path, if any, and every key
// below it, deleted page by page as the listing goes.
func (d *Driver) Delete(ctx context.Context, path string) error {
	prefix, err := d.dirPrefix(path)
	if err != nil {
		return err
	}
	q := &storage.Query{Prefix: prefix}
	if err := q.SetAttrSelection([]string{"Name"}); err != nil {
		return fmt.Errorf("gcs: delete %s: %w", path, err)
	}
	it := d.bucket.Objects(ctx, q)
	it.PageInfo().MaxSize = d.pageSize
	batch := make([]string, 0, d.pageSize+1)
	if path != "/" {
		batch = append(batch, strings.TrimSuffix(prefix, "/"))
	}
	var (
		deleted int
		errs    []error
	)
	flush := func() {
		res, notTried := d.deleteObjects(ctx, batch)
		for i, err := range res {
			switch {
			case err == nil:
				deleted++
			case !errors.Is(err, storage.ErrObjectNotExist):
				errs = append(errs, fmt.Errorf("gcs: delete %s: %w", batch[i], err))
			}
		}
		if notTried > 0 {
			errs = append(errs, fmt.Errorf("gcs: delete %s: %d objects not deleted: %w", path, notTried, ctx.Err()))
		}
		batch = batch[:0]
	}
	for len(errs) == 0 {
		attrs, err := it.Next()
		if errors.Is(err, iterator.Done) {
			break
		}
		if err != nil {
			errs = append(errs, fail("delete: list", path, err))
			break
		}
		if batch = append(batch, attrs.Name); len(batch) >= d.pageSize {
			flush()
		}
	}
	if len(batch) > 0 && len(errs) == 0 {
		flush()
	}
	if len(errs) > 0 {
		return errors.Join(errs...)
	}
	if deleted == 0 {
		return driver.PathNotFoundError{Path: path, Driver: driverName}
	}
	return nil
}
