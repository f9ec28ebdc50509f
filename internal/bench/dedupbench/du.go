package dedupbench

import (
	"io/fs"
	"path/filepath"
	"syscall"
)

// diskUsage walks dir and returns the bytes its files hold (apparent) and
// the bytes the filesystem allocates for them (du): many small files waste
// most of a block each, which packs avoid.
func diskUsage(dir string) (apparent, onDisk int64, err error) {
	err = filepath.WalkDir(dir, func(_ string, d fs.DirEntry, err error) error {
		if err != nil || !d.Type().IsRegular() {
			return err
		}
		fi, err := d.Info()
		if err != nil {
			return err
		}
		apparent += fi.Size()
		if st, ok := fi.Sys().(*syscall.Stat_t); ok {
			onDisk += st.Blocks * 512
		} else {
			onDisk += fi.Size()
		}
		return nil
	})
	return apparent, onDisk, err
}
