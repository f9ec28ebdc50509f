// Package s3 is cairn's storage driver for Amazon S3 and S3-compatible object
// stores (MinIO, Ceph RGW, Cloudflare R2). It keeps distribution's key layout
// (rootdirectory + path) and config keys, so a bucket written by distribution
// is served as it is, and adds a bulk DeleteFiles built on DeleteObjects.
//
// Directories do not exist in S3: a directory is any key prefix ending in "/"
// that some object's key starts with.
package s3

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/aws/aws-sdk-go-v2/service/s3/types"
	"github.com/aws/smithy-go"

	"github.com/cairn-registry/cairn/internal/repeat"
	"github.com/cairn-registry/cairn/internal/storage/driver"
)

const driverName = "s3"

// S3's multipart limits.
const (
	minPartSize  = 5 << 20 // every part but the last
	maxPartSize  = 5 << 30
	maxPartCount = 10000
	maxBatchKeys = 1000 // keys per DeleteObjects request
)

// Driver stores files as objects of one bucket. It is safe for concurrent use.
type Driver struct {
	client *s3.Client
	// presign signs GET URLs for blob redirects, locally.
	presign *s3.PresignClient
	bucket  string
	// prefix is rootdirectory as a key prefix: "" or "some/dir/".
	prefix string

	chunkSize         int64
	copyThreshold     int64
	copyChunkSize     int64
	copyConcurrency   int
	deleteConcurrency int
	deleteBatchSize   int

	storageClass types.StorageClass
	acl          types.ObjectCannedACL
	sse          types.ServerSideEncryption
	kmsKeyID     string

	// keyRetry paces the retries of keys a DeleteObjects response reports
	// as throttled; the SDK's retryer never sees those (the response is 200).
	keyRetry backoff

	// partSlots bounds the parts writers send in the background (see
	// writer), and so the memory of their buffers; partBufs recycles the
	// buffers.
	partSlots chan struct{}
	partBufs  sync.Pool
}

// Parts a writer sends in the background: at most partsInFlight of one
// writer, and partSlotsMax across the driver, each a chunksize buffer.
const (
	partsInFlight = 4
	partSlotsMax  = 32
)

// partBuffer returns an empty buffer of chunksize bytes for a writer's next
// part.
func (d *Driver) partBuffer() []byte {
	if b, ok := d.partBufs.Get().(*[]byte); ok {
		return (*b)[:0]
	}
	return make([]byte, 0, d.chunkSize)
}

// releaseBuffer takes back a part's buffer once its upload is done.
func (d *Driver) releaseBuffer(b []byte) {
	if int64(cap(b)) >= d.chunkSize {
		d.partBufs.Put(&b)
	}
}

var (
	_ driver.Driver     = (*Driver)(nil)
	_ driver.FileStater = (*Driver)(nil)
)

// New returns a driver for the bucket p names; it sends no request.
func New(ctx context.Context, p Parameters) (*Driver, error) {
	return newDriver(ctx, p)
}

func newDriver(ctx context.Context, p Parameters, optFns ...func(*s3.Options)) (*Driver, error) {
	p, err := p.withDefaults()
	if err != nil {
		return nil, err
	}
	client, err := NewClient(ctx, p, optFns...)
	if err != nil {
		return nil, err
	}
	d := &Driver{
		client:            client,
		presign:           s3.NewPresignClient(client),
		bucket:            p.Bucket,
		prefix:            strings.Trim(p.RootDirectory, "/"),
		chunkSize:         p.ChunkSize,
		copyThreshold:     p.MultipartCopyThresholdSize,
		copyChunkSize:     p.MultipartCopyChunkSize,
		copyConcurrency:   p.MultipartCopyMaxConcurrency,
		deleteConcurrency: p.MaxDeleteConcurrency,
		deleteBatchSize:   p.DeleteBatchSize,
		keyRetry:          backoff{base: 200 * time.Millisecond, max: 20 * time.Second, attempts: p.MaxAttempts},
		partSlots:         make(chan struct{}, partSlotsMax),
	}
	if d.prefix != "" {
		d.prefix += "/"
	}
	if c := p.StorageClass; c != "" && c != storageClassNone {
		d.storageClass = types.StorageClass(c)
	}
	d.acl = types.ObjectCannedACL(p.ObjectACL)
	if p.Encrypt {
		d.sse = types.ServerSideEncryptionAes256
		if p.KeyID != "" {
			d.sse = types.ServerSideEncryptionAwsKms
			d.kmsKeyID = p.KeyID
		}
	}
	return d, nil
}

