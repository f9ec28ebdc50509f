package metrics

import (
	"context"
	"strconv"

	"github.com/cairn-registry/cairn/internal/storage/driver"
)

// The storage's optional interfaces, instrumented like the rest: without
// them driver.As would reach the wrapped driver past the metrics. An
// instrumented driver offers exactly the optional interfaces the driver it
// wraps offers, so one type per combination the drivers have.

// withOptional returns i, or i with the optional interfaces of the driver
// it wraps.
func withOptional(i *instrumented, ops map[string]*opMetrics) driver.Driver {
	if ipa, ok := driver.As[driver.InPlaceAppender](i.d); ok {
		return &instrumentedAppender{instrumented: i, ipa: ipa,
			putCached: ops[opPutCached], sync: ops[opSync], moveNew: ops[opMoveNew]}
	}
	st, stages := driver.As[driver.Stager](i.d)
	if !stages {
		return i
	}
	s := &instrumentedStager{instrumented: i, st: st, stage: ops[opStageWriter]}
	if c, ok := driver.As[driver.Concatenator](i.d); ok {
		return &instrumentedObjectStore{instrumentedStager: s, c: c, concat: ops[opConcat]}
	}
	return s
}

// instrumentedAppender is a filesystem's.
type instrumentedAppender struct {
	*instrumented
	ipa                      driver.InPlaceAppender
	putCached, sync, moveNew *opMetrics
}

var _ driver.InPlaceAppender = (*instrumentedAppender)(nil)

func (i *instrumentedAppender) CacheEpoch() string { return i.ipa.CacheEpoch() }

func (i *instrumentedAppender) PutCached(ctx context.Context, path string, content []byte) error {
	ctx, done := i.putCached.begin(ctx, path)
	err := i.ipa.PutCached(ctx, path, content)
	done(err)
	return err
}

func (i *instrumentedAppender) Sync(ctx context.Context, path string) error {
	ctx, done := i.sync.begin(ctx, path)
	err := i.ipa.Sync(ctx, path)
	done(err)
	return err
}

func (i *instrumentedAppender) MoveNew(ctx context.Context, src, dst string) error {
	ctx, done := i.moveNew.begin(ctx, dst)
	err := i.ipa.MoveNew(ctx, src, dst)
	done(err)
	return err
}

// instrumentedStager is an object store's (or inmemory's) that stages
// writes.
type instrumentedStager struct {
	*instrumented
	st    driver.Stager
	stage *opMetrics
}

var _ driver.Stager = (*instrumentedStager)(nil)

func (i *instrumentedStager) StageWriter(ctx context.Context, path string) (driver.FileWriter, error) {
	ctx, done := i.stage.begin(ctx, path)
	w, err := i.st.StageWriter(ctx, path)
	done(err)
	if err != nil {
		return nil, err
	}
	return &instrumentedWriter{FileWriter: w, commit: i.commit, cancel: i.cancel}, nil
}

// instrumentedObjectStore also joins files (S3, GCS).
type instrumentedObjectStore struct {
	*instrumentedStager
	c      driver.Concatenator
	concat *opMetrics
}

var _ driver.Concatenator = (*instrumentedObjectStore)(nil)

func (i *instrumentedObjectStore) Concat(ctx context.Context, dst string, srcs []driver.FileRange) error {
	ctx, done := i.concat.begin(ctx, dst+" from "+strconv.Itoa(len(srcs))+" files")
	err := i.c.Concat(ctx, dst, srcs)
	done(err)
	return err
}
