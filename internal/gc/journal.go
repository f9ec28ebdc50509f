package gc

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/cairn-registry/cairn/internal/fence"
	"github.com/cairn-registry/cairn/internal/layout"
	"github.com/cairn-registry/cairn/internal/manifest"
	"github.com/cairn-registry/cairn/internal/storage/driver"
)

type journalState struct {
	run   *fence.Run
	fence string // the last round's fence, removed with the marker
	seen  map[string]*record
}

// record is a journal record as this run judged it.
type record struct {
	mod     int64
	settled bool // the mark saw everything its operation wrote
}

// begin starts the run's side of the protocol (fence.Begin) and takes T0
// from its marker.
func (c *collector) begin(ctx context.Context) error {
	c.journal.seen = make(map[string]*record)
	if c.opts.DryRun {
		c.t0 = time.Now()
		c.cutoff = c.t0.Add(-c.opts.Delay).UnixNano()
		return nil
	}
	run, err := fence.Begin(ctx, c.d, fence.Marker{Started: c.start.UTC(), DeleteUntagged: c.opts.DeleteUntagged, Delay: c.opts.Delay.String()})
	if err != nil {
		return err
	}
	c.journal.run = run
	c.runID = run.ID()
	c.rep.RunID = c.runID
	c.t0 = run.T0()
	c.cutoff = c.t0.Add(-c.opts.Delay).UnixNano()
	return nil
}

// end removes the marker, the last round's fence and, after a completed
// run, the journal records no run needs any more, in one bulk delete when
// they fit: housekeeping costs one request, not one per object.
func (c *collector) end(ctx context.Context, completed bool) error {
	if c.opts.DryRun {
		return nil
	}
	run := c.journal.run
	run.Stop()
	bg, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Minute)
	defer cancel()
	var paths []string
	if completed {
		// Cleaning is housekeeping: a failure is reported, the run
		// completed. A round has read every record that was there before
		// the run; those written since are not settled, nor expired.
		var err error
		if run.Rounds() == 0 {
			err = c.readJournal(bg)
		}
		if err == nil {
			paths, err = c.stalePaths(bg)
		}
		if err != nil {
			c.problem(ProblemJournalCleanup, err.Error())
		}
	}
	if c.journal.fence != "" {
		paths = append(paths, c.journal.fence)
	}
	paths = append(paths, run.Marker())
	for len(paths) > 0 {
		n := min(len(paths), c.opts.BatchSize)
		if _, err := c.d.DeleteFiles(bg, paths[:n]); err != nil {
			c.problem(ProblemJournalCleanup, err.Error())
		}
		paths = paths[n:]
	}
	return nil
}

// stalePaths lists the records no run needs any more: those this run
// settled, and unsettled ones older than journalTTL before T0. Another live
// run may still need a record this one settled, so then it lists none. It
// also lists markers and fences of runs that died.
func (c *collector) stalePaths(ctx context.Context) ([]string, error) {
	paths, others, err := c.journal.run.Leftovers(ctx)
	if err != nil {
		return nil, err
	}
	if !others {
		expired := c.t0.Add(-journalTTL).UnixNano()
		for p, r := range c.journal.seen {
			if r.settled || (r.mod != 0 && r.mod < expired) {
				paths = append(paths, p)
			}
		}
	}
	return paths, nil
}

// readJournal applies the records not seen before. Records are written once
// and never change, so each is judged once.
func (c *collector) readJournal(ctx context.Context) error {
	return fence.WalkJournal(ctx, c.d, func(p string, mod time.Time, rec fence.Record, ok bool) error {
		if _, seen := c.journal.seen[p]; seen {
			return nil
		}
		r := &record{mod: modNS(mod)}
		k, kok := c.keys.Of(rec.Digest)
		if !ok || !kok {
			c.problem(ProblemBadJournal, p)
			c.journal.seen[p] = r
			return nil
		}
		if err := c.applyRecord(ctx, r, p, rec.Repo, rec.Manifest, k); err != nil {
			return err
		}
		c.journal.seen[p] = r
		return nil
	})
}