// Name returns "s3".
func (d *Driver) Name() string { return driverName }

// key maps a valid path to its object key, as distribution does.
func (d *Driver) key(p string) string { return d.prefix + p[1:] }

// BucketKey returns the object key of the file at the valid path p
// (rootdirectory included): what a CDN in front of the bucket serves it as.
func (d *Driver) BucketKey(p string) string { return d.key(p) }

// dirPrefix is the key prefix of everything below the directory p.
func (d *Driver) dirPrefix(p string) string {
	if p == "/" {
		return d.prefix
	}
	return d.key(p) + "/"
}

// pathOf maps a key below the root back to its path.
func (d *Driver) pathOf(key string) string { return "/" + key[len(d.prefix):] }

// checkFile rejects invalid paths and the root, which is never a file.
func checkFile(p string) error {
	if p == "/" || !driver.ValidPath(p) {
		return driver.InvalidPathError{Path: p, Driver: driverName}
	}
	return nil
}

func checkPath(p string) error {
	if !driver.ValidPath(p) {
		return driver.InvalidPathError{Path: p, Driver: driverName}
	}
	return nil
}

// GetContent returns the whole object at p.
func (d *Driver) GetContent(ctx context.Context, p string) ([]byte, error) {
	if err := checkFile(p); err != nil {
		return nil, err
	}
	out, err := d.client.GetObject(ctx, &s3.GetObjectInput{Bucket: &d.bucket, Key: aws.String(d.key(p))})
	if err != nil {
		return nil, d.wrap(p, err)
	}
	defer out.Body.Close()
	var buf bytes.Buffer
	if n := aws.ToInt64(out.ContentLength); n > 0 {
		buf.Grow(int(n))
	}
	if _, err := buf.ReadFrom(out.Body); err != nil {
		return nil, fmt.Errorf("%s: reading %s: %w", driverName, p, err)
	}
	return buf.Bytes(), nil
}

// PutContent stores content at p with one PutObject, which S3 makes visible
// atomically.
func (d *Driver) PutContent(ctx context.Context, p string, content []byte) error {
	if err := checkFile(p); err != nil {
		return err
	}
	return d.putObject(ctx, p, content)
}

func (d *Driver) putObject(ctx context.Context, p string, content []byte) error {
	in := &s3.PutObjectInput{
		Bucket:               &d.bucket,
		Key:                  aws.String(d.key(p)),
		Body:                 bytes.NewReader(content),
		ContentLength:        aws.Int64(int64(len(content))),
		ContentType:          aws.String(contentType),
		StorageClass:         d.storageClass,
		ACL:                  d.acl,
		ServerSideEncryption: d.sse,
		SSEKMSKeyId:          d.kmsKeyIDPtr(),
	}
	_, err := retryDenied(ctx, func() (*s3.PutObjectOutput, error) {
		in.Body = bytes.NewReader(content)
		return d.client.PutObject(ctx, in)
	})
	return d.wrap(p, err)
}

const contentType = "application/octet-stream"

func (d *Driver) kmsKeyIDPtr() *string {
	if d.kmsKeyID == "" {
		return nil
	}
	return &d.kmsKeyID
}

