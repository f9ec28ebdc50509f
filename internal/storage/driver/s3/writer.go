package s3

import (
	"bytes"
	"cmp"
	"context"
	"errors"
	"fmt"
	"sync"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/aws/aws-sdk-go-v2/service/s3/types"

	"github.com/cairn-registry/cairn/internal/storage/driver"
)

// Writer returns a writer for p. A new writer buffers up to chunksize bytes
// and uploads each full chunk as a part of a multipart upload, which it
// starts when the first part is due; a file that never fills a chunk is
// committed with one PutObject.
//
// Close without Commit leaves the upload in progress (starting one if need
// be), and Writer(p, true) resumes the newest upload for p's key, found by
// ListMultipartUploads with the key as prefix, as distribution does. With no
// upload it appends to the object at p, and with neither p is not found.
//
// S3 wants every part but the last to be at least 5 MiB, so an upload whose
// last part is shorter (a Close with a partial chunk) cannot take more parts.
// On the first Write after resuming one, the writer completes it, making the
// bytes so far the object at p (visible to readers of p until Commit or
// Cancel, as in distribution), and starts over from that object: a short one
// is read back into the buffer and rewritten with the new data, a longer one
// is copied into the new upload on the server.
func (d *Driver) Writer(ctx context.Context, p string, append bool) (driver.FileWriter, error) {
	if err := checkFile(p); err != nil {
		return nil, err
	}
	w := &writer{d: d, path: p, key: d.key(p), appended: append}
	if !append {
		return w, nil
	}
	uploadID, err := d.findUpload(ctx, w.key)
	if err != nil {
		return nil, d.wrap(p, err)
	}
	if uploadID != "" {
		parts, err := d.listParts(ctx, w.key, uploadID)
		if err != nil {
			return nil, d.wrap(p, err)
		}
		w.uploadID, w.parts = uploadID, parts
		for _, pt := range parts {
			w.size += pt.size
		}
		w.shortTail = len(parts) > 0 && parts[len(parts)-1].size < minPartSize
		return w, nil
	}
	head, err := d.client.HeadObject(ctx, &s3.HeadObjectInput{Bucket: &d.bucket, Key: &w.key})
	if err != nil {
		return nil, d.wrap(p, err)
	}
	w.base = aws.ToInt64(head.ContentLength)
	w.hasBase = true
	w.size = w.base
	return w, nil
}

var _ driver.Stager = (*Driver)(nil)

// StageWriter implements driver.Stager: a writer whose parts go to a
// multipart upload (or, for a file under one chunk, to one PutObject at
// Commit), invisible until Commit completes it. Cancel and Close abort it.
func (d *Driver) StageWriter(_ context.Context, p string) (driver.FileWriter, error) {
	if err := checkFile(p); err != nil {
		return nil, err
	}
	return &writer{d: d, path: p, key: d.key(p), staged: true}, nil
}

// findUpload returns the ID of the newest multipart upload of key, or "".
func (d *Driver) findUpload(ctx context.Context, key string) (string, error) {
	in := &s3.ListMultipartUploadsInput{Bucket: &d.bucket, Prefix: &key}
	var (
		id     string
		newest types.MultipartUpload
	)
	for {
		out, err := d.client.ListMultipartUploads(ctx, in)
		if err != nil {
			return "", err
		}
		for _, u := range out.Uploads {
			if aws.ToString(u.Key) == key && (id == "" || aws.ToTime(u.Initiated).After(aws.ToTime(newest.Initiated))) {
				id, newest = aws.ToString(u.UploadId), u
			}
		}
		if !aws.ToBool(out.IsTruncated) {
			return id, nil
		}
		in.KeyMarker, in.UploadIdMarker = out.NextKeyMarker, out.NextUploadIdMarker
	}
}

