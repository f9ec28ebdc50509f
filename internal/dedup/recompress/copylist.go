package recompress

import (
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"slices"

	"github.com/klauspost/compress/zstd"
)

// Stored copies. A member's copies are written to its recipe as one zstd
// frame ("copyList") of a format byte and signed varints in streams of one
// kind each, every field against the copy before: the gap since its end,
// the change of file, the first token against where the last copy of the
// same file ended, the token count, and the bytes beyond one per token. A
// copy then takes about two bytes where its JSON took eleven (compressed):
// spans make copies many and short. Recipes written before keep their
// copies as JSON ("copies"), which still reads.

// copyListFormat is the format byte of a copy list.
const copyListFormat = 1

// memberJSON is Member as its JSON has it.
type memberJSON struct {
	memberFields
	CopyList []byte `json:"copyList,omitempty"`
}

// memberFields is Member without its methods, so that its JSON is the
// default one.
type memberFields Member

// MarshalJSON writes m with its copies as a copy list.
func (m Member) MarshalJSON() ([]byte, error) {
	out := memberJSON{memberFields: memberFields(m)}
	if len(m.Copies) > 0 {
		var err error
		if out.CopyList, err = encodeCopies(m.Copies); err != nil {
			return nil, err
		}
		out.Copies = nil
	}
	return json.Marshal(out)
}

// UnmarshalJSON reads a member with copies in either form. A copy list
// that does not decode is dropped, as spans that do not are: the rebuild
// searches there, and no copy can fail a restore.
func (m *Member) UnmarshalJSON(b []byte) error {
	var in memberJSON
	if err := json.Unmarshal(b, &in); err != nil {
		return err
	}
	*m = Member(in.memberFields)
	if len(in.CopyList) > 0 {
		m.Copies, _ = decodeCopies(in.CopyList, m.Size)
	}
	return nil
}

// encodeCopies writes copies as a copy list.
func encodeCopies(copies []Copy) ([]byte, error) {
	raw := binary.AppendUvarint([]byte{copyListFormat}, uint64(len(copies)))
	var prev Copy
	ends := map[int]int{} // file -> where its last copy ended, in tokens
	fields := make([][]int64, 5)
	for _, c := range copies {
		fields[0] = append(fields[0], c.In-(prev.In+prev.Size))
		fields[1] = append(fields[1], int64(c.Source-prev.Source))
		fields[2] = append(fields[2], int64(c.First-ends[c.Source]))
		fields[3] = append(fields[3], int64(c.Count))
		fields[4] = append(fields[4], c.Size-int64(c.Count))
		ends[c.Source] = c.First + c.Count
		prev = c
	}
	for _, f := range fields {
		for _, v := range f {
			raw = binary.AppendVarint(raw, v)
		}
	}
	return sealFrame(raw)
}

var errBadCopies = errors.New("recompress: copy list does not decode")

// decodeCopies reads the copy list of a member of size input bytes. It
// checks only that it decodes: checkRestarts checks the copies' places,
// and a rebuild whether the parses have them.
func decodeCopies(b []byte, size int64) ([]Copy, error) {
	// A copy takes at most five varints of ten bytes and covers at least
	// a byte.
	_, n, raw, err := openFrame(b, []byte{copyListFormat}, uint64(50*size), uint64(size), errBadCopies)
	if err != nil {
		return nil, err
	}
	fields := make([][]int64, 5)
	for f := range fields {
		fields[f] = make([]int64, n)
		for i := range fields[f] {
			v, k := binary.Varint(raw)
			if k <= 0 {
				return nil, errBadCopies
			}
			fields[f][i], raw = v, raw[k:]
		}
	}
	if len(raw) != 0 {
		return nil, errBadCopies
	}
	copies := make([]Copy, n)
	var prev Copy
	ends := map[int]int{}
	for i := range copies {
		c := Copy{
			In:     prev.In + prev.Size + fields[0][i],
			Source: prev.Source + int(fields[1][i]),
			Count:  int(fields[3][i]),
		}
		c.First = ends[c.Source] + int(fields[2][i])
		c.Size = int64(c.Count) + fields[4][i]
		ends[c.Source] = c.First + c.Count
		copies[i], prev = c, c
	}
	return copies, nil
}

// Recipe frames: a member's copies and spans are each stored as one zstd
// frame of a format byte, a count and then the fields.

// sealFrame compresses raw as a recipe frame.
func sealFrame(raw []byte) ([]byte, error) {
	enc, err := zstd.NewWriter(nil, zstd.WithEncoderConcurrency(1))
	if err != nil {
		return nil, fmt.Errorf("recompress: recipe frame: %w", err)
	}
	defer enc.Close()
	return enc.EncodeAll(raw, nil), nil
}

// openFrame decompresses recipe frame b, at most limit bytes of it (zstd's
// least window at the least), and returns its format, its count, at most
// maxCount, and the fields after it; a frame that does not decode, or is
// not of one of formats, is bad.
func openFrame(b []byte, formats []byte, limit, maxCount uint64, bad error) (byte, uint64, []byte, error) {
	dec, err := zstd.NewReader(nil, zstd.WithDecoderConcurrency(1), zstd.WithDecoderMaxMemory(max(limit, 1<<20)))
	if err != nil {
		return 0, 0, nil, fmt.Errorf("recompress: recipe frame: %w", err)
	}
	defer dec.Close()
	raw, err := dec.DecodeAll(b, nil)
	if err != nil {
		return 0, 0, nil, fmt.Errorf("%w: %w", bad, err)
	}
	if len(raw) == 0 || !slices.Contains(formats, raw[0]) {
		return 0, 0, nil, bad
	}
	n, rest, ok := uvarint(raw[1:])
	if !ok || n > maxCount {
		return 0, 0, nil, bad
	}
	return raw[0], n, rest, nil
}
