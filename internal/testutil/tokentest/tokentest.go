// Package tokentest makes Bearer tokens as a Docker token server issues
// them, for tests of cairn's token authentication: claims with an access
// list, signed as JWTs.
package tokentest

import (
	"github.com/go-jose/go-jose/v4"
	"github.com/go-jose/go-jose/v4/jwt"
)

// Access is one entry of a token's access claim.
type Access struct {
	Type    string   `json:"type"`
	Name    string   `json:"name"`
	Actions []string `json:"actions"`
}

// Claims are a token's claims: the registered ones and the access list.
type Claims struct {
	jwt.Claims
	Access []Access `json:"access,omitempty"`
}

// Sign serializes c as a JWT signed with key under alg; headers are extra
// JOSE header fields (kid, x5c).
func Sign(alg jose.SignatureAlgorithm, key any, c any, headers map[jose.HeaderKey]any) (string, error) {
	opts := (&jose.SignerOptions{}).WithType("JWT")
	for k, v := range headers {
		opts = opts.WithHeader(k, v)
	}
	s, err := jose.NewSigner(jose.SigningKey{Algorithm: alg, Key: key}, opts)
	if err != nil {
		return "", err
	}
	return jwt.Signed(s).Claims(c).Serialize()
}
