//go:build unix

package filesystem

import "syscall"

// removeFile unlinks a file in one syscall; unlike os.Remove it never removes
// a directory (DeleteFiles deletes regular files only).
func removeFile(name string) error {
	for {
		if err := syscall.Unlink(name); err != syscall.EINTR {
			return err
		}
	}
}

// removeDir removes an empty directory in one syscall (os.Remove tries
// unlink first).
func removeDir(name string) error {
	for {
		if err := syscall.Rmdir(name); err != syscall.EINTR {
			return err
		}
	}
}