// applyRecord settles a record, or protects what it names.
func (c *collector) applyRecord(ctx context.Context, r *record, p, repo string, manifest bool, k dkey) error {
	var rs *repoState
	if i, ok := c.repoIndex[repo]; ok {
		rs = c.repos[i]
	}
	if !manifest {
		if rs != nil {
			if j := rs.findLayer(k); j >= 0 && rs.layers[j].mod > r.mod {
				r.settled = true
				return nil
			}
		}
		c.protectBlob(rs, k)
		return nil
	}
	b, err := c.getContent(ctx, p)
	if errors.Is(err, driver.ErrNotFound) {
		r.settled = true // its writer removed it: no run was active then
		return nil
	}
	if err != nil {
		return fmt.Errorf("reading journal record %s: %w", p, err)
	}
	rec := fence.Record{Repo: repo, Manifest: true}
	if err := fence.DecodeBody(&rec, b); err != nil {
		c.problem(ProblemBadJournal, p)
		if c.blobSweepOff == "" {
			c.blobSweepOff = "a journal record could not be read"
		}
	}
	i := -1
	if rs != nil {
		i = rs.findRev(k)
	}
	if i >= 0 && rs.revs[i].mod > r.mod {
		r.settled = true
		for _, name := range rec.Tags {
			if t := rs.findTag(name); t == nil || !t.hasCurrent || t.curMod <= r.mod {
				r.settled = false
				break
			}
		}
		if r.settled {
			return nil
		}
	}
	c.markKey(k)
	if i >= 0 {
		c.revive(ctx, rs, i)
	}
	for _, d := range rec.Blobs {
		if bk, ok := c.keys.Of(d); ok {
			c.protectBlob(rs, bk)
		}
	}
	for _, d := range rec.Children {
		ck, ok := c.keys.Of(d)
		if !ok {
			continue
		}
		if rs != nil {
			if j := rs.findRev(ck); j >= 0 {
				c.revive(ctx, rs, j)
				continue
			}
		}
		c.protectBlob(rs, ck)
	}
	return nil
}

// protectBlob keeps blob k, and its _layers link in rs.
func (c *collector) protectBlob(rs *repoState, k dkey) {
	c.markKey(k)
	if rs == nil {
		return
	}
	if j := rs.findLayer(k); j >= 0 {
		rs.layers[j].del = false
	}
}

// revive keeps revision i of rs whole after all: its links, the blobs and
// _layers links it names, its children and its referrers. A manifest the
// mark found live needs nothing more.
func (c *collector) revive(ctx context.Context, rs *repoState, i int) {
	r := &rs.revs[i]
	if r.flags&fDelete == 0 {
		return
	}
	r.flags = r.flags&^fDelete | fLive
	rs.nDelete--
	c.markKey(r.key)
	if r.flags&(fMissing|fBad) == 0 {
		p := string(layout.AppendBlobData(nil, r.key.Alg(), c.hexOf(r.key)))
		b, err := c.getContent(ctx, p)
		refs, _, perr := manifest.ParseRefs(b)
		switch {
		case err != nil && !errors.Is(err, driver.ErrNotFound):
			if c.blobSweepOff == "" {
				c.blobSweepOff = "a revived manifest of " + rs.name + " could not be read"
			}
		case err == nil && perr == nil:
			var info manifestInfo
			c.fillInfo(rs, &info, refs, p)
			for _, k := range info.blobs {
				c.protectBlob(rs, k)
			}
		}
	}
	for _, ch := range rs.children[int32(i)] {
		c.revive(ctx, rs, int(ch))
	}
	for j := range rs.revs {
		if rs.revs[j].subject == int32(i) {
			c.revive(ctx, rs, j)
		}
	}
}
