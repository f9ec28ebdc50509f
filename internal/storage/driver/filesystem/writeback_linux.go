package filesystem

import (
	"os"

	"golang.org/x/sys/unix"
)

// startWriteback has the kernel start writing n bytes of f from off to
// disk, without waiting for it: sync_file_range(SYNC_FILE_RANGE_WRITE) on a
// duplicate of the descriptor, from a goroutine of its own, since the call
// blocks while the disk's queue is full. It is a hint only: it reports no
// error and consumes none, so a write the disk fails is still reported to
// the Commit (fsync) that makes the file durable.
func startWriteback(f *os.File, off, n int64) {
	fd, err := unix.Dup(int(f.Fd()))
	if err != nil {
		return
	}
	go func() {
		_ = unix.SyncFileRange(fd, off, n, unix.SYNC_FILE_RANGE_WRITE)
		_ = unix.Close(fd)
	}()
}
