// Package layer splits an uncompressed layer tar into its raw tar metadata and
// its file contents, and rebuilds the byte-exact tar from them: the file-level
// half of cairn's dedup (docs/architecture.md, "The life of a dedup layer").
//
// Lifecycle: Disassemble streams a tar once, stores every file payload it has
// not seen before in a FileStore (content-addressed, never overwritten) and
// returns a Recipe holding the tar-split metadata (headers, padding, trailing
// bytes) plus the ordered payload digests. Assemble replays the recipe,
// reading payloads ahead in parallel while writing strictly in order, and
// checks each payload against its digest: a store's corrupt file fails the
// assembly, naming the file, rather than slip wrong bytes into the tar. A recipe
// must not be trusted until Verify has rebuilt the tar and matched the
// original digest and size; a layer that fails stays intact.
//
// A layer's compression is not this package's job: input and output are
// plain tar (package recompress rebuilds the compressed blob). Where the
// payloads are kept is the FileStore's: DriverStore keeps each one an
// object of its own (stores written before packs); package pack keeps
// them in packs and reads a recipe's payloads with few ranged reads.
package layer

import (
	"context"
	"errors"
	"io"

	"github.com/opencontainers/go-digest"
)

// Sink is where Disassemble stores payloads it has not seen.
type Sink interface {
	// Has reports whether the payload with digest d is stored.
	Has(ctx context.Context, d digest.Digest) (bool, error)
	// Put stores size bytes read from r under d. The caller vouches that
	// they hash to d.
	Put(ctx context.Context, d digest.Digest, size int64, r io.Reader) error
}

// FileStore holds file payloads by the sha256 digest of their uncompressed
// bytes. Put of a digest already present is a no-op; content is visible to
// Has and Open only once complete.
type FileStore interface {
	Sink
	// Open streams the uncompressed payload stored under d. A payload
	// that is absent fails with an error wrapping driver.ErrNotFound; one
	// whose stored bytes do not decode, with one wrapping ErrCorruptFile.
	// Assemble checks every payload's size and digest itself.
	Open(ctx context.Context, d digest.Digest) (io.ReadCloser, error)
}

// Streamer is a FileStore that reads many payloads in a few requests:
// Assemble uses Stream instead of one Open per payload when the store has
// it.
type Streamer interface {
	// Stream returns the payloads of files, in order, each as Open would
	// (the same errors); the store reads ahead as it sees fit, within
	// bounds of its own.
	Stream(ctx context.Context, files []File) (Payloads, error)
}

// Payloads hands out a Stream's payloads in order.
type Payloads interface {
	// Next returns the next payload; the caller closes it before the
	// next call.
	Next() (io.ReadCloser, error)
	// Close ends the stream, freeing what was read ahead.
	Close() error
}

// Whole is a payload a store already holds whole in memory (a small file
// it decompressed in one go), not yet read: Assemble checks its bytes in
// place instead of reading them into a buffer of its own.
type Whole interface {
	io.ReadCloser
	// Bytes is the whole payload; it does not change while being read.
	Bytes() []byte
}

// Recipe rebuilds one tar byte for byte from a FileStore.
type Recipe struct {
	// TarDigest and TarSize describe the uncompressed tar it was made from.
	TarDigest digest.Digest `json:"tarDigest"`
	TarSize   int64         `json:"tarSize"`
	// Meta is tar-split's JSON-lines entry stream (raw headers, padding, and
	// one entry per tar member with its size and crc64), zstd-compressed.
	Meta []byte `json:"meta"`
	// Files are the payloads of the members with a non-empty body, in tar
	// order. Duplicate paths appear once per occurrence, which is why
	// assembly follows this order and never looks payloads up by name.
	Files []File `json:"files"`
}

// File is one payload referenced by a Recipe.
type File struct {
	Digest digest.Digest `json:"digest"`
	Size   int64         `json:"size"`
}

var (
	// ErrNotReproducible marks a tar whose bytes are not the sum of its raw
	// metadata and member payloads, such as one with sparse members (tar
	// readers expand holes, so the payload is not what the tar holds).
	ErrNotReproducible = errors.New("layer: tar cannot be split byte-exactly")
	// ErrMismatch marks an assembly whose output differs from the recipe's
	// tar digest or size, or whose payloads disagree with the metadata.
	ErrMismatch = errors.New("layer: assembled tar does not match recipe")
	// ErrCorruptFile marks a stored payload that is not the one its digest
	// names: its stored bytes do not decode, or it has another size or
	// digest. Assembly fails rather than emit it.
	ErrCorruptFile = errors.New("layer: stored file is corrupt")
	// ErrTooMuchMetadata marks a tar whose non-payload bytes (headers,
	// padding, trailing data) exceed the bound kept in memory.
	ErrTooMuchMetadata = errors.New("layer: tar metadata too large")
)

// FileError is the failure to read one payload during assembly: Digest
// names it, Err says why (wrapping driver.ErrNotFound for a missing file,
// ErrCorruptFile for a corrupt one, or the store's read error).
type FileError struct {
	Digest digest.Digest
	Err    error
}

func (e *FileError) Error() string { return "layer: file " + string(e.Digest) + ": " + e.Err.Error() }

func (e *FileError) Unwrap() error { return e.Err }
