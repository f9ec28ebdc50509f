package azure

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/base64"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"sync"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore/streaming"
	"github.com/Azure/azure-sdk-for-go/sdk/storage/azblob/blob"
	"github.com/Azure/azure-sdk-for-go/sdk/storage/azblob/blockblob"

	"github.com/cairn-registry/cairn/internal/storage/driver"
)

const (
	// blockSize is the size of the blocks a writer stages (the last may be
	// smaller). 50,000 committed blocks of 4 MiB allow blobs of 195 GiB.
	blockSize = 4 << 20
	// maxBlocks is the service's limit of committed blocks per blob.
	maxBlocks = 50000
	// stagesInFlight bounds a writer's concurrent block uploads, and so its
	// memory: one block being filled plus this many being sent.
	stagesInFlight = 4
	// blockIDLen is the raw length of block IDs: 8 random bytes naming the
	// writer, then the block's 8-byte index. The service wants all IDs of a
	// blob to have one length.
	blockIDLen = 16
)

// Writer implements driver.Driver. The file is a block blob: Write stages
// blocks, and Commit and Close commit the block list, so the content written
// so far replaces the blob at once. An appending writer reads the committed
// block list and commits it again followed by its own blocks.
func (d *Driver) Writer(ctx context.Context, p string, appending bool) (driver.FileWriter, error) {
	if err := d.filePath(p); err != nil {
		return nil, err
	}
	w := &writer{
		d:    d,
		ctx:  ctx,
		path: p,
		bb:   d.client.NewBlockBlobClient(d.blobName(p)),
		sem:  make(chan struct{}, stagesInFlight),
	}
	if _, err := rand.Read(w.idPrefix[:]); err != nil {
		return nil, fmt.Errorf("%s: writer %s: %w", driverName, p, err)
	}
	if appending {
		if err := w.resume(ctx); err != nil {
			return nil, err
		}
	}
	return w, nil
}

// writer is used by one goroutine at a time; only its block uploads run in
// the background.
type writer struct {
	d *Driver
	// ctx is the context Writer was called with. io.Writer's Write and
	// Close take none, yet they send requests that must end with the
	// caller's request.
	ctx      context.Context
	path     string
	bb       *blockblob.Client
	idPrefix [8]byte
	ids      []string // base64 IDs of every block of the file, in order
	buf      []byte   // the block being filled
	size     int64
	state    driver.WriterState
	staged   bool // from StageWriter: Close is Cancel, which deletes nothing

	sem     chan struct{} // a slot per block upload in flight
	pending sync.WaitGroup
	mu      sync.Mutex
	errs    []error // failed block uploads
	pool    sync.Pool
}

var (
	_ driver.FileWriter = (*writer)(nil)
	_ driver.Stager     = (*Driver)(nil)
)

// StageWriter implements driver.Stager: a writer whose blocks stay
// uncommitted, and the blob as it was, until Commit commits the block list.
// Cancel and Close leave the blocks for the service to drop (when the blob
// is next committed, or after a week).
func (d *Driver) StageWriter(ctx context.Context, p string) (driver.FileWriter, error) {
	fw, err := d.Writer(ctx, p, false)
	if err != nil {
		return nil, err
	}
	w := fw.(*writer)
	w.staged = true
	return w, nil
}

// resume loads the committed block list of an existing blob. A blob that was
// not written by a writer (a Put Blob, another tool's block IDs) is first
// copied into blocks of this writer's own, through memory a block at a time.
func (w *writer) resume(ctx context.Context) error {
	list, err := w.bb.GetBlockList(ctx, blockblob.BlockListTypeCommitted, nil)
	if err != nil {
		return w.d.fail("block list", w.path, err)
	}
	var length, sum int64
	if list.BlobContentLength != nil {
		length = *list.BlobContentLength
	}
	own := true
	for _, b := range list.CommittedBlocks {
		if b.Name == nil || b.Size == nil {
			own = false
			break
		}
		if raw, err := base64.StdEncoding.DecodeString(*b.Name); err != nil || len(raw) != blockIDLen {
			own = false
		}
		w.ids = append(w.ids, *b.Name)
		sum += *b.Size
	}
	if own && sum == length {
		w.size = length
		return nil
	}
	w.ids = w.ids[:0]
	if length == 0 {
		return nil
	}
	resp, err := w.bb.DownloadStream(ctx, nil)
	if err != nil {
		return w.d.fail("read", w.path, err)
	}
	r := resp.NewRetryReader(ctx, &blob.RetryReaderOptions{EarlyCloseAsError: true})
	defer r.Close()
	if _, err := io.Copy(w, r); err != nil {
		w.wait()
		return fmt.Errorf("%s: writer %s: copying the existing content into blocks: %w", driverName, w.path, err)
	}
	return nil
}

