//go:build !unix

package filesystem

import (
	"os"
	"syscall"
)

// removeFile removes a file but never a directory.
func removeFile(name string) error {
	fi, err := os.Lstat(name)
	if err != nil {
		return err
	}
	if fi.IsDir() {
		return syscall.EISDIR
	}
	return os.Remove(name)
}

// removeDir removes an empty directory.
func removeDir(name string) error { return os.Remove(name) }