// Reader streams the object at p from offset with a ranged GET. The range
// starts one byte early so that a 416 answer alone tells an offset past the
// end (an error) from one at the end (an empty read), without a HEAD first.
func (d *Driver) Reader(ctx context.Context, p string, offset int64) (io.ReadCloser, error) {
	if err := checkFile(p); err != nil {
		return nil, err
	}
	if offset < 0 {
		return nil, driver.InvalidOffsetError{Path: p, Offset: offset, Driver: driverName}
	}
	in := &s3.GetObjectInput{Bucket: &d.bucket, Key: aws.String(d.key(p))}
	if offset > 0 {
		in.Range = aws.String(fmt.Sprintf("bytes=%d-", offset-1))
	}
	out, err := d.client.GetObject(ctx, in)
	if err != nil {
		if httpStatus(err) == http.StatusRequestedRangeNotSatisfiable {
			return nil, driver.InvalidOffsetError{Path: p, Offset: offset, Driver: driverName}
		}
		return nil, d.wrap(p, err)
	}
	if offset == 0 {
		return out.Body, nil
	}
	// A server that ignores Range answers 200 with the whole object.
	skip := offset
	if out.ContentRange != nil {
		skip = 1
	}
	if n, err := io.CopyN(io.Discard, out.Body, skip); err != nil {
		out.Body.Close()
		if errors.Is(err, io.EOF) && n < skip {
			return nil, driver.InvalidOffsetError{Path: p, Offset: offset, Driver: driverName}
		}
		return nil, fmt.Errorf("%s: reading %s: %w", driverName, p, err)
	}
	return out.Body, nil
}

// ReadRange streams [offset, offset+length) of the object at p with one
// ranged GET. S3 answers a range that starts at or past the end (an empty
// object's too) with 416, which is the contract's InvalidOffsetError.
func (d *Driver) ReadRange(ctx context.Context, p string, offset, length int64) (io.ReadCloser, error) {
	if err := checkFile(p); err != nil {
		return nil, err
	}
	end, err := driver.RangeEnd(driverName, p, offset, length)
	if err != nil {
		return nil, err
	}
	out, err := d.client.GetObject(ctx, &s3.GetObjectInput{
		Bucket: &d.bucket,
		Key:    aws.String(d.key(p)),
		Range:  aws.String(fmt.Sprintf("bytes=%d-%d", offset, end-1)),
	})
	if err != nil {
		if httpStatus(err) == http.StatusRequestedRangeNotSatisfiable {
			return nil, driver.InvalidOffsetError{Path: p, Offset: offset, Driver: driverName}
		}
		return nil, d.wrap(p, err)
	}
	if out.ContentRange != nil {
		return out.Body, nil
	}
	// A server that ignores Range answers 200 with the whole object: skip to
	// offset and stop at end here.
	if n := out.ContentLength; n != nil && offset >= *n {
		out.Body.Close()
		return nil, driver.InvalidOffsetError{Path: p, Offset: offset, Driver: driverName}
	}
	if n, err := io.CopyN(io.Discard, out.Body, offset); err != nil {
		out.Body.Close()
		if errors.Is(err, io.EOF) && n < offset {
			return nil, driver.InvalidOffsetError{Path: p, Offset: offset, Driver: driverName}
		}
		return nil, fmt.Errorf("%s: reading %s: %w", driverName, p, err)
	}
	return struct {
		io.Reader
		io.Closer
	}{io.LimitReader(out.Body, end-offset), out.Body}, nil
}

// Stat asks HeadObject for a file and, failing that, whether any key lies
// below p.
func (d *Driver) Stat(ctx context.Context, p string) (driver.FileInfo, error) {
	if err := checkPath(p); err != nil {
		return driver.FileInfo{}, err
	}
	if p == "/" {
		return driver.FileInfo{Path: p, IsDir: true}, nil
	}
	if fi, err := d.StatFile(ctx, p); !errors.Is(err, driver.ErrNotFound) {
		return fi, err
	}
	out, err := d.client.ListObjectsV2(ctx, &s3.ListObjectsV2Input{
		Bucket:  &d.bucket,
		Prefix:  aws.String(d.dirPrefix(p)),
		MaxKeys: aws.Int32(1),
	})
	if err != nil {
		return driver.FileInfo{}, d.wrap(p, err)
	}
	if len(out.Contents) == 0 && len(out.CommonPrefixes) == 0 {
		return driver.FileInfo{}, driver.PathNotFoundError{Path: p, Driver: driverName}
	}
	return driver.FileInfo{Path: p, IsDir: true}, nil
}

