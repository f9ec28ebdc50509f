package recompress

import (
	"bytes"
	"compress/gzip"
	"testing"

	"github.com/cairn-registry/cairn/internal/dedup/recompress/deflate"
)

// TestHeaderLen: the deflate stream starts where HeaderLen says, with
// every optional field a header may carry.
func TestHeaderLen(t *testing.T) {
	var buf bytes.Buffer
	zw := gzip.NewWriter(&buf)
	zw.Name, zw.Comment, zw.Extra = "layer.tar", "a comment", []byte("extra field")
	zw.Write([]byte("the payload, the payload"))
	zw.Close()
	n, err := HeaderLen(buf.Bytes())
	if err != nil {
		t.Fatal(err)
	}
	out, err := deflate.NewDecoder(buf.Bytes()[n:]).DecodeAll(nil, nil)
	if err != nil || string(out) != "the payload, the payload" {
		t.Fatalf("inflated %q (%v) from byte %d", out, err, n)
	}
	if _, err := HeaderLen(buf.Bytes()[:n-1]); err == nil {
		t.Fatal("a header cut short was taken")
	}
	if _, err := HeaderLen([]byte("not gzip at all")); err == nil {
		t.Fatal("a non-gzip start was taken")
	}
}
