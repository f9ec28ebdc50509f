package driver

import "context"

// Concatenator is implemented by drivers that join files into one on the
// storage service, without their bytes passing through cairn: S3 builds a
// multipart upload from part copies, GCS composes objects. An upload sent
// in chunks, one object each, is joined this way at commit; copying it
// through cairn instead costs a GET of every chunk and a second upload of
// the whole blob.
type Concatenator interface {
	// Concat makes dst the bytes of srcs, in order. dst appears whole or
	// not at all (readers see the file it replaces until then), and the
	// sources stay as they are. A range that runs past its source's end,
	// or a missing source, fails the call and leaves dst untouched.
	//
	// Where the service cannot join these ranges (GCS composes whole
	// objects only; S3 allows 10000 parts), Concat returns an error
	// wrapping errors.ErrUnsupported, having written nothing: the caller
	// copies the bytes itself.
	Concat(ctx context.Context, dst string, srcs []FileRange) error
}

// FileRange is Length bytes of the file at Path from byte Offset.
type FileRange struct {
	Path           string
	Offset, Length int64
}
