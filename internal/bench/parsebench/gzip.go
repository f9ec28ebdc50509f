package parsebench

import (
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
)

// Gunzip decodes every gzip member of blob (RFC 1952) with Inflate,
// reporting each member's blocks and tokens to v at offsets continuing
// across members, and checks each member's CRC-32 and size. Bytes after
// the last member are ignored, as gzip readers do.
func Gunzip(blob []byte, v Visitor) ([]byte, error) {
	var out []byte
	if len(blob) >= 4 {
		// ISIZE of a single-member blob is its size mod 2^32: a good
		// first guess for the output's capacity.
		out = make([]byte, 0, binary.LittleEndian.Uint32(blob[len(blob)-4:]))
	}
	for member := 0; ; member++ {
		if len(blob) < 2 || blob[0] != 0x1f || blob[1] != 0x8b {
			if member == 0 {
				return nil, errors.New("parsebench: not gzip")
			}
			return out, nil
		}
		hdr, err := gzipHeaderLen(blob)
		if err != nil {
			return nil, fmt.Errorf("parsebench: gzip member %d: %w", member, err)
		}
		start := len(out)
		var n int
		if out, n, err = Inflate(out, blob[hdr:], v); err != nil {
			return nil, fmt.Errorf("parsebench: gzip member %d: %w", member, err)
		}
		blob = blob[hdr+n:]
		if len(blob) < 8 {
			return nil, fmt.Errorf("parsebench: gzip member %d: truncated trailer", member)
		}
		sum, size := binary.LittleEndian.Uint32(blob), binary.LittleEndian.Uint32(blob[4:])
		if got := crc32.ChecksumIEEE(out[start:]); got != sum || uint32(len(out)-start) != size {
			return nil, fmt.Errorf("parsebench: gzip member %d: CRC or size mismatch", member)
		}
		blob = blob[8:]
	}
}

// gzipHeaderLen is the length of the member header at the start of b.
func gzipHeaderLen(b []byte) (int, error) {
	const (
		fhcrc    = 1 << 1
		fextra   = 1 << 2
		fname    = 1 << 3
		fcomment = 1 << 4
	)
	if len(b) < 10 || b[2] != 8 {
		return 0, errors.New("bad header")
	}
	flg, n := b[3], 10
	if flg&fextra != 0 {
		if len(b) < n+2 {
			return 0, errors.New("truncated header")
		}
		n += 2 + int(binary.LittleEndian.Uint16(b[n:]))
	}
	for _, f := range []byte{fname, fcomment} {
		if flg&f == 0 {
			continue
		}
		for n < len(b) && b[n] != 0 {
			n++
		}
		n++ // the terminating zero
	}
	if flg&fhcrc != 0 {
		n += 2
	}
	if n > len(b) {
		return 0, errors.New("truncated header")
	}
	return n, nil
}
