package metrics

import (
	"context"
	"errors"
	"io"
	"strconv"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/noop"

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
	// The optional interfaces' methods (see optional.go).
	opPutCached   = "put_cached"
	opSync        = "sync"
	opMoveNew     = "move_new"
	opConcat      = "concat"
	opStageWriter = "stage_writer"
)

var operations = [...]string{
	opGetContent, opPutContent, opReader, opReadRange, opWriter, opStat, opList,
	opMove, opDelete, opWalk, opDeleteFiles, opCommit, opCancel,
	opPutCached, opSync, opMoveNew, opConcat, opStageWriter,
}

// opMetrics are one operation's collectors, resolved once so that a call
// costs no label lookup (GC and dedup make millions of calls).
type opMetrics struct {
	calls   prometheus.Counter
	errors  prometheus.Counter
	latency prometheus.Observer
	name    string       // the span's name: "storage." + the operation
	tracer  trace.Tracer // a no-op one when tracing is off
}

// begin starts timing one call, in a span of its own (a child of ctx's)
// naming the path; the returned func ends both.
func (o *opMetrics) begin(ctx context.Context, path string) (context.Context, func(error)) {
	ctx, span := o.tracer.Start(ctx, o.name, trace.WithSpanKind(trace.SpanKindClient), trace.WithAttributes(attribute.String("cairn.storage.path", path)))
	start := time.Now()
	return ctx, func(err error) {
		o.calls.Inc()
		o.latency.Observe(time.Since(start).Seconds())
		if failed(err) {
			o.errors.Inc()
			span.SetStatus(codes.Error, err.Error())
		}
		span.End()
	}
}

// failed tells storage failures from answers: a missing path is how the
// registry learns that something does not exist, and a caller that gave up
// (context.Canceled: the client went away) is not the storage's fault.
func failed(err error) bool {
	return err != nil && !errors.Is(err, driver.ErrNotFound) && !errors.Is(err, context.Canceled)
}

// InstrumentDriver returns d with every call counted by operation, timed,
// its failures counted, and traced as a span by tracer (nil: none).
// Readers are returned unwrapped, so that blob GETs keep the kernel's
// sendfile path; writers are wrapped to time Commit and Cancel.
func InstrumentDriver(d driver.Driver, m *Metrics, tracer trace.Tracer) driver.Driver {
	if tracer == nil {
		tracer = noop.NewTracerProvider().Tracer("")
	}
	name := d.Name()
	ops := make(map[string]*opMetrics, len(operations))
	for _, op := range operations {
		ops[op] = &opMetrics{
			calls:   m.storageOps.WithLabelValues(name, op),
			errors:  m.storageErrors.WithLabelValues(name, op),
			latency: m.storageLatency.WithLabelValues(name, op),
			name:    "storage." + op,
			tracer:  tracer,
		}
	}
	i := &instrumented{
		d:       d,
		deleted: m.storageDeleted.WithLabelValues(name),
		get:     ops[opGetContent], put: ops[opPutContent], reader: ops[opReader], readRange: ops[opReadRange],
		writer: ops[opWriter], stat: ops[opStat], list: ops[opList], move: ops[opMove], delete: ops[opDelete],
		walk: ops[opWalk], deleteFiles: ops[opDeleteFiles], commit: ops[opCommit],
		cancel: ops[opCancel],
	}
	return withOptional(i, ops)
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
	ctx, done := i.get.begin(ctx, path)
	b, err := i.d.GetContent(ctx, path)
	done(err)
	return b, err
}

func (i *instrumented) PutContent(ctx context.Context, path string, content []byte) error {
	ctx, done := i.put.begin(ctx, path)
	err := i.d.PutContent(ctx, path, content)
	done(err)
	return err
}

func (i *instrumented) Reader(ctx context.Context, path string, offset int64) (io.ReadCloser, error) {
	ctx, done := i.reader.begin(ctx, path)
	rc, err := i.d.Reader(ctx, path, offset)
	done(err)
	return rc, err
}

func (i *instrumented) ReadRange(ctx context.Context, path string, offset, length int64) (io.ReadCloser, error) {
	ctx, done := i.readRange.begin(ctx, path)
	rc, err := i.d.ReadRange(ctx, path, offset, length)
	done(err)
	return rc, err
}

func (i *instrumented) Writer(ctx context.Context, path string, append bool) (driver.FileWriter, error) {
	ctx, done := i.writer.begin(ctx, path)
	w, err := i.d.Writer(ctx, path, append)
	done(err)
	if err != nil {
		return nil, err
	}
	return &instrumentedWriter{FileWriter: w, commit: i.commit, cancel: i.cancel}, nil
}

func (i *instrumented) Stat(ctx context.Context, path string) (driver.FileInfo, error) {
	ctx, done := i.stat.begin(ctx, path)
	fi, err := i.d.Stat(ctx, path)
	done(err)
	return fi, err
}

// StatFile implements driver.FileStater, observed as a stat: without it
// driver.StatFile would reach the wrapped driver past the metrics.
func (i *instrumented) StatFile(ctx context.Context, path string) (driver.FileInfo, error) {
	ctx, done := i.stat.begin(ctx, path)
	fi, err := driver.StatFile(ctx, i.d, path)
	done(err)
	return fi, err
}

func (i *instrumented) List(ctx context.Context, path string) ([]string, error) {
	ctx, done := i.list.begin(ctx, path)
	out, err := i.d.List(ctx, path)
	done(err)
	return out, err
}

func (i *instrumented) Move(ctx context.Context, src, dst string) error {
	ctx, done := i.move.begin(ctx, "")
	err := i.d.Move(ctx, src, dst)
	done(err)
	return err
}

func (i *instrumented) Delete(ctx context.Context, path string) error {
	ctx, done := i.delete.begin(ctx, path)
	err := i.d.Delete(ctx, path)
	done(err)
	return err
}

// Walk is timed as a whole, including the time fn takes.
func (i *instrumented) Walk(ctx context.Context, path string, fn driver.WalkFn) error {
	ctx, done := i.walk.begin(ctx, path)
	err := i.d.Walk(ctx, path, fn)
	done(err)
	return err
}

func (i *instrumented) DeleteFiles(ctx context.Context, paths []string) (int, error) {
	ctx, done := i.deleteFiles.begin(ctx, strconv.Itoa(len(paths))+" paths")
	n, err := i.d.DeleteFiles(ctx, paths)
	done(err)
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
	ctx, done := w.commit.begin(ctx, "")
	err := w.FileWriter.Commit(ctx)
	done(err)
	return err
}

func (w *instrumentedWriter) Cancel(ctx context.Context) error {
	ctx, done := w.cancel.begin(ctx, "")
	err := w.FileWriter.Cancel(ctx)
	done(err)
	return err
}
