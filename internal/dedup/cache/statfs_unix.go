//go:build unix

package cache

import "golang.org/x/sys/unix"

// volumeSpace returns the bytes available to this process on the volume
// holding dir, and the volume's size.
func volumeSpace(dir string) (avail, total int64, err error) {
	var st unix.Statfs_t
	if err := unix.Statfs(dir, &st); err != nil {
		return 0, 0, err
	}
	return int64(st.Bavail) * int64(st.Bsize), int64(st.Blocks) * int64(st.Bsize), nil
}
