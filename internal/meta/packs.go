package meta

import (
	"fmt"
	"time"
)

// What both stores share of the Packs implementation: argument checks and the
// clock's unit. Changed is kept in unix microseconds, the resolution of Redis's
// TIME, so both stores decide TombstonePack's age alike.

// CheckPackID checks a pack id: non-empty, at most MaxPackID bytes of
// printable ASCII without '/' (it names an object under cairn/packs).
func CheckPackID(id string) error {
	if id == "" || len(id) > MaxPackID {
		return fmt.Errorf("%w: pack id of %d bytes", ErrInvalidPack, len(id))
	}
	for i := 0; i < len(id); i++ {
		if c := id[i]; c <= ' ' || c > '~' || c == '/' {
			return fmt.Errorf("%w: pack id %q", ErrInvalidPack, id)
		}
	}
	return nil
}

// CheckPlacements checks PlaceFiles' arguments and returns the files' keys.
// A From is not checked: one that names no valid location matches no file,
// so that placement is merely not placed.
func CheckPlacements(id string, size int64, files []Placement) ([][]byte, error) {
	if err := CheckPackID(id); err != nil {
		return nil, err
	}
	if size < 0 {
		return nil, fmt.Errorf("%w: pack %s: size %d", ErrInvalidPack, id, size)
	}
	keys := make([][]byte, len(files))
	for i, p := range files {
		if p.Offset < 0 || p.Length <= 0 {
			return nil, fmt.Errorf("%w: pack %s: %s at %d, length %d", ErrInvalidPack, id, p.Digest, p.Offset, p.Length)
		}
		k, err := KeyOf(p.Digest)
		if err != nil {
			return nil, err
		}
		keys[i] = k
	}
	return keys, nil
}

// OlderThanMicros is TombstonePack's olderThan in microseconds, rounded up,
// so a pack is never taken for older than it is.
func OlderThanMicros(d time.Duration) int64 {
	us := int64(d / time.Microsecond)
	if d%time.Microsecond > 0 {
		us++
	}
	return us
}