func (d *Driver) listParts(ctx context.Context, key, uploadID string) ([]part, error) {
	in := &s3.ListPartsInput{Bucket: &d.bucket, Key: &key, UploadId: &uploadID}
	var parts []part
	for {
		out, err := d.client.ListParts(ctx, in)
		if err != nil {
			return nil, err
		}
		for _, p := range out.Parts {
			parts = append(parts, part{number: aws.ToInt32(p.PartNumber), etag: aws.ToString(p.ETag), size: aws.ToInt64(p.Size)})
		}
		if !aws.ToBool(out.IsTruncated) {
			return parts, nil
		}
		in.PartNumberMarker = out.NextPartNumberMarker
	}
}

// part is an uploaded part of a multipart upload.
type part struct {
	number int32
	etag   string
	size   int64
}

func completed(parts []part) []types.CompletedPart {
	out := make([]types.CompletedPart, len(parts))
	for i, p := range parts {
		out[i] = types.CompletedPart{PartNumber: aws.Int32(p.number), ETag: aws.String(p.etag)}
	}
	return out
}

// writer writes one file. It is used by one goroutine at a time. The file is
// base bytes of the object at the key (when hasBase), then the parts, then
// buf.
//
// Full parts are sent in the background, up to partsInFlight per writer and
// partSlots across the driver, so that reading what is written goes on
// while a part crosses the network: with a part sent per round trip, a push
// alternates between the client's bytes and the store's, at the sum of the
// two. Close, Commit and Cancel wait for the parts in flight.
type writer struct {
	d        *Driver
	path     string
	key      string
	appended bool // Cancel also deletes the object at the key
	staged   bool // from StageWriter: Close is Cancel

	uploadID  string // "" until a part is due
	parts     []part // a part in flight has no etag yet; guarded by mu while parts are in flight
	shortTail bool   // the last part is under minPartSize: no part may follow
	base      int64
	hasBase   bool
	buf       []byte
	size      int64
	state     driver.WriterState

	mu       sync.Mutex
	sendErr  error // the first part that failed in the background
	inFlight sync.WaitGroup
	slots    chan struct{} // this writer's parts in flight
}

var _ driver.FileWriter = (*writer)(nil)

func (w *writer) Size() int64 { return w.size }

// Write buffers p and uploads every full chunk. FileWriter's Write takes no
// context, so requests made here run under context.Background().
func (w *writer) Write(p []byte) (int, error) {
	if w.state != driver.WriterOpen {
		return 0, w.stateError()
	}
	if len(p) == 0 {
		return 0, nil
	}
	ctx := context.Background()
	if err := w.restart(ctx); err != nil {
		return 0, err
	}
	chunk := int(w.d.chunkSize)
	n := 0
	for n < len(p) {
		k := min(chunk-len(w.buf), len(p)-n)
		w.buf = append(w.buf, p[n:n+k]...)
		n += k
		w.size += int64(k)
		if len(w.buf) == chunk {
			if err := w.sendPart(ctx); err != nil {
				return n, err
			}
		}
	}
	return n, nil
}

// sendPart sends buf as the next part in the background and gives the
// writer a new buffer; it waits while the writer, or the driver, has as
// many parts in flight as it may. It reports a part that failed earlier.
func (w *writer) sendPart(ctx context.Context) error {
	if err := w.startUpload(ctx); err != nil {
		return err
	}
	if w.slots == nil {
		w.slots = make(chan struct{}, partsInFlight)
	}
	w.slots <- struct{}{}
	w.d.partSlots <- struct{}{}
	if err := w.backgroundErr(); err != nil {
		<-w.d.partSlots
		<-w.slots
		return err
	}
	w.mu.Lock()
	num, idx := w.nextPartNumber(), len(w.parts)
	if num > maxPartCount {
		w.mu.Unlock()
		<-w.d.partSlots
		<-w.slots
		return w.tooManyParts()
	}
	w.parts = append(w.parts, part{number: num, size: int64(len(w.buf))})
	w.mu.Unlock()
	data := w.buf
	w.buf = w.d.partBuffer()
	w.inFlight.Go(func() {
		defer func() { <-w.slots }()
		etag, err := w.putPart(ctx, num, data)
		<-w.d.partSlots
		w.d.releaseBuffer(data)
		w.mu.Lock()
		defer w.mu.Unlock()
		if err != nil {
			w.sendErr = cmp.Or(w.sendErr, err)
			return
		}
		w.parts[idx].etag = etag
	})
	return nil
}

