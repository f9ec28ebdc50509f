package meta

import (
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/opencontainers/go-digest"
)

// What both stores check and encode alike, so that a call one store refuses
// the other refuses with the same error, and a value one writes reads the
// same in the other.

// LeaseMillis checks a lease's arguments and returns ttl in milliseconds,
// rounded up: Redis's unit, so both stores expire a lease at the same instant.
func LeaseMillis(name, holder string, ttl time.Duration) (int64, error) {
	if name == "" || holder == "" || len(name) > MaxLeaseName || len(holder) > MaxLeaseName || ttl <= 0 {
		return 0, fmt.Errorf("%w: name %d bytes, holder %d bytes, ttl %v", ErrInvalidLease, len(name), len(holder), ttl)
	}
	ms := int64(ttl / time.Millisecond)
	if ttl%time.Millisecond != 0 {
		ms++
	}
	return ms, nil
}

// CheckState fails with ErrInvalidState unless state is one of States.
func CheckState(state LayerState) error {
	if !state.Valid() {
		return fmt.Errorf("%w: %d", ErrInvalidState, state)
	}
	return nil
}

// CheckedLayerKey checks a layer state and returns the layer's key.
func CheckedLayerKey(layer digest.Digest, state LayerState) ([]byte, error) {
	if err := CheckState(state); err != nil {
		return nil, err
	}
	return KeyOf(layer)
}

// CheckStatName refuses AddStat's empty name.
func CheckStatName(name string) error {
	if name == "" {
		return errors.New("meta: add stat: empty name")
	}
	return nil
}

// ImageRecord checks SetImageLayers' arguments and returns the manifest's
// key and the layer list as both stores keep it: the digests, validated, one
// per line.
func ImageRecord(manifest digest.Digest, layers []digest.Digest) (key []byte, value string, err error) {
	key, err = KeyOf(manifest)
	if err != nil {
		return nil, "", err
	}
	var sb strings.Builder
	for i, l := range layers {
		if err := l.Validate(); err != nil {
			return nil, "", fmt.Errorf("%w: %q: %w", ErrInvalidDigest, l, err)
		}
		if i > 0 {
			sb.WriteByte('\n')
		}
		sb.WriteString(string(l))
	}
	return key, sb.String(), nil
}

// DecodeImageLayers reverses ImageRecord's value; an empty list is empty,
// not nil.
func DecodeImageLayers(v string) []digest.Digest {
	out := []digest.Digest{}
	if v == "" {
		return out
	}
	for l := range strings.SplitSeq(v, "\n") {
		out = append(out, digest.Digest(l))
	}
	return out
}

// Pick returns the files whose index keep reports true, in order: a bulk
// step's result, from what each file's step returned.
func Pick(files []digest.Digest, keep func(i int) bool) []digest.Digest {
	var out []digest.Digest
	for i, d := range files {
		if keep(i) {
			out = append(out, d)
		}
	}
	return out
}
