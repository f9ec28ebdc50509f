//go:build !linux

package filesystem

import "context"

// WillRead hints that the file at p is about to be read; without
// posix_fadvise it only checks the file is there, and the page cache
// reads ahead once the GET starts.
func (d *Driver) WillRead(_ context.Context, p string) error {
	f, _, err := d.openFile(p)
	if err != nil {
		return err
	}
	return f.Close()
}
