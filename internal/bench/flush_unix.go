//go:build unix

package bench

import "syscall"

// flushDisks writes every dirty page of this machine to disk (sync(2)).
func flushDisks() { syscall.Sync() }
