package deflate

import (
	"bytes"
	stdflate "compress/flate"
	"io"
	"testing"
)

// FuzzWalk: Walk never panics, and it accepts exactly the streams Go's
// own inflater reads whole, finding the same size and the same end.
func FuzzWalk(f *testing.F) {
	in := layerLike(40<<10, 9)
	for _, level := range []int{-2, 0, 1, 2, 6, 9} {
		var b bytes.Buffer
		w, _ := NewWriter(&b, level)
		w.Write(in[:1000+level*3000+6000])
		w.Close()
		f.Add(b.Bytes())
		f.Add(b.Bytes()[:b.Len()/2])
	}
	f.Add([]byte{0x03, 0x00}) // one empty fixed block
	f.Fuzz(func(t *testing.T, data []byte) {
		size, bits, err := Walk(bytes.NewReader(data), nil)
		br := bytes.NewReader(data)
		n, ferr := io.Copy(io.Discard, stdflate.NewReader(br))
		if ferr != nil {
			if err == nil {
				t.Fatalf("Walk accepts %d bytes compress/flate refuses: %v", size, ferr)
			}
			return
		}
		if err != nil {
			t.Fatalf("compress/flate inflates %d bytes, Walk fails: %v", n, err)
		}
		if size != n {
			t.Fatalf("Walk finds %d bytes, compress/flate %d", size, n)
		}
		if end := int64(len(data) - br.Len()); (bits+7)/8 != end {
			t.Fatalf("Walk ends the stream in byte %d, compress/flate after %d", (bits+7)/8, end)
		}
	})
}
