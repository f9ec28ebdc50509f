package s3

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"sync"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"

	"github.com/cairn-registry/cairn/internal/storage/driver"
)

var _ driver.Concatenator = (*Driver)(nil)

// concatUploads bounds the parts Concat reads and uploads itself at once
// (each at most 15 MiB in memory); part copies run copyConcurrency at once.
const concatUploads = 4

// concatPart is one part of the multipart upload Concat builds: a range
// copied by the server (copy), or ranges read and uploaded together.
type concatPart struct {
	ranges []driver.FileRange
	copy   bool
}

// Concat implements driver.Concatenator with one multipart upload into dst,
// which appears when the upload completes. A range of 5 MiB or more
// becomes part copies (UploadPartCopy: the server copies, nothing passes
// through cairn), split at multipartcopychunksize so that they run in
// parallel. Shorter ranges are read and uploaded, joined into parts of at
// least 5 MiB, S3's minimum for every part but the last; a short range
// takes the whole of a following range that could not stand alone, so
// one short chunk costs at most one part's bytes through cairn. Chunks
// pushed at the sizes clients use (8 MiB and up) are all copied.
func (d *Driver) Concat(ctx context.Context, dst string, srcs []driver.FileRange) error {
	if err := checkFile(dst); err != nil {
		return err
	}
	for _, s := range srcs {
		if err := checkFile(s.Path); err != nil {
			return err
		}
		if s.Offset < 0 || s.Length < 0 {
			return driver.InvalidOffsetError{Path: s.Path, Offset: s.Offset, Driver: driverName}
		}
	}
	plan := d.planConcat(srcs)
	if len(plan) > maxPartCount {
		return fmt.Errorf("%s: joining %d ranges into %s takes %d parts, over S3's %d: %w",
			driverName, len(srcs), dst, len(plan), maxPartCount, errors.ErrUnsupported)
	}
	if len(plan) == 0 || len(plan) == 1 && !plan[0].copy {
		// Under 5 MiB in all (or empty): one PUT.
		var b []byte
		if len(plan) == 1 {
			var err error
			if b, err = d.readRanges(ctx, plan[0].ranges); err != nil {
				return err
			}
		}
		return d.putObject(ctx, dst, b)
	}
	return d.uploadPlan(ctx, dst, plan)
}

// uploadPlan makes dst the planned parts with one multipart upload, which
// is aborted (best effort: a lifecycle rule reaps what an abort cannot)
// when a part fails.
func (d *Driver) uploadPlan(ctx context.Context, dst string, plan []concatPart) error {
	key := d.key(dst)
	up, err := retryDenied(ctx, func() (*s3.CreateMultipartUploadOutput, error) {
		return d.client.CreateMultipartUpload(ctx, d.createUploadInput(key))
	})
	if err != nil {
		return d.wrap(dst, err)
	}
	uploadID := aws.ToString(up.UploadId)
	parts, err := d.concatParts(ctx, key, uploadID, plan)
	if err == nil {
		err = d.wrap(dst, d.completeUpload(ctx, key, uploadID, parts))
	}
	if err != nil {
		_, _ = d.client.AbortMultipartUpload(context.WithoutCancel(ctx), &s3.AbortMultipartUploadInput{
			Bucket: &d.bucket, Key: &key, UploadId: &uploadID,
		})
	}
	return err
}

// planConcat turns ranges into parts (see Concat).
func (d *Driver) planConcat(srcs []driver.FileRange) []concatPart {
	var (
		plan    []concatPart
		pending concatPart
		pendLen int64
	)
	take := func(p string, off, n int64) {
		pending.ranges = append(pending.ranges, driver.FileRange{Path: p, Offset: off, Length: n})
		pendLen += n
	}
	for _, s := range srcs {
		off, n := s.Offset, s.Length
		if pendLen > 0 && n > 0 {
			k := minPartSize - pendLen
			if n-k < minPartSize {
				k = n // the rest could not be a part of its own
			}
			take(s.Path, off, k)
			off, n = off+k, n-k
			if pendLen >= minPartSize {
				plan = append(plan, pending)
				pending, pendLen = concatPart{}, 0
			}
		}
		switch {
		case n >= minPartSize:
			plan = append(plan, d.copyPlan(s.Path, off, n)...)
		case n > 0:
			take(s.Path, off, n)
		}
	}
	if pendLen > 0 {
		plan = append(plan, pending)
	}
	return plan
}

