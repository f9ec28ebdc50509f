// Package faults damages what the tests hand it, as a disk or an operator
// would: bytes overwritten in place.
package faults

import (
	"os"
	"testing"
)

// Garbage is what Overwrite writes: 12 bytes, as the fault pass that found
// bbolt's panics used.
const Garbage = "\xde\xad\xbe\xef\xde\xad\xbe\xef\xde\xad\xbe\xef"

// Overwrite writes Garbage at each offset of the file at path.
func Overwrite(t testing.TB, path string, offsets ...int64) {
	t.Helper()
	f, err := os.OpenFile(path, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	for _, off := range offsets {
		if _, err := f.WriteAt([]byte(Garbage), off); err != nil {
			t.Fatal(err)
		}
	}
}
