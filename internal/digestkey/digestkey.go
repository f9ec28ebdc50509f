// Package digestkey holds digests in fixed size, for the sets that must stay
// small however large the registry: the garbage collector's marked set and
// scrub's sets of blobs and files. A Key is an algorithm code and the first
// 32 bytes of the sum (all of a sha256 sum): 33 bytes, no strings, no
// pointers. Two sha384 or sha512 digests that share their first 256 bits
// do not exist in practice; callers keep the full spelling of those rare
// longer digests aside (in a Spellings) when they need to build paths.
package digestkey

import (
	"bytes"
	"encoding/hex"
	"strings"
	"sync"

	"github.com/opencontainers/go-digest"
)

// Key is a digest in fixed size.
type Key [33]byte

// Algorithm codes; their order is the algorithms' lexical order, so keys
// sort like the paths a listing returns them in.
const (
	sha256 = 1
	sha384 = 2
	sha512 = 3
)

// hexLen is the hex length of each algorithm's digests, by code.
var hexLen = [4]int{0, 64, 96, 128}

// algName is each code's algorithm name.
var algName = [4]string{"", "sha256", "sha384", "sha512"}

func algCode(alg string) byte {
	switch alg {
	case "sha256":
		return sha256
	case "sha384":
		return sha384
	case "sha512":
		return sha512
	}
	return 0
}

// Parse turns the parts of a digest found in a path into a key. It refuses
// unknown algorithms, wrong lengths and anything but lower-case hex (a
// sha256 hex under sha512/ is refused, as are upper-case spellings).
func Parse(alg, hexs string) (Key, bool) {
	var k Key
	c := algCode(alg)
	if c == 0 || len(hexs) != hexLen[c] {
		return k, false
	}
	for i := 0; i < len(hexs); i++ {
		if b := hexs[i]; !(b >= '0' && b <= '9' || b >= 'a' && b <= 'f') {
			return k, false
		}
	}
	k[0] = c
	if _, err := hex.Decode(k[1:], []byte(hexs[:64])); err != nil {
		return k, false
	}
	return k, true
}

// Of is Parse for a digest value.
func Of(d digest.Digest) (Key, bool) {
	alg, hexs, ok := strings.Cut(string(d), ":")
	if !ok {
		return Key{}, false
	}
	return Parse(alg, hexs)
}

// Alg is the key's algorithm name.
func (k Key) Alg() string { return algName[k[0]] }

// Whole reports whether the key holds the whole digest (sha256).
func (k Key) Whole() bool { return k[0] == sha256 }

// WholeHex is the hex of a key that holds the whole digest.
func (k Key) WholeHex() string { return hex.EncodeToString(k[1:]) }

// Compare orders keys as the paths of their digests sort.
func Compare(a, b Key) int { return bytes.Compare(a[:], b[:]) }

// Spellings keeps the full hex of the digests a Key does not hold whole
// (sha384, sha512), so that paths can be built again from their keys. Its
// zero value is ready; it is safe for concurrent use.
type Spellings struct {
	mu   sync.Mutex
	long map[Key]string
}

// Parse is the package's Parse, remembering the hex of a digest the key
// does not hold whole.
func (s *Spellings) Parse(alg, hexs string) (Key, bool) {
	k, ok := Parse(alg, hexs)
	if ok && !k.Whole() {
		s.mu.Lock()
		if _, have := s.long[k]; !have {
			if s.long == nil {
				s.long = make(map[Key]string)
			}
			s.long[k] = hexs
		}
		s.mu.Unlock()
	}
	return k, ok
}

// Of is Parse for a digest value.
func (s *Spellings) Of(d digest.Digest) (Key, bool) {
	alg, hexs, ok := strings.Cut(string(d), ":")
	if !ok {
		return Key{}, false
	}
	return s.Parse(alg, hexs)
}

// Hex is k's hex: from the key when it holds the whole digest, else as
// Parse saw it ("" if it never did).
func (s *Spellings) Hex(k Key) string {
	if k.Whole() {
		return k.WholeHex()
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.long[k]
}

// Digest spells k out again.
func (s *Spellings) Digest(k Key) digest.Digest {
	if k.Whole() {
		return digest.NewDigestFromBytes(digest.SHA256, k[1:])
	}
	return digest.Digest(k.Alg() + ":" + s.Hex(k))
}