// StatFile implements driver.FileStater with HeadObject alone: unlike Stat,
// a missing key is not followed by a listing to see whether p is a
// directory.
func (d *Driver) StatFile(ctx context.Context, p string) (driver.FileInfo, error) {
	if err := checkPath(p); err != nil {
		return driver.FileInfo{}, err
	}
	if p == "/" {
		return driver.FileInfo{}, driver.PathNotFoundError{Path: p, Driver: driverName}
	}
	head, err := d.client.HeadObject(ctx, &s3.HeadObjectInput{Bucket: &d.bucket, Key: aws.String(d.key(p))})
	if err != nil {
		return driver.FileInfo{}, d.wrap(p, err)
	}
	return driver.FileInfo{Path: p, Size: aws.ToInt64(head.ContentLength), ModTime: aws.ToTime(head.LastModified)}, nil
}

// List returns the children of directory p from a delimited listing.
func (d *Driver) List(ctx context.Context, p string) ([]string, error) {
	if err := checkPath(p); err != nil {
		return nil, err
	}
	prefix := d.dirPrefix(p)
	in := &s3.ListObjectsV2Input{Bucket: &d.bucket, Prefix: &prefix, Delimiter: aws.String("/")}
	var out []string
	for pages := s3.NewListObjectsV2Paginator(d.client, in); pages.HasMorePages(); {
		page, err := pages.NextPage(ctx)
		if err != nil {
			return nil, d.wrap(p, err)
		}
		for _, o := range page.Contents {
			// A key equal to the prefix is a console's directory marker.
			if k := aws.ToString(o.Key); k != prefix {
				out = append(out, d.pathOf(k))
			}
		}
		for _, cp := range page.CommonPrefixes {
			k := strings.TrimSuffix(aws.ToString(cp.Prefix), "/")
			if len(k) > len(prefix) {
				out = append(out, d.pathOf(k))
			}
		}
	}
	if len(out) == 0 && p != "/" {
		return nil, driver.PathNotFoundError{Path: p, Driver: driverName}
	}
	// Files and prefixes come as two sorted lists.
	slices.Sort(out)
	return out, nil
}

// Move copies src to dst on the server, then deletes src. The copy is one
// CopyObject, or a parallel multipart copy above multipartcopythresholdsize;
// either way dst changes in one step.
func (d *Driver) Move(ctx context.Context, src, dst string) error {
	if err := checkFile(src); err != nil {
		return err
	}
	if err := checkFile(dst); err != nil {
		return err
	}
	srcKey, dstKey := d.key(src), d.key(dst)
	head, err := d.client.HeadObject(ctx, &s3.HeadObjectInput{Bucket: &d.bucket, Key: &srcKey})
	if err != nil {
		return d.wrap(src, err)
	}
	if src == dst {
		return nil
	}
	size := aws.ToInt64(head.ContentLength)
	if size <= d.copyThreshold || size < minPartSize {
		in := &s3.CopyObjectInput{
			Bucket:               &d.bucket,
			Key:                  &dstKey,
			CopySource:           aws.String(d.copySource(srcKey)),
			ContentType:          aws.String(contentType),
			MetadataDirective:    types.MetadataDirectiveReplace,
			StorageClass:         d.storageClass,
			ACL:                  d.acl,
			ServerSideEncryption: d.sse,
			SSEKMSKeyId:          d.kmsKeyIDPtr(),
		}
		_, err = retryDenied(ctx, func() (*s3.CopyObjectOutput, error) { return d.client.CopyObject(ctx, in) })
		if err != nil {
			return d.wrap(src, err)
		}
	} else if err := d.uploadPlan(ctx, dst, d.copyPlan(src, 0, size)); err != nil {
		return err
	}
	_, err = d.client.DeleteObject(ctx, &s3.DeleteObjectInput{Bucket: &d.bucket, Key: &srcKey})
	return d.wrap(src, err)
}

// copySource is the URL-encoded "bucket/key" CopyObject wants. Everything but
// unreserved characters and '/' is escaped: servers differ on '+'.
func (d *Driver) copySource(key string) string {
	const hex = "0123456789ABCDEF"
	s := d.bucket + "/" + key
	var b strings.Builder
	b.Grow(len(s) + 8)
	for i := 0; i < len(s); i++ {
		c := s[i]
		if 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || strings.IndexByte("-._~/", c) >= 0 {
			b.WriteByte(c)
			continue
		}
		b.WriteByte('%')
		b.WriteByte(hex[c>>4])
		b.WriteByte(hex[c&15])
	}
	return b.String()
}

