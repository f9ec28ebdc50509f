//go:build !unix

package cache

import "errors"

// volumeSpace is unknown here: entries are admitted, and a write that
// fails steps aside.
func volumeSpace(string) (avail, total int64, err error) {
	return 0, 0, errors.ErrUnsupported
}
