package deflate

import "unsafe"

// Token is one token of a DEFLATE block: a literal byte or a match (a
// length and a distance back into the output). It has the encoder's own
// representation, so the decoder's tokens go to the block writer with no
// conversion, and a []Token is a []token in place.
type Token uint32

// LiteralToken is the token for literal byte b.
func LiteralToken(b byte) Token { return Token(literalToken(uint32(b))) }

// MatchToken is the token for a match of length 3–258 at distance
// 1–32768; the arguments are not checked.
func MatchToken(length, dist int) Token {
	return Token(matchToken(uint32(length-baseMatchLength), uint32(dist-baseMatchOffset)))
}

// IsMatch reports whether t is a match.
func (t Token) IsMatch() bool { return t >= matchType }

// Literal is a literal token's byte.
func (t Token) Literal() byte { return byte(t) }

// Length is a match's length, 3–258.
func (t Token) Length() int { return int(token(t).length()) + baseMatchLength }

// Dist is a match's distance, 1–32768.
func (t Token) Dist() int { return int(token(t).offset()) + baseMatchOffset }

// Size is how many output bytes t stands for: 1 for a literal.
func (t Token) Size() int { return token(t).size() }

// internalTokens views ts as the encoder's tokens; both are uint32.
func internalTokens(ts []Token) []token {
	return unsafe.Slice((*token)(unsafe.SliceData(ts)), len(ts))
}

// TokenBits is how many bits t, one of b's tokens, takes in b's stream:
// its literal/length code and extra bits, and a match's distance code and
// extra bits. b is a fixed or dynamic block.
func (b *Block) TokenBits(t Token) int {
	lit, dist := b.LitLens, b.DistLens
	if b.Type == BlockFixed {
		lit, dist = fixedLitLens[:], fixedDistLens[:]
	}
	if !t.IsMatch() {
		return int(lit[t.Literal()])
	}
	x := token(t)
	lc := lengthCode(x.length())
	oc := offsetCode(x.offset())
	return int(lit[lengthCodesStart+lc]) + int(lengthExtraBits[lc]) + int(dist[oc]) + int(offsetExtraBits[oc])
}

// EndBits is how many bits b's end-of-block code takes.
func (b *Block) EndBits() int {
	if b.Type == BlockFixed {
		return int(fixedLitLens[endBlockMarker])
	}
	return int(b.LitLens[endBlockMarker])
}
