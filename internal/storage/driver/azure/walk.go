package azure

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/Azure/azure-sdk-for-go/sdk/storage/azblob/container"

	"github.com/cairn-registry/cairn/internal/storage/driver"
)

// Walk implements driver.Driver with one flat listing (5000 names a page),
// not a listing per directory. Blob names come in lexical order, in which
// everything below a directory is contiguous, so each directory is reported
// just before its first descendant.
func (d *Driver) Walk(ctx context.Context, p string, fn driver.WalkFn) error {
	if !driver.ValidPath(p) {
		return d.invalid(p)
	}
	prefix := d.dirPrefix(p)
	pager := d.client.NewListBlobsFlatPager(&container.ListBlobsFlatOptions{Prefix: &prefix})
	w := walker{fn: fn, base: p}
	if p == "/" {
		w.base = ""
	}
	found := false
	for pager.More() {
		page, err := pager.NextPage(ctx)
		if err != nil {
			return d.fail("list", p, err)
		}
		for _, it := range page.Segment.BlobItems {
			if it.Name == nil {
				continue
			}
			found = true
			if err := ctx.Err(); err != nil {
				return fmt.Errorf("%s: walk %s: %w", driverName, p, err)
			}
			fi := driver.FileInfo{Path: d.pathOf(*it.Name)}
			if pr := it.Properties; pr != nil {
				if pr.ContentLength != nil {
					fi.Size = *pr.ContentLength
				}
				if pr.LastModified != nil {
					fi.ModTime = *pr.LastModified
				}
			}
			stop, err := w.visit(ctx, fi)
			if err != nil || stop {
				return err
			}
		}
	}
	if !found && p != "/" {
		return d.notFound(p)
	}
	return nil
}

// walker turns a sorted stream of file paths into Walk's callbacks.
type walker struct {
	fn   driver.WalkFn
	base string // the walked directory's path, "" for the root
	// dir is the deepest directory reported so far whose contents are being
	// visited (== base at the start).
	dir string
	// skip, when set, is a directory prefix ("/x/y/") whose files are passed
	// over because the callback asked to.
	skip string
}

// visit reports the directories between w.dir and the file fi, then fi.
// stop is true when the rest of the walk is skipped.
func (w *walker) visit(ctx context.Context, fi driver.FileInfo) (stop bool, err error) {
	if w.skip != "" && strings.HasPrefix(fi.Path, w.skip) {
		return false, nil
	}
	w.skip = ""
	if w.dir == "" {
		w.dir = w.base
	}
	// Leave directories the file is not in, then enter the ones it is.
	for !strings.HasPrefix(fi.Path, w.dir+"/") {
		w.dir = w.dir[:strings.LastIndexByte(w.dir, '/')]
	}
	for {
		slash := strings.IndexByte(fi.Path[len(w.dir)+1:], '/')
		if slash < 0 {
			break
		}
		sub := fi.Path[:len(w.dir)+1+slash]
		if err := ctx.Err(); err != nil {
			return true, fmt.Errorf("%s: walk %s: %w", driverName, w.base, err)
		}
		if err := w.fn(driver.FileInfo{Path: sub, IsDir: true}); err != nil {
			if errors.Is(err, driver.ErrSkipDir) {
				w.skip = sub + "/"
				return false, nil
			}
			return true, err
		}
		w.dir = sub
	}
	if err := w.fn(fi); err != nil {
		if !errors.Is(err, driver.ErrSkipDir) {
			return true, err
		}
		// A file's ErrSkipDir skips the rest of its directory; for the
		// walked directory itself that is the rest of the walk.
		if w.dir == w.base {
			return true, nil
		}
		w.skip = w.dir + "/"
	}
	return false, nil
}
