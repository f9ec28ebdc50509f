package registry

import (
	"context"

	"github.com/cairn-registry/cairn/internal/fence"
)

// protectForGC journals rec before the caller relies on stored content a GC
// may be deleting (see package fence).
func (r *Registry) protectForGC(ctx context.Context, rec *fence.Record) (done func(), err error) {
	return fence.Protect(ctx, r.d, rec)
}
