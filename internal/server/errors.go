package server

import (
	"encoding/json"
	"errors"
	"io"
	"net/http"

	"github.com/cairn-registry/cairn/internal/auth"
	"github.com/cairn-registry/cairn/internal/registry"
	"github.com/cairn-registry/cairn/internal/storage/driver"
)

// apiError is one entry of an OCI error body.
type apiError struct {
	Code    string `json:"code"`
	Message string `json:"message"`
	Detail  any    `json:"detail,omitempty"`
}

// errorKind maps a registry error to its OCI code and HTTP status.
type errorKind struct {
	target error
	code   string
	status int
}

var errorKinds = [...]errorKind{
	{registry.ErrNameInvalid, "NAME_INVALID", http.StatusBadRequest},
	{registry.ErrNameUnknown, "NAME_UNKNOWN", http.StatusNotFound},
	{registry.ErrTagInvalid, "TAG_INVALID", http.StatusBadRequest},
	{registry.ErrDigestInvalid, "DIGEST_INVALID", http.StatusBadRequest},
	{registry.ErrBlobUnknown, "BLOB_UNKNOWN", http.StatusNotFound},
	{registry.ErrUploadUnknown, "BLOB_UPLOAD_UNKNOWN", http.StatusNotFound},
	{registry.ErrUploadInvalid, "BLOB_UPLOAD_INVALID", http.StatusBadRequest},
	{registry.ErrManifestUnknown, "MANIFEST_UNKNOWN", http.StatusNotFound},
	{registry.ErrManifestInvalid, "MANIFEST_INVALID", http.StatusBadRequest},
	{registry.ErrManifestBlobUnknown, "MANIFEST_BLOB_UNKNOWN", http.StatusBadRequest},
	{registry.ErrManifestTooLarge, "SIZE_INVALID", http.StatusRequestEntityTooLarge},
	{registry.ErrSizeInvalid, "SIZE_INVALID", http.StatusBadRequest},
	{registry.ErrUnsupported, "UNSUPPORTED", http.StatusMethodNotAllowed},
	{registry.ErrPaginationInvalid, "PAGINATION_NUMBER_INVALID", http.StatusBadRequest},
	{registry.ErrUnavailable, "UNAVAILABLE", http.StatusServiceUnavailable}, // as distribution
	{errDenied, "DENIED", http.StatusForbidden},
	{registry.ErrDenied, "DENIED", http.StatusForbidden},
	{errUnsupportedRoute, "UNSUPPORTED", http.StatusNotFound},
	{errMethodNotAllowed, "UNSUPPORTED", http.StatusMethodNotAllowed},
	{errTooManyRequests, "TOOMANYREQUESTS", http.StatusTooManyRequests},
	{errBadRange, "RANGE_INVALID", http.StatusRequestedRangeNotSatisfiable},
	// A request body shorter than its Content-Length: the client went away
	// or lied about its length. Nothing was committed.
	{io.ErrUnexpectedEOF, "SIZE_INVALID", http.StatusBadRequest},
}

// storageRefusals answers a request the storage itself refused. The OCI
// spec has no code for a server that cannot store: these keep
// distribution's code for server failures, UNKNOWN, which every client
// already meets (Docker-lineage clients read a code they do not know as
// UNKNOWN anyway, so a cairn-specific one would gain nothing), and name
// the cause in the status and message, which clients print. A full disk is 507 Insufficient
// Storage (RFC 4918); a read-only or forbidden storage, 503, since the
// registry cannot take writes until an operator acts. The message names no
// path: the log line does.
var storageRefusals = [...]struct {
	target error
	status int
	msg    string
}{
	{driver.ErrNoSpace, http.StatusInsufficientStorage, "no space left on the registry's storage: the write was refused and nothing of it kept"},
	{driver.ErrReadOnly, http.StatusServiceUnavailable, "the registry's storage is read-only: writes are refused"},
	{driver.ErrPermission, http.StatusServiceUnavailable, "permission denied by the registry's storage"},
}

