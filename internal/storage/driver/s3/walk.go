package s3

import (
	"context"
	"errors"
	"strings"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"

	"github.com/cairn-registry/cairn/internal/storage/driver"
)

// afterAll sorts after every key below a prefix: the highest code point. A
// listing started after prefix+afterAll resumes past that prefix's subtree.
const afterAll = "\U0010FFFF"

// Walk lists everything below p with one flat ListObjectsV2 listing (1000
// keys a page) instead of a listing per directory. S3 returns keys in byte
// order, which keeps each directory's keys together, so directory entries
// are made up from key prefixes as the listing passes them: "a/y/z" yields
// "a" and "a/y" unless an earlier key did. A skipped directory whose keys
// outrun the current page is jumped over with StartAfter.
func (d *Driver) Walk(ctx context.Context, p string, fn driver.WalkFn) error {
	if err := checkPath(p); err != nil {
		return err
	}
	prefix := d.dirPrefix(p)
	base := strings.TrimSuffix(p, "/") // "" for the root, so base+"/"+rel is a path
	in := &s3.ListObjectsV2Input{Bucket: &d.bucket, Prefix: &prefix}
	var (
		open  []string // directories (relative to p) the listing is inside
		skip  string   // relative prefix whose keys are skipped, "" for none
		found bool
	)
	for {
		page, err := d.client.ListObjectsV2(ctx, in)
		if err != nil {
			return d.wrap(p, err)
		}
		for _, o := range page.Contents {
			rel := aws.ToString(o.Key)[len(prefix):]
			// Directory markers and keys no path maps to (written by
			// other tools) are not files of this driver.
			if rel == "" || !driver.ValidPath("/"+rel) {
				continue
			}
			found = true
			if skip != "" && strings.HasPrefix(rel, skip) {
				continue
			}
			skip = ""
			for len(open) > 0 && !strings.HasPrefix(rel, open[len(open)-1]+"/") {
				open = open[:len(open)-1]
			}
			from := 0
			if len(open) > 0 {
				from = len(open[len(open)-1]) + 1
			}
			for i := strings.IndexByte(rel[from:], '/'); i >= 0; i = strings.IndexByte(rel[from:], '/') {
				dir := rel[:from+i]
				from += i + 1
				open = append(open, dir)
				err := fn(driver.FileInfo{Path: base + "/" + dir, IsDir: true})
				if errors.Is(err, driver.ErrSkipDir) {
					skip = dir + "/"
					break
				}
				if err != nil {
					return err
				}
				if err := ctx.Err(); err != nil {
					return err
				}
			}
			if skip != "" {
				continue
			}
			err := fn(driver.FileInfo{
				Path:    base + "/" + rel,
				Size:    aws.ToInt64(o.Size),
				ModTime: aws.ToTime(o.LastModified),
			})
			if errors.Is(err, driver.ErrSkipDir) {
				// A file's ErrSkipDir skips the rest of its directory.
				if len(open) == 0 {
					return nil
				}
				skip = open[len(open)-1] + "/"
				continue
			}
			if err != nil {
				return err
			}
			if err := ctx.Err(); err != nil {
				return err
			}
		}
		if !aws.ToBool(page.IsTruncated) {
			break
		}
		if n := len(page.Contents); skip != "" && n > 0 && strings.HasPrefix(aws.ToString(page.Contents[n-1].Key), prefix+skip) {
			in.ContinuationToken = nil
			in.StartAfter = aws.String(prefix + skip + afterAll)
		} else {
			in.ContinuationToken = page.NextContinuationToken
		}
	}
	if !found && p != "/" {
		return driver.PathNotFoundError{Path: p, Driver: driverName}
	}
	return nil
}
