// Package pack keeps dedup's unique files in packs: write-once objects of
// tens of MiB holding many files, each compressed on its own (one zstd
// frame), in the order a layer lists them, followed by the pack's own index.
// On an object store a file of its own costs requests per file to write and
// to read; a pack costs requests per tens of MiB, so that what a layer's
// restore pays follows its bytes, not its file count (docs/architecture.md,
// "Packs").
//
// Lifecycle of a pack: a Writer records the pack (meta BeginPack), streams
// the files into its object (one PUT, or one multipart upload), appends the
// index and footer, commits, and only then records where each file is (meta
// PlaceFiles, with the pack's size). Until then nothing points into the
// pack, so a crash leaves an unreferenced pack that GC removes after its
// delay. A Store reads a layer's files with few ranged reads: it resolves
// every location with one metadata call, coalesces adjacent files into
// spans (reading small gaps through), keeps several spans in flight and
// hands the files out in order. Files of stores written before packs (one
// object each under cairn/files) are read from there. GC lowers a pack's
// live bytes as its files die, compacts packs that fall sparse (Compact)
// and deletes empty ones (the meta package doc tells those steps).
//
// Object format (all integers big-endian):
//
//	header  "CAIRNPK\x01"
//	frames  one zstd frame per file, back to back
//	index   zstd frame of the entries: per file uvarint len(digest), digest,
//	        uvarint offset, uvarint length (stored bytes), uvarint size
//	footer  index offset (8), index length (8), crc32c of the index (4),
//	        4 zero bytes, "CAIRNPKX"
//
// The index makes a store rebuildable from its packs alone.
package pack

import (
	"bytes"
	"crypto/rand"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"hash/crc32"

	"github.com/opencontainers/go-digest"
)

const (
	header     = "CAIRNPK\x01"
	footerTag  = "CAIRNPKX"
	footerSize = 32
	// maxIndex bounds the index a reader decodes: a pack of tens of MiB of
	// files holds at most a few hundred thousand entries.
	maxIndex = 64 << 20
)

// HeaderSize is the bytes a pack's header takes before its first frame:
// part of a pack's record Size that no file ever uses.
const HeaderSize = int64(len(header))

// ErrFormat marks bytes that are not a pack, or a damaged one.
var ErrFormat = errors.New("pack: not a pack or damaged")

// Entry is one file in a pack: Length stored bytes at Offset, which
// decompress to Size bytes with digest Digest.
type Entry struct {
	Digest digest.Digest
	Offset int64
	Length int64
	Size   int64
}

// NewID returns a fresh pack id: 32 lower-case hex digits.
func NewID() (string, error) {
	var b [16]byte
	if _, err := rand.Read(b[:]); err != nil {
		return "", fmt.Errorf("pack: id: %w", err)
	}
	return hex.EncodeToString(b[:]), nil
}

// encodeIndex returns the uncompressed index of entries.
func encodeIndex(entries []Entry) []byte {
	var b []byte
	for _, e := range entries {
		b = binary.AppendUvarint(b, uint64(len(e.Digest)))
		b = append(b, e.Digest...)
		b = binary.AppendUvarint(b, uint64(e.Offset))
		b = binary.AppendUvarint(b, uint64(e.Length))
		b = binary.AppendUvarint(b, uint64(e.Size))
	}
	return b
}

// decodeIndex reverses encodeIndex, checking every entry.
func decodeIndex(b []byte) ([]Entry, error) {
	var out []Entry
	for len(b) > 0 {
		n, k := binary.Uvarint(b)
		if k <= 0 || n > uint64(len(b)-k) || n > 200 {
			return nil, fmt.Errorf("%w: index entry %d", ErrFormat, len(out))
		}
		d := digest.Digest(b[k : k+int(n)])
		b = b[k+int(n):]
		var v [3]int64
		for i := range v {
			x, k := binary.Uvarint(b)
			if k <= 0 || x > 1<<62 {
				return nil, fmt.Errorf("%w: index entry %d", ErrFormat, len(out))
			}
			v[i], b = int64(x), b[k:]
		}
		if d.Validate() != nil || v[0] < int64(len(header)) || v[1] <= 0 {
			return nil, fmt.Errorf("%w: index entry %d", ErrFormat, len(out))
		}
		out = append(out, Entry{Digest: d, Offset: v[0], Length: v[1], Size: v[2]})
	}
	return out, nil
}

// crcTable is Castagnoli's, the checksum of the footer.
var crcTable = crc32.MakeTable(crc32.Castagnoli)

func crc32Sum(b []byte) uint32 { return crc32.Checksum(b, crcTable) }

// footer returns the footer of an index of n stored bytes at off.
func footer(off int64, index []byte) []byte {
	b := make([]byte, 0, footerSize)
	b = binary.BigEndian.AppendUint64(b, uint64(off))
	b = binary.BigEndian.AppendUint64(b, uint64(len(index)))
	b = binary.BigEndian.AppendUint32(b, crc32Sum(index))
	b = append(b, 0, 0, 0, 0)
	return append(b, footerTag...)
}

// parseFooter returns the index's offset, length and checksum from the
// last footerSize bytes of a pack of size bytes.
func parseFooter(b []byte, size int64) (off, n int64, sum uint32, err error) {
	if len(b) != footerSize || !bytes.Equal(b[24:], []byte(footerTag)) {
		return 0, 0, 0, fmt.Errorf("%w: no footer", ErrFormat)
	}
	off = int64(binary.BigEndian.Uint64(b))
	n = int64(binary.BigEndian.Uint64(b[8:]))
	sum = binary.BigEndian.Uint32(b[16:])
	if off < int64(len(header)) || n <= 0 || n > maxIndex || off+n != size-footerSize {
		return 0, 0, 0, fmt.Errorf("%w: footer names index %d+%d in %d bytes", ErrFormat, off, n, size)
	}
	return off, n, sum, nil
}