// Delete removes the object at p and every object below p. One listing with
// p's key as prefix finds both; pages are deleted as they arrive.
func (d *Driver) Delete(ctx context.Context, p string) error {
	if err := checkPath(p); err != nil {
		return err
	}
	key, below := d.key(p), d.dirPrefix(p)
	if p == "/" {
		key = below
	}
	in := &s3.ListObjectsV2Input{Bucket: &d.bucket, Prefix: &key}
	found := false
	var errs []error
	for pages := s3.NewListObjectsV2Paginator(d.client, in); pages.HasMorePages(); {
		page, err := pages.NextPage(ctx)
		if err != nil {
			return d.wrap(p, err)
		}
		keys := make([]string, 0, len(page.Contents))
		past := false
		for _, o := range page.Contents {
			k := aws.ToString(o.Key)
			switch {
			case k == key || strings.HasPrefix(k, below):
				keys = append(keys, k)
			case k > below:
				// Keys sort: nothing after p's subtree belongs to it.
				past = true
			}
		}
		if len(keys) > 0 {
			found = true
			if _, err := d.deleteKeys(ctx, keys); err != nil {
				errs = append(errs, err)
			}
		}
		if past {
			break
		}
	}
	if !found {
		return driver.PathNotFoundError{Path: p, Driver: driverName}
	}
	return errors.Join(errs...)
}

// SignedURL returns a presigned GetObject URL for the file at p, valid for
// expiry: anyone holding it reads the object without credentials. It is
// computed locally and sends no request (nor checks that the object exists).
func (d *Driver) SignedURL(ctx context.Context, p string, expiry time.Duration) (string, error) {
	if err := checkFile(p); err != nil {
		return "", err
	}
	req, err := d.presign.PresignGetObject(ctx, &s3.GetObjectInput{Bucket: &d.bucket, Key: aws.String(d.key(p))},
		s3.WithPresignExpires(expiry))
	if err != nil {
		return "", fmt.Errorf("s3: presign %s: %w", p, err)
	}
	return req.URL, nil
}

func (d *Driver) completeUpload(ctx context.Context, key, uploadID string, parts []part) error {
	in := &s3.CompleteMultipartUploadInput{
		Bucket:          &d.bucket,
		Key:             &key,
		UploadId:        &uploadID,
		MultipartUpload: &types.CompletedMultipartUpload{Parts: completed(parts)},
	}
	_, err := retryDenied(ctx, func() (*s3.CompleteMultipartUploadOutput, error) {
		return d.client.CompleteMultipartUpload(ctx, in)
	})
	return err
}

// retryDenied makes a write call, and again after a short pause while it
// fails with AccessDenied, up to 4 times. MinIO (fs-backed, checked with
// RELEASE.2025-09-07) answers about 0.3% of writes with a spurious 403
// AccessDenied while an object in the same "directory" is being deleted,
// when the delete prunes the shared parent directory on disk under the
// write. A garbage collector deleting blobs while pushes write their
// siblings meets exactly that. A real denial costs ~60 ms more to report.
func retryDenied[T any](ctx context.Context, call func() (T, error)) (T, error) {
	for attempt := 1; ; attempt++ {
		out, err := call()
		var ae smithy.APIError
		if err == nil || attempt == 4 || !errors.As(err, &ae) || ae.ErrorCode() != "AccessDenied" {
			return out, err
		}
		if err := repeat.Sleep(ctx, time.Duration(attempt)*10*time.Millisecond); err != nil {
			return out, err
		}
	}
}

func (d *Driver) createUploadInput(key string) *s3.CreateMultipartUploadInput {
	return &s3.CreateMultipartUploadInput{
		Bucket:               &d.bucket,
		Key:                  &key,
		ContentType:          aws.String(contentType),
		StorageClass:         d.storageClass,
		ACL:                  d.acl,
		ServerSideEncryption: d.sse,
		SSEKMSKeyId:          d.kmsKeyIDPtr(),
	}
}