// isStorageRefusal reports whether the storage refused err's write and
// then sets the status and message to answer it with.
func isStorageRefusal(err error, status *int, msg *string) bool {
	for _, k := range storageRefusals {
		if errors.Is(err, k.target) {
			*status, *msg = k.status, k.msg
			return true
		}
	}
	return false
}

var (
	errDenied           = errors.New("requested access to the resource is denied: the registry is read-only")
	errUnsupportedRoute = errors.New("no such API endpoint")
	errMethodNotAllowed = errors.New("method not allowed on this endpoint")
	errTooManyRequests  = errors.New("too many requests")
	errBadRange         = errors.New("invalid content range")
)

// writeError answers err as an OCI error body. Errors of unknown kind are
// internal: logged in full, answered without detail.
func (s *Server) writeError(w http.ResponseWriter, r *http.Request, err error) {
	code, status, msg := "UNKNOWN", http.StatusInternalServerError, "internal server error"
	var rangeErr *registry.RangeError
	var maxBytes *http.MaxBytesError
	switch {
	case errors.As(err, &rangeErr):
		code, status, msg = "RANGE_INVALID", http.StatusRequestedRangeNotSatisfiable, err.Error()
		w.Header().Set("Range", rangeHeader(rangeErr.Size))
	case errors.As(err, &maxBytes):
		code, status, msg = "SIZE_INVALID", http.StatusRequestEntityTooLarge, err.Error()
	case isStorageRefusal(err, &status, &msg):
		// Once per request, with the path the storage named in err.
		s.log.ErrorContext(r.Context(), "storage refused the request", "cause", msg, "method", r.Method, "path", r.URL.Path, "err", err)
	default:
		found := false
		for _, k := range errorKinds {
			if errors.Is(err, k.target) {
				code, status, msg, found = k.code, k.status, err.Error(), true
				break
			}
		}
		if !found {
			s.log.ErrorContext(r.Context(), "internal error", "method", r.Method, "path", r.URL.Path, "err", err)
		}
	}
	if errors.Is(err, registry.ErrUnavailable) && w.Header().Get("Retry-After") == "" {
		// What is unavailable comes back by itself (an upstream, the dedup
		// index being rebuilt): clients that honour it back off.
		w.Header().Set("Retry-After", retryAfterSeconds)
	}
	writeErrorBody(w, status, apiError{Code: code, Message: msg})
}

// retryAfterSeconds is the Retry-After of an UNAVAILABLE answer.
const retryAfterSeconds = "5"

func writeErrorBody(w http.ResponseWriter, status int, e apiError) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	json.NewEncoder(w).Encode(struct {
		Errors []apiError `json:"errors"`
	}{[]apiError{e}})
}

// isRangeError reports a chunk the upload cannot take at its offset.
func isRangeError(err error) bool {
	var re *registry.RangeError
	return errors.As(err, &re) || errors.Is(err, errBadRange)
}

// writeAuthError answers a refused authorization: 401 UNAUTHORIZED or 403
// DENIED with the authorizer's WWW-Authenticate challenge, and as detail
// the accesses the request needed. The body says nothing about whether
// what the request named exists.
func (s *Server) writeAuthError(w http.ResponseWriter, r *http.Request, err error) {
	var ch *auth.Challenge
	if !errors.As(err, &ch) {
		s.writeError(w, r, err)
		return
	}
	s.log.DebugContext(r.Context(), "request refused", "method", r.Method, "path", r.URL.Path, "err", err)
	if h := ch.Header(); h != "" {
		w.Header().Set("WWW-Authenticate", h)
	}
	e := apiError{Code: ch.Code(), Message: ch.Message()}
	if need := ch.Need(); len(need) > 0 {
		e.Detail = need
	}
	writeErrorBody(w, ch.Status(), e)
}
