package replicate

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"

	"github.com/opencontainers/go-digest"

	"github.com/cairn-registry/cairn/internal/layout"
	"github.com/cairn-registry/cairn/internal/storage/driver"
)

// record is what a target replicated of one repository, kept in the store
// (layout.ReplicationRecord) so that a restart neither redoes everything
// nor skips what was not finished: an entry is added only once what it
// names is on the other side. Two processes passing over the same target
// (cairn serve and cairn replicate run) may each write it; the last write
// wins, and what it lacks is copied again, finding it there (a HEAD).
type record struct {
	// Tags maps each tag to the digest last replicated under it.
	Tags map[string]digest.Digest `json:"tags"`
	// Done lists the manifests whose whole tree (children, blobs) is on
	// the other side, tagged images and referrers alike.
	Done []digest.Digest `json:"done"`

	done map[digest.Digest]bool
}

func loadRecord(ctx context.Context, rs Records, target, repo string) (*record, error) {
	rec := &record{Tags: map[string]digest.Digest{}, done: map[digest.Digest]bool{}}
	b, err := rs.GetContent(ctx, layout.ReplicationRecord(target, repo))
	if errors.Is(err, driver.ErrNotFound) {
		return rec, nil
	}
	if err != nil {
		return nil, fmt.Errorf("reading the replication record: %w", err)
	}
	if err := json.Unmarshal(b, rec); err != nil {
		// A torn or foreign record costs a pass of HEADs, not a refusal
		// to replicate: start afresh.
		return &record{Tags: map[string]digest.Digest{}, done: map[digest.Digest]bool{}}, nil
	}
	if rec.Tags == nil {
		rec.Tags = map[string]digest.Digest{}
	}
	for _, d := range rec.Done {
		rec.done[d] = true
	}
	return rec, nil
}

func (rec *record) save(ctx context.Context, rs Records, target, repo string) error {
	rec.Done = slices.Sorted(maps.Keys(rec.done))
	b, err := json.Marshal(rec)
	if err != nil {
		return err
	}
	if err := rs.PutContent(ctx, layout.ReplicationRecord(target, repo), b); err != nil {
		return fmt.Errorf("writing the replication record: %w", err)
	}
	return nil
}

// prune forgets what the source no longer holds (tags not in tags,
// manifests not in seen), so that the record stays the size of the
// repository; it reports whether anything went.
func (rec *record) prune(seen map[digest.Digest]bool, tags []string) bool {
	keep := make(map[string]bool, len(tags))
	for _, tag := range tags {
		keep[tag] = true
	}
	n := len(rec.Tags) + len(rec.done)
	maps.DeleteFunc(rec.Tags, func(tag string, _ digest.Digest) bool { return !keep[tag] })
	maps.DeleteFunc(rec.done, func(d digest.Digest, _ bool) bool { return !seen[d] })
	return len(rec.Tags)+len(rec.done) < n
}
