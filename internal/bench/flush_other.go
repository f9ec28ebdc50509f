//go:build !unix

package bench

// flushDisks does nothing where sync(2) does not exist.
func flushDisks() {}