// copyPlan copies n bytes of the file at p from off as parts of equal size
// (±1 byte), as many as keep each at least multipartcopychunksize (and 5
// MiB, so that more parts may follow) and at most 5 GiB, so that they are
// copied in parallel. A file too large for 10000 such parts gets larger
// ones.
func (d *Driver) copyPlan(p string, off, n int64) []concatPart {
	chunk := max(d.copyChunkSize, minPartSize, (n+maxPartCount-1)/maxPartCount)
	k := max(n/chunk, 1)
	for (n+k-1)/k > maxPartSize {
		k++
	}
	plan := make([]concatPart, k)
	for i := range k {
		a, b := off+i*n/k, off+(i+1)*n/k
		plan[i] = concatPart{ranges: []driver.FileRange{{Path: p, Offset: a, Length: b - a}}, copy: true}
	}
	return plan
}

// concatParts makes the planned parts of the upload, numbered from 1 in
// plan order, copyConcurrency at a time.
func (d *Driver) concatParts(ctx context.Context, key, uploadID string, plan []concatPart) ([]part, error) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	parts := make([]part, len(plan))
	errs := make([]error, len(plan))
	sem := make(chan struct{}, d.copyConcurrency)
	uploads := make(chan struct{}, concatUploads)
	var wg sync.WaitGroup
	for i, p := range plan {
		select {
		case sem <- struct{}{}:
		case <-ctx.Done():
			errs[i] = ctx.Err()
			continue
		}
		if !p.copy {
			select {
			case uploads <- struct{}{}:
			case <-ctx.Done():
				<-sem
				errs[i] = ctx.Err()
				continue
			}
		}
		wg.Go(func() {
			defer func() { <-sem }()
			num := int32(i + 1)
			var err error
			if p.copy {
				parts[i], err = d.copyPart(ctx, key, uploadID, num, p.ranges[0])
			} else {
				parts[i], err = d.uploadRanges(ctx, key, uploadID, num, p.ranges)
				<-uploads
			}
			if err != nil {
				errs[i] = err
				cancel()
			}
		})
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	return parts, nil
}

// copyPart makes part num of the upload a copy of range r, on the server.
func (d *Driver) copyPart(ctx context.Context, key, uploadID string, num int32, r driver.FileRange) (part, error) {
	in := &s3.UploadPartCopyInput{
		Bucket:          &d.bucket,
		Key:             &key,
		UploadId:        &uploadID,
		PartNumber:      aws.Int32(num),
		CopySource:      aws.String(d.copySource(d.key(r.Path))),
		CopySourceRange: aws.String(fmt.Sprintf("bytes=%d-%d", r.Offset, r.Offset+r.Length-1)),
	}
	out, err := retryDenied(ctx, func() (*s3.UploadPartCopyOutput, error) { return d.client.UploadPartCopy(ctx, in) })
	if err != nil {
		return part{}, d.wrap(r.Path, err)
	}
	return part{number: num, etag: aws.ToString(out.CopyPartResult.ETag), size: r.Length}, nil
}

// uploadRanges reads the ranges and uploads them as part num.
func (d *Driver) uploadRanges(ctx context.Context, key, uploadID string, num int32, ranges []driver.FileRange) (part, error) {
	b, err := d.readRanges(ctx, ranges)
	if err != nil {
		return part{}, err
	}
	in := &s3.UploadPartInput{
		Bucket:        &d.bucket,
		Key:           &key,
		UploadId:      &uploadID,
		PartNumber:    aws.Int32(num),
		ContentLength: aws.Int64(int64(len(b))),
	}
	out, err := retryDenied(ctx, func() (*s3.UploadPartOutput, error) {
		in.Body = bytes.NewReader(b)
		return d.client.UploadPart(ctx, in)
	})
	if err != nil {
		return part{}, d.wrap(ranges[0].Path, err)
	}
	return part{number: num, etag: aws.ToString(out.ETag), size: int64(len(b))}, nil
}

// readRanges returns the bytes of the ranges, one ranged GET each; a range
// past its file's end is an error.
func (d *Driver) readRanges(ctx context.Context, ranges []driver.FileRange) ([]byte, error) {
	var total int64
	for _, r := range ranges {
		total += r.Length
	}
	b := make([]byte, total)
	off := int64(0)
	for _, r := range ranges {
		if r.Length == 0 {
			continue
		}
		rc, err := d.ReadRange(ctx, r.Path, r.Offset, r.Length)
		if err != nil {
			return nil, err
		}
		n, err := io.ReadFull(rc, b[off:off+r.Length])
		rc.Close()
		if errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, io.EOF) {
			return nil, fmt.Errorf("%s: %s holds %d bytes from %d, want %d", driverName, r.Path, n, r.Offset, r.Length)
		}
		if err != nil {
			return nil, fmt.Errorf("%s: reading %s: %w", driverName, r.Path, err)
		}
		off += r.Length
	}
	return b, nil
}
