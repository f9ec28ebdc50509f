package registry

import (
	"errors"
	"fmt"

	"github.com/cairn-registry/cairn/internal/manifest"
)

// Errors the registry returns, wrapped with detail. The server maps each to
// its OCI error code and HTTP status with errors.Is.
var (
	ErrNameInvalid         = errors.New("invalid repository name")
	ErrNameUnknown         = errors.New("repository name not known to registry")
	ErrTagInvalid          = errors.New("invalid tag")
	ErrDigestInvalid       = errors.New("provided digest did not match uploaded content")
	ErrBlobUnknown         = errors.New("blob unknown to registry")
	ErrUploadUnknown       = errors.New("blob upload unknown to registry")
	ErrUploadInvalid       = errors.New("blob upload invalid")
	ErrManifestUnknown     = errors.New("manifest unknown")
	ErrManifestInvalid     = manifest.ErrInvalid // what manifest.Parse fails with
	ErrManifestBlobUnknown = errors.New("manifest references a blob unknown to the repository")
	ErrManifestTooLarge    = errors.New("manifest too large")
	ErrSizeInvalid         = errors.New("provided length did not match content length")
	ErrUnsupported         = errors.New("the operation is unsupported")
	ErrPaginationInvalid   = errors.New("invalid pagination parameter")
	// ErrUnavailable: a pull-through cache's upstream could not answer
	// for content the cache does not hold.
	ErrUnavailable = errors.New("service unavailable")
	// ErrDenied: the registry's policy does not allow the content.
	ErrDenied = errors.New("requested access to the resource is denied")
)

// RangeError reports a chunk that does not continue an upload, or a request
// on a session another request is writing (Busy); Size is how many bytes
// the upload holds, for the client to resume from.
type RangeError struct {
	Size int64
	Busy bool
}

func (e *RangeError) Error() string {
	if e.Busy {
		return fmt.Sprintf("upload session in use by another request: it holds %d bytes", e.Size)
	}
	return fmt.Sprintf("chunk out of order: upload holds %d bytes", e.Size)
}
