package digestkey

import (
	_ "crypto/sha512" // registers sha384 and sha512 with go-digest

	"testing"

	"github.com/opencontainers/go-digest"
)

func TestSpellingsRoundTrip(t *testing.T) {
	var s Spellings
	for _, d := range []digest.Digest{digest.FromString("a"), digest.SHA512.FromString("a"), digest.SHA384.FromString("b")} {
		k, ok := s.Of(d)
		if !ok {
			t.Fatalf("Of(%s) refused", d)
		}
		if got := s.Digest(k); got != d {
			t.Errorf("Digest(Of(%s)) = %s", d, got)
		}
		if got := s.Hex(k); got != d.Encoded() {
			t.Errorf("Hex(Of(%s)) = %s", d, got)
		}
	}
	var fresh Spellings
	if k, _ := Of(digest.SHA512.FromString("a")); fresh.Hex(k) != "" {
		t.Error("a long key never parsed has a spelling")
	}
	if _, ok := s.Parse("sha256", digest.FromString("a").Encoded()[1:]); ok {
		t.Error("a short hex parsed")
	}
}