func (w *writer) Write(p []byte) (int, error) {
	if w.state != driver.WriterOpen {
		return 0, w.stateError()
	}
	if err := w.failed(); err != nil {
		return 0, err
	}
	n := 0
	for len(p) > 0 {
		if w.buf == nil {
			w.buf = w.getBuf()
		}
		k := min(len(p), blockSize-len(w.buf))
		w.buf = append(w.buf, p[:k]...)
		p = p[k:]
		n += k
		w.size += int64(k)
		if len(w.buf) == blockSize {
			if err := w.stage(); err != nil {
				return n, err
			}
		}
	}
	return n, nil
}

func (w *writer) Size() int64 { return w.size }

// Close commits what was written, for a later appending writer. Closing
// again, or after Commit or Cancel, does nothing.
func (w *writer) Close() error {
	return w.state.CloseStaged(w.staged,
		func() error { return w.Cancel(w.ctx) },
		func() error { return w.commit(w.ctx) })
}

// Commit commits everything written as the blob's content.
func (w *writer) Commit(ctx context.Context) error {
	return w.state.Commit(w.stateError, func() error { return w.commit(ctx) })
}

// Cancel deletes the blob, including what earlier writers wrote to it. It
// works on an open or closed writer.
func (w *writer) Cancel(ctx context.Context) error {
	if w.state == driver.WriterCommitted || w.state == driver.WriterCancelled {
		return w.stateError()
	}
	hasBlocks := len(w.ids) > 0
	w.state = driver.WriterCancelled
	w.wait()
	w.buf = nil
	if w.staged {
		return nil
	}
	_, err := w.bb.Delete(ctx, nil)
	if isNotFound(err) && hasBlocks {
		// Blocks staged on a blob that was never committed stay for a
		// week unless a commit drops them: commit nothing, then delete.
		if _, err = w.bb.CommitBlockList(ctx, nil, nil); err == nil {
			_, err = w.bb.Delete(ctx, nil)
		}
	}
	if err != nil && !isNotFound(err) {
		return w.d.fail("cancel", w.path, err)
	}
	return nil
}

// stage sends the filled buffer as the next block, in the background.
func (w *writer) stage() error {
	if len(w.ids) >= maxBlocks {
		return fmt.Errorf("%s: writer %s: more than %d blocks", driverName, w.path, maxBlocks)
	}
	var raw [blockIDLen]byte
	copy(raw[:8], w.idPrefix[:])
	binary.BigEndian.PutUint64(raw[8:], uint64(len(w.ids)))
	id := base64.StdEncoding.EncodeToString(raw[:])
	w.ids = append(w.ids, id)
	buf := w.buf
	w.buf = nil
	w.sem <- struct{}{}
	w.pending.Add(1)
	go func() {
		defer func() {
			w.putBuf(buf)
			<-w.sem
			w.pending.Done()
		}()
		body := streaming.NopCloser(bytes.NewReader(buf))
		if _, err := w.bb.StageBlock(w.ctx, id, body, nil); err != nil {
			w.mu.Lock()
			w.errs = append(w.errs, w.d.fail("stage block", w.path, err))
			w.mu.Unlock()
		}
	}()
	return nil
}

// commit stages the partial block, waits for every upload and commits the
// block list.
func (w *writer) commit(ctx context.Context) error {
	var err error
	if len(w.buf) > 0 {
		err = w.stage()
	}
	w.wait()
	if err == nil {
		err = w.failed()
	}
	if err != nil {
		return err
	}
	if _, err := w.bb.CommitBlockList(ctx, w.ids, nil); err != nil {
		return w.d.fail("commit", w.path, err)
	}
	return nil
}

func (w *writer) wait() { w.pending.Wait() }

func (w *writer) failed() error {
	w.mu.Lock()
	defer w.mu.Unlock()
	return errors.Join(w.errs...)
}

// getBuf returns an empty block buffer: a full-size one an earlier block
// left, or none, which append grows so that small files stay small.
func (w *writer) getBuf() []byte {
	if b, ok := w.pool.Get().(*[]byte); ok {
		return (*b)[:0]
	}
	return []byte{}
}

func (w *writer) putBuf(b []byte) {
	if cap(b) >= blockSize {
		w.pool.Put(&b)
	}
}

func (w *writer) stateError() error {
	return fmt.Errorf("%s: writer for %s is %s", driverName, w.path, w.state)
}
