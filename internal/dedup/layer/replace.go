package layer

import (
	"context"
	"fmt"
	"io"

	"github.com/opencontainers/go-digest"
)

// Replace stores size bytes read from r under d even when a file is already
// stored there, which Put never overwrites: it is the repair of a stored
// file that no longer holds its digest's bytes (cairn scrub --repair). Like
// a large Put it streams through a temp path and an atomic move, so readers
// see the old file or the new one. The caller vouches that the bytes hash
// to d.
func (s *DriverStore) Replace(ctx context.Context, d digest.Digest, size int64, r io.Reader) error {
	p, err := FilePath(d)
	if err != nil {
		return err
	}
	if err := s.putLarge(ctx, d, p, size, r); err != nil {
		return fmt.Errorf("layer: replace %s: %w", d, err)
	}
	return nil
}
