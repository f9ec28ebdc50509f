package meta

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"slices"

	"github.com/opencontainers/go-digest"
)

// The distinct, key-sorted file list of one AddLayerRefs call, and the
// key-list encoding of a layer's files that the Redis store keeps (and that
// bolt stores written before file ordinals hold; see the bolt store's schema.go).

// FileSet is the distinct files of one AddLayerRefs call, sorted by key so bolt
// writes land in page order.
type FileSet struct {
	Keys    [][]byte        // distinct, sorted; they share one buffer
	Digests []digest.Digest // Digests[j] is the digest of Keys[j]
	Pos     []int           // Pos[i] is the index in Keys of the call's files[i]
	First   []bool          // First[i]: files[i] is the first occurrence of its key
}

// NewFileSet sorts and dedups files by key; a digest that is not valid fails
// the call with ErrInvalidDigest.
func NewFileSet(files []digest.Digest) (FileSet, error) {
	buf := make([]byte, 0, 32*len(files))
	ends := make([]int, len(files))
	for i, d := range files {
		var err error
		if buf, err = AppendKey(buf, d); err != nil {
			return FileSet{}, err
		}
		ends[i] = len(buf)
	}
	all := make([][]byte, len(files))
	for i, end := range ends {
		start := 0
		if i > 0 {
			start = ends[i-1]
		}
		all[i] = buf[start:end:end]
	}
	order := make([]int, len(files))
	for i := range order {
		order[i] = i
	}
	// Stable, so the first occurrence of a duplicate comes first.
	slices.SortStableFunc(order, func(a, b int) int { return bytes.Compare(all[a], all[b]) })
	fs := FileSet{Pos: make([]int, len(files)), First: make([]bool, len(files))}
	for _, i := range order {
		if n := len(fs.Keys); n == 0 || !bytes.Equal(fs.Keys[n-1], all[i]) {
			fs.Keys = append(fs.Keys, all[i])
			fs.Digests = append(fs.Digests, files[i])
			fs.First[i] = true
		}
		fs.Pos[i] = len(fs.Keys) - 1
	}
	return fs, nil
}

// Encode is the layer file list as a list of keys: each key prefixed by its length as a uvarint
// (33 bytes per sha256 file), in key order, so equal sets encode equally.
func (fs FileSet) Encode() []byte {
	n := 0
	for _, k := range fs.Keys {
		n += binary.MaxVarintLen64 + len(k)
	}
	out := make([]byte, 0, n)
	for _, k := range fs.Keys {
		out = binary.AppendUvarint(out, uint64(len(k)))
		out = append(out, k...)
	}
	return out
}

// EachKey calls fn with each key of a layerfiles value.
func EachKey(v []byte, fn func(k []byte) error) error {
	for len(v) > 0 {
		n, w := binary.Uvarint(v)
		if w <= 0 || n > uint64(len(v)-w) {
			return fmt.Errorf("meta: corrupt layer file list")
		}
		if err := fn(v[w : w+int(n)]); err != nil {
			return err
		}
		v = v[w+int(n):]
	}
	return nil
}

// LayerFileSet checks AddLayerRefs' arguments: it returns the layer's key
// and the FileSet of its files.
func LayerFileSet(layer digest.Digest, files []digest.Digest) ([]byte, FileSet, error) {
	lk, err := KeyOf(layer)
	if err != nil {
		return nil, FileSet{}, err
	}
	fs, err := NewFileSet(files)
	return lk, fs, err
}

// Refs is AddLayerRefs' result for the call's files, from byKey, the
// outcome of each of fs.Keys: a digest listed twice gets its key's outcome,
// with Write and Revived only at its first occurrence (the contract).
func (fs FileSet) Refs(files []digest.Digest, byKey []FileRef) []FileRef {
	out := make([]FileRef, len(files))
	for i, d := range files {
		r := byKey[fs.Pos[i]]
		r.Digest = d
		if !fs.First[i] {
			r.Write, r.Revived = false, false
		}
		out[i] = r
	}
	return out
}
