package server

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"syscall"
	"testing"

	"github.com/cairn-registry/cairn/internal/registry"
	"github.com/cairn-registry/cairn/internal/storage/driver"
	"github.com/cairn-registry/cairn/internal/storage/driver/inmemory"
)

// TestWriteErrorStorageRefusal: a write the storage refused, however deep
// in the registry's wrapping, is answered with a status and a message that
// name the cause, and logged once with the path the storage named; any
// other error stays an internal 500.
func TestWriteErrorStorageRefusal(t *testing.T) {
	const path = "/docker/registry/v2/repositories/a/_uploads/x/chunks/c"
	// As the filesystem driver and the registry wrap it.
	refused := func(kind error, errno syscall.Errno) error {
		err := driver.Refused(kind, fmt.Errorf("filesystem: %w", &fs.PathError{Op: "write", Path: path, Err: errno}))
		return fmt.Errorf("upload x: %w", err)
	}
	for _, tc := range []struct {
		name   string
		err    error
		errno  syscall.Errno
		status int
		msg    string
	}{
		{"no space", refused(driver.ErrNoSpace, syscall.ENOSPC), syscall.ENOSPC, http.StatusInsufficientStorage, "no space left"},
		{"quota", refused(driver.ErrNoSpace, syscall.EDQUOT), syscall.EDQUOT, http.StatusInsufficientStorage, "no space left"},
		{"read-only", refused(driver.ErrReadOnly, syscall.EROFS), syscall.EROFS, http.StatusServiceUnavailable, "read-only"},
		{"permission", refused(driver.ErrPermission, syscall.EACCES), syscall.EACCES, http.StatusServiceUnavailable, "permission denied"},
		// A cut body that met a full disk on the way is the disk's fault.
		{"joined with a cut body", errors.Join(errUnexpectedEOF(), refused(driver.ErrNoSpace, syscall.ENOSPC)), syscall.ENOSPC, http.StatusInsufficientStorage, "no space left"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if !errors.Is(tc.err, tc.errno) {
				t.Fatalf("errors.Is(%v, %v) is false through the wrapping", tc.err, tc.errno)
			}
			code, status, msg, logs := answer(t, tc.err)
			if status != tc.status || code != "UNKNOWN" || !strings.Contains(msg, tc.msg) {
				t.Fatalf("answered %d %s %q, want %d UNKNOWN naming %q", status, code, msg, tc.status, tc.msg)
			}
			if strings.Contains(msg, path) {
				t.Errorf("message %q shows the storage path to the client", msg)
			}
			if n := strings.Count(logs, "storage refused"); n != 1 || !strings.Contains(logs, path) || !strings.Contains(logs, tc.msg) {
				t.Errorf("log has %d lines about it, want 1 naming the path and %q:\n%s", n, tc.msg, logs)
			}
		})
	}
	t.Run("other storage errors", func(t *testing.T) {
		err := fmt.Errorf("filesystem: %w", &fs.PathError{Op: "write", Path: path, Err: syscall.EIO})
		if code, status, _, _ := answer(t, err); status != http.StatusInternalServerError || code != "UNKNOWN" {
			t.Fatalf("answered %d %s, want 500 UNKNOWN", status, code)
		}
	})
}

func errUnexpectedEOF() error { return fmt.Errorf("upload x: %w", io.ErrUnexpectedEOF) }

// answer runs writeError for err on a PATCH and returns the body's code,
// the status, the message and what was logged.
func answer(t *testing.T, err error) (code string, status int, msg, logs string) {
	t.Helper()
	var buf bytes.Buffer
	s := New(registry.New(inmemory.New(), registry.Options{}), Options{Logger: slog.New(slog.NewTextHandler(&buf, nil))})
	rec := httptest.NewRecorder()
	s.writeError(rec, httptest.NewRequest(http.MethodPatch, "/v2/a/blobs/uploads/x", nil), err)
	var body struct {
		Errors []apiError `json:"errors"`
	}
	if err := json.Unmarshal(rec.Body.Bytes(), &body); err != nil || len(body.Errors) != 1 {
		t.Fatalf("body %q: %v", rec.Body.String(), err)
	}
	return body.Errors[0].Code, rec.Code, body.Errors[0].Message, buf.String()
}

// TestWriteErrorUnavailableRetryAfter: what is unavailable for a while (a
// dedup index being rebuilt, an upstream) is a 503 UNAVAILABLE with a
// Retry-After, so clients back off and come back.
func TestWriteErrorUnavailableRetryAfter(t *testing.T) {
	s := New(registry.New(inmemory.New(), registry.Options{}), Options{Logger: slog.New(slog.DiscardHandler)})
	rec := httptest.NewRecorder()
	err := fmt.Errorf("layer x: %w", fmt.Errorf("%w: being rebuilt", registry.ErrUnavailable))
	s.writeError(rec, httptest.NewRequest(http.MethodGet, "/v2/a/blobs/sha256:00", nil), err)
	if rec.Code != http.StatusServiceUnavailable || rec.Header().Get("Retry-After") == "" || !strings.Contains(rec.Body.String(), "UNAVAILABLE") {
		t.Fatalf("answered %d, Retry-After %q, body %s", rec.Code, rec.Header().Get("Retry-After"), rec.Body)
	}
}
