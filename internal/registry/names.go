package registry

import (
	"fmt"
	"regexp"

	"github.com/opencontainers/go-digest"

	// Register the digest algorithms clients use (sha256, sha384, sha512).
	_ "crypto/sha256"
	_ "crypto/sha512"
)

// maxNameLength bounds repository names as distribution does.
const maxNameLength = 255

var (
	// nameRegexp is the distribution-spec repository name grammar. Its
	// separators need alphanumerics on both sides, so "..", "." segments and
	// leading or trailing slashes can never match.
	nameRegexp = regexp.MustCompile(`^[a-z0-9]+(?:(?:\.|_|__|-+)[a-z0-9]+)*(?:/[a-z0-9]+(?:(?:\.|_|__|-+)[a-z0-9]+)*)*$`)
	tagRegexp  = regexp.MustCompile(`^[a-zA-Z0-9_][a-zA-Z0-9._-]{0,127}$`)
)

// ValidateName checks a repository name against the spec's grammar.
func ValidateName(name string) error {
	if name == "" || len(name) > maxNameLength || !nameRegexp.MatchString(name) {
		return fmt.Errorf("%w: %q", ErrNameInvalid, name)
	}
	return nil
}

// ValidTag reports whether tag follows the spec's tag grammar.
func ValidTag(tag string) bool { return tagRegexp.MatchString(tag) }

// ParseDigest parses and validates a digest, requiring an algorithm this
// build can compute.
func ParseDigest(s string) (digest.Digest, error) {
	d, err := digest.Parse(s)
	if err != nil {
		return "", fmt.Errorf("%w: %q: %v", ErrDigestInvalid, s, err)
	}
	if !d.Algorithm().Available() {
		return "", fmt.Errorf("%w: %q: unsupported algorithm", ErrDigestInvalid, s)
	}
	return d, nil
}
