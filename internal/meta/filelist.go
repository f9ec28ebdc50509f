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
// bolt stores written before file ordinals hold; see bolt_schema.go).

// fileSet is the distinct files of one AddLayerRefs call, sorted by key so bolt
// writes land in page order.
type fileSet struct {
	keys    [][]byte        // distinct, sorted; they share one buffer
	digests []digest.Digest // digests[j] is the digest of keys[j]
	pos     []int           // pos[i] is the index in keys of the call's files[i]
	first   []bool          // first[i]: files[i] is the first occurrence of its key
}

func newFileSet(files []digest.Digest) (fileSet, error) {
	buf := make([]byte, 0, 32*len(files))
	ends := make([]int, len(files))
	for i, d := range files {
		var err error
		if buf, err = appendKey(buf, d); err != nil {
			return fileSet{}, err
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
	fs := fileSet{pos: make([]int, len(files)), first: make([]bool, len(files))}
	for _, i := range order {
		if n := len(fs.keys); n == 0 || !bytes.Equal(fs.keys[n-1], all[i]) {
			fs.keys = append(fs.keys, all[i])
			fs.digests = append(fs.digests, files[i])
			fs.first[i] = true
		}
		fs.pos[i] = len(fs.keys) - 1
	}
	return fs, nil
}

// encode is the layer file list as a list of keys: each key prefixed by its length as a uvarint
// (33 bytes per sha256 file), in key order, so equal sets encode equally.
func (fs fileSet) encode() []byte {
	n := 0
	for _, k := range fs.keys {
		n += binary.MaxVarintLen64 + len(k)
	}
	out := make([]byte, 0, n)
	for _, k := range fs.keys {
		out = binary.AppendUvarint(out, uint64(len(k)))
		out = append(out, k...)
	}
	return out
}

// eachKey calls fn with each key of a layerfiles value.
func eachKey(v []byte, fn func(k []byte) error) error {
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
