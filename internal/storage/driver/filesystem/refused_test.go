package filesystem

import (
	"errors"
	"io/fs"
	"syscall"
	"testing"

	"github.com/cairn-registry/cairn/internal/storage/driver"
)

// TestWrapRefusals: the errnos of a storage that refuses writes match the
// driver's refusal kinds, and still match themselves.
func TestWrapRefusals(t *testing.T) {
	for _, tc := range []struct {
		errno syscall.Errno
		kind  error
	}{
		{syscall.ENOSPC, driver.ErrNoSpace},
		{syscall.EDQUOT, driver.ErrNoSpace},
		{syscall.EROFS, driver.ErrReadOnly},
		{syscall.EACCES, driver.ErrPermission},
		{syscall.EPERM, driver.ErrPermission},
		{syscall.EIO, nil},
	} {
		err := wrap(&fs.PathError{Op: "write", Path: "/x", Err: tc.errno})
		if !errors.Is(err, tc.errno) {
			t.Errorf("%v: errors.Is(err, errno) is false", tc.errno)
		}
		for _, k := range []error{driver.ErrNoSpace, driver.ErrReadOnly, driver.ErrPermission} {
			if got := errors.Is(err, k); got != (k == tc.kind) {
				t.Errorf("%v: errors.Is(err, %v) = %v", tc.errno, k, got)
			}
		}
		if err.Error() != "filesystem: write /x: "+tc.errno.Error() {
			t.Errorf("%v: message %q", tc.errno, err)
		}
	}
}
