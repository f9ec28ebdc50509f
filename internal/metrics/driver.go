package metrics

import (
	"context"
	"errors"
	"io"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/cairn-registry/cairn/internal/storage/driver"
)

// Operation label values, one per driver method (and the two FileWriter
// methods that reach storage).
const (
	opGetContent  = "get_content"
	opPutContent  = "put_content"
	opReader      = "reader"
	opReadRange   = "read_range"
	opWriter      = "writer"
	opStat        = "stat"
	opList        = "list"
	opMove        = "move"
	opDelete      = "delete"
	opWalk        = "walk"
	opDeleteFiles = "delete_files"
	opCommit      = "writer_commit"
	opCancel      = "writer_cancel"
)

var operations = [...]string{
	opGetContent, opPutContent, opReader, opReadRange, opWriter, opStat, opList,
	opMove, opDelete, opWalk, opDeleteFiles, opCommit, opCancel,
}

// opMetrics are one operation's collectors, resolved once so that a call
// costs no label lookup (GC and dedup make millions of calls).
type opMetrics struct {
	calls   prometheus.Counter
	errors  prometheus.Counter
	latency prometheus.Observer
}

func (o *opMetrics) done(start time.Time, err error) {
	o.calls.Inc()
	o.latency.Observe(time.Since(start).Seconds())
	if failed(err) {
		o.errors.Inc()
	}
}

// failed tells storage failures from answers: a missing path is how the
// registry learns that something does not exist, and a caller that gave up
// (context.Canceled: the client went away) is not the storage's fault.
func failed(err error) bool {
	return err != nil && !errors.Is(err, driver.ErrNotFound) && !errors.Is(err, context.Canceled)
}

// InstrumentDriver returns d with every call counted by operation, timed,
// and its failures counted. Readers are returned unwrapped, so that blob
// GETs keep the kernel's sendfile path; writers are wrapped to time Commit
// and Cancel.
func InstrumentDriver(d driver.Driver, m *Metrics) driver.Driver {
	name := d.Name()
	ops := make(map[string]*opMetrics, len(operations))
	for _, op := range operations {
		ops[op] = &opMetrics{
			calls:   m.storageOps.WithLabelValues(name, op),
			errors:  m.storageErrors.WithLabelValues(name, op),
			latency: m.storageLatency.WithLabelValues(name, op),
		}
	}
	return &instrumented{
		d:       d,
		deleted: m.storageDeleted.WithLabelValues(name),
		get:     ops[opGetContent], put: ops[opPutContent], reader: ops[opReader], readRange: ops[opReadRange],
		writer: ops[opWriter], stat: ops[opStat], list: ops[opList], move: ops[opMove], delete: ops[opDelete],
		walk: ops[opWalk], deleteFiles: ops[opDeleteFiles], commit: ops[opCommit],
		cancel: ops[opCancel],
	}
}

var (
	_ driver.Driver     = (*instrumented)(nil)
	_ driver.FileStater = (*instrumented)(nil)
)

type instrumented struct {
	d       driver.Driver
	deleted prometheus.Counter

	get, put, reader, readRange, writer, stat, list, move, delete, walk, deleteFiles, commit, cancel *opMetrics
}

func (i *instrumented) Name() string { return i.d.Name() }

// Unwrap exposes the wrapped driver's optional interfaces (driver.As).
func (i *instrumented) Unwrap() driver.Driver { return i.d }

func (i *instrumented) GetContent(ctx context.Context, path string) ([]byte, error) {
	start := time.Now()
	b, err := i.d.GetContent(ctx, path)
	i.get.done(start, err)
	return b, err
}

func (i *instrumented) PutContent(ctx context.Context, path string, content []byte) error {
	start := time.Now()
	err := i.d.PutContent(ctx, path, content)
	i.put.done(start, err)
	return err
}

func (i *instrumented) Reader(ctx context.Context, path string, offset int64) (io.ReadCloser, error) {
	start := time.Now()
	rc, err := i.d.Reader(ctx, path, offset)
	i.reader.done(start, err)
	return rc, err
}

func (i *instrumented) ReadRange(ctx context.Context, path string, offset, length int64) (io.ReadCloser, error) {
	start := time.Now()
	rc, err := i.d.ReadRange(ctx, path, offset, length)
	i.readRange.done(start, err)
	return rc, err
}

func (i *instrumented) Writer(ctx context.Context, path string, append bool) (driver.FileWriter, error) {
	start := time.Now()
	w, err := i.d.Writer(ctx, path, append)
	i.writer.done(start, err)
	if err != nil {
		return nil, err
	}
	return &instrumentedWriter{FileWriter: w, commit: i.commit, cancel: i.cancel}, nil
}

func (i *instrumented) Stat(ctx context.Context, path string) (driver.FileInfo, error) {
	start := time.Now()
	fi, err := i.d.Stat(ctx, path)
	i.stat.done(start, err)
	return fi, err
}

// StatFile implements driver.FileStater, observed as a stat: without it
// driver.StatFile would reach the wrapped driver past the metrics.
func (i *instrumented) StatFile(ctx context.Context, path string) (driver.FileInfo, error) {
	start := time.Now()
	fi, err := driver.StatFile(ctx, i.d, path)
	i.stat.done(start, err)
	return fi, err
}

func (i *instrumented) List(ctx context.Context, path string) ([]string, error) {
	start := time.Now()
	out, err := i.d.List(ctx, path)
	i.list.done(start, err)
	return out, err
}

func (i *instrumented) Move(ctx context.Context, src, dst string) error {
	start := time.Now()
	err := i.d.Move(ctx, src, dst)
	i.move.done(start, err)
	return err
}

func (i *instrumented) Delete(ctx context.Context, path string) error {
	start := time.Now()
	err := i.d.Delete(ctx, path)
	i.delete.done(start, err)
	return err
}

// Walk is timed as a whole, including the time fn takes.
func (i *instrumented) Walk(ctx context.Context, path string, fn driver.WalkFn) error {
	start := time.Now()
	err := i.d.Walk(ctx, path, fn)
	i.walk.done(start, err)
	return err
}

func (i *instrumented) DeleteFiles(ctx context.Context, paths []string) (int, error) {
	start := time.Now()
	n, err := i.d.DeleteFiles(ctx, paths)
	i.deleteFiles.done(start, err)
	if n > 0 {
		i.deleted.Add(float64(n))
	}
	return n, err
}

type instrumentedWriter struct {
	driver.FileWriter
	commit, cancel *opMetrics
}

func (w *instrumentedWriter) Commit(ctx context.Context) error {
	start := time.Now()
	err := w.FileWriter.Commit(ctx)
	w.commit.done(start, err)
	return err
}

func (w *instrumentedWriter) Cancel(ctx context.Context) error {
	start := time.Now()
	err := w.FileWriter.Cancel(ctx)
	w.cancel.done(start, err)
	return err
}