// settle waits for the parts in flight and returns the first that failed.
func (w *writer) settle() error {
	w.inFlight.Wait()
	return w.backgroundErr()
}

func (w *writer) backgroundErr() error {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.sendErr
}

func (w *writer) nextPartNumber() int32 {
	if n := len(w.parts); n > 0 {
		return w.parts[n-1].number + 1
	}
	return 1
}

func (w *writer) tooManyParts() error {
	return fmt.Errorf("%s: %s: more than %d parts of %d bytes", driverName, w.path, maxPartCount, w.d.chunkSize)
}

// restart makes the writer able to take more parts: it turns a resumed
// upload with a short last part into the object at the key, and that object
// into the start of a new upload or of the buffer.
func (w *writer) restart(ctx context.Context) error {
	if w.shortTail {
		if err := w.complete(ctx); err != nil {
			return err
		}
		w.uploadID, w.parts, w.shortTail = "", nil, false
		w.base, w.hasBase = w.size, true
	}
	if !w.hasBase {
		return nil
	}
	if w.base < minPartSize {
		out, err := w.d.client.GetObject(ctx, &s3.GetObjectInput{Bucket: &w.d.bucket, Key: &w.key})
		if err != nil {
			return w.d.wrap(w.path, err)
		}
		defer out.Body.Close()
		b := bytes.NewBuffer(make([]byte, 0, w.base))
		if _, err := b.ReadFrom(out.Body); err != nil {
			return fmt.Errorf("%s: reading %s: %w", driverName, w.path, err)
		}
		if int64(b.Len()) != w.base {
			return fmt.Errorf("%s: %s changed while being appended to: %d bytes, want %d", driverName, w.path, b.Len(), w.base)
		}
		w.buf = b.Bytes()
	} else {
		if err := w.startUpload(ctx); err != nil {
			return err
		}
		parts, err := w.d.concatParts(ctx, w.key, w.uploadID, w.d.copyPlan(w.path, 0, w.base))
		if err != nil {
			return w.d.wrap(w.path, err)
		}
		w.parts = parts
	}
	w.hasBase = false
	return nil
}

func (w *writer) startUpload(ctx context.Context) error {
	if w.uploadID != "" {
		return nil
	}
	out, err := retryDenied(ctx, func() (*s3.CreateMultipartUploadOutput, error) {
		return w.d.client.CreateMultipartUpload(ctx, w.d.createUploadInput(w.key))
	})
	if err != nil {
		return w.d.wrap(w.path, err)
	}
	w.uploadID = aws.ToString(out.UploadId)
	return nil
}

// uploadPart sends data as the next part and waits for it, after the parts
// in flight.
func (w *writer) uploadPart(ctx context.Context, data []byte) error {
	if err := w.settle(); err != nil {
		return err
	}
	if err := w.startUpload(ctx); err != nil {
		return err
	}
	num := w.nextPartNumber()
	if num > maxPartCount {
		return w.tooManyParts()
	}
	etag, err := w.putPart(ctx, num, data)
	if err != nil {
		return err
	}
	w.parts = append(w.parts, part{number: num, etag: etag, size: int64(len(data))})
	return nil
}

