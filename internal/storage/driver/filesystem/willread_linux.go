package filesystem

import (
	"context"

	"golang.org/x/sys/unix"
)

// WillRead hints that the file at p is about to be read (a predicted
// pull): the kernel starts reading it into the page cache (posix_fadvise
// WILLNEED) and the call returns.
// A prefetch into memory of our own would only copy what the page cache
// holds, and a GET reading it would lose sendfile.
func (d *Driver) WillRead(_ context.Context, p string) error {
	f, _, err := d.openFile(p)
	if err != nil {
		return err
	}
	defer f.Close()
	if err := unix.Fadvise(int(f.Fd()), 0, 0, unix.FADV_WILLNEED); err != nil {
		return wrap(err)
	}
	return nil
}