// putPart uploads data as part num and returns its etag.
func (w *writer) putPart(ctx context.Context, num int32, data []byte) (string, error) {
	in := &s3.UploadPartInput{
		Bucket:        &w.d.bucket,
		Key:           &w.key,
		UploadId:      &w.uploadID,
		PartNumber:    aws.Int32(num),
		ContentLength: aws.Int64(int64(len(data))),
	}
	out, err := retryDenied(ctx, func() (*s3.UploadPartOutput, error) {
		in.Body = bytes.NewReader(data)
		return w.d.client.UploadPart(ctx, in)
	})
	if err != nil {
		return "", w.d.wrap(w.path, err)
	}
	return aws.ToString(out.ETag), nil
}

func (w *writer) complete(ctx context.Context) error {
	return w.d.wrap(w.path, w.d.completeUpload(ctx, w.key, w.uploadID, w.parts))
}

// Close uploads what is buffered as a part, short or not, and leaves the
// upload in progress for a later Writer(p, true). A writer that has nothing
// stored anywhere yet starts an empty upload, so that the resume finds p.
func (w *writer) Close() error {
	if w.state != driver.WriterOpen {
		return nil
	}
	if w.staged {
		return w.Cancel(context.Background())
	}
	w.state = driver.WriterClosed
	ctx := context.Background()
	var err error
	switch {
	case len(w.buf) > 0:
		err = w.uploadPart(ctx, w.buf)
	case w.uploadID == "" && !w.hasBase:
		err = w.startUpload(ctx)
	default:
		err = w.settle()
	}
	w.buf = nil
	return err
}

// Commit makes everything written the object at p.
func (w *writer) Commit(ctx context.Context) error {
	if w.state != driver.WriterOpen {
		return w.stateError()
	}
	var err error
	switch {
	case w.hasBase:
		// Nothing was appended: the object is already complete.
	case w.uploadID == "":
		err = w.d.putObject(ctx, w.path, w.buf)
	default:
		if len(w.buf) > 0 {
			err = w.uploadPart(ctx, w.buf)
		} else {
			err = w.settle()
		}
		switch {
		case err != nil:
		case len(w.parts) == 0:
			// An upload needs a part; an empty file needs none.
			if err = w.d.putObject(ctx, w.path, nil); err == nil {
				w.abort(ctx)
			}
		default:
			err = w.complete(ctx)
		}
	}
	if err != nil {
		return err
	}
	w.state, w.buf = driver.WriterCommitted, nil
	return nil
}

// Cancel aborts the upload and, for an appending writer, deletes the object
// at p, so nothing of this or earlier writers to p remains.
func (w *writer) Cancel(ctx context.Context) error {
	if w.state == driver.WriterCommitted || w.state == driver.WriterCancelled {
		return w.stateError()
	}
	w.state, w.buf = driver.WriterCancelled, nil
	_ = w.settle() // no part may land after the abort
	var errs []error
	if w.uploadID != "" {
		_, err := w.d.client.AbortMultipartUpload(ctx, &s3.AbortMultipartUploadInput{
			Bucket: &w.d.bucket, Key: &w.key, UploadId: &w.uploadID,
		})
		if err = w.d.wrap(w.path, err); err != nil && !errors.Is(err, driver.ErrNotFound) {
			errs = append(errs, err)
		}
	}
	if w.appended {
		_, err := w.d.client.DeleteObject(ctx, &s3.DeleteObjectInput{Bucket: &w.d.bucket, Key: &w.key})
		errs = append(errs, w.d.wrap(w.path, err))
	}
	return errors.Join(errs...)
}

// abort drops the upload after the file was stored another way; a failure
// leaves garbage for the bucket's lifecycle rule, not a wrong file.
func (w *writer) abort(ctx context.Context) {
	_, _ = w.d.client.AbortMultipartUpload(ctx, &s3.AbortMultipartUploadInput{
		Bucket: &w.d.bucket, Key: &w.key, UploadId: &w.uploadID,
	})
}

func (w *writer) stateError() error {
	return fmt.Errorf("%s: writer for %s is %s", driverName, w.path, w.state)
}
