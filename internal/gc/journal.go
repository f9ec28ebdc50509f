package gc

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/cairn-registry/cairn/internal/layout"
	"github.com/cairn-registry/cairn/internal/registry"
	"github.com/cairn-registry/cairn/internal/storage/driver"
)

// A run marker is rewritten every heartbeat; one unchanged for staleRun
// belongs to a run that died. Stale markers only delay journal cleanup and
// make scheduled runs wait, so the bound is generous.
const (
	heartbeat = 30 * time.Second
	staleRun  = 15 * time.Minute
)

type journalState struct {
	marker string
	fence  string // the last round's fence, removed with the marker
	fences int
	seen   map[string]*record
	stop   func()
}

// record is a journal record as this run judged it.
type record struct {
	mod     int64
	settled bool // the mark saw everything its operation wrote
}

type markerContent struct {
	ID             string    `json:"id"`
	Host           string    `json:"host"`
	PID            int       `json:"pid"`
	Started        time.Time `json:"started"`
	DeleteUntagged bool      `json:"delete_untagged"`
	Delay          string    `json:"delay"`
}

// begin writes the run marker and takes T0 from it: the store's clock, the
// one every modification time the run compares is in.
func (c *collector) begin(ctx context.Context) error {
	c.journal.seen = make(map[string]*record)
	if c.opts.DryRun {
		c.t0 = time.Now()
		c.cutoff = c.t0.Add(-c.opts.Delay).UnixNano()
		return nil
	}
	c.runID = newRunID()
	c.rep.RunID = c.runID
	c.journal.marker = layout.GCActiveDir + "/" + layout.GCRunPrefix + c.runID
	host, _ := os.Hostname()
	body, err := json.Marshal(markerContent{ID: c.runID, Host: host, PID: os.Getpid(), Started: c.start.UTC(),
		DeleteUntagged: c.opts.DeleteUntagged, Delay: c.opts.Delay.String()})
	if err != nil {
		return err
	}
	if err := c.d.PutContent(ctx, c.journal.marker, body); err != nil {
		return fmt.Errorf("gc: writing the run marker: %w", err)
	}
	fi, err := c.d.Stat(ctx, c.journal.marker)
	if err != nil {
		c.removeMarker()
		return fmt.Errorf("gc: reading the run marker: %w", err)
	}
	c.t0 = fi.ModTime
	if c.t0.IsZero() {
		c.t0 = time.Now()
	}
	c.cutoff = c.t0.Add(-c.opts.Delay).UnixNano()

	done := make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() {
		t := time.NewTicker(heartbeat)
		defer t.Stop()
		for {
			select {
			case <-done:
				return
			case <-t.C:
				_ = c.d.PutContent(ctx, c.journal.marker, body)
			}
		}
	})
	c.journal.stop = func() { close(done); wg.Wait() }
	return nil
}

// end removes the marker, the last round's fence and, after a completed
// run, the journal records no run needs any more, in one bulk delete when
// they fit: housekeeping costs one request, not one per object.
func (c *collector) end(ctx context.Context, completed bool) error {
	if c.opts.DryRun {
		return nil
	}
	c.journal.stop()
	bg, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Minute)
	defer cancel()
	var paths []string
	if completed {
		// Cleaning is housekeeping: a failure is reported, the run
		// completed. A round has read every record that was there before
		// the run; those written since are not settled, nor expired.
		var err error
		if c.journal.fences == 0 {
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
	paths = append(paths, c.journal.marker)
	for len(paths) > 0 {
		n := min(len(paths), c.opts.BatchSize)
		if _, err := c.d.DeleteFiles(bg, paths[:n]); err != nil {
			c.problem(ProblemJournalCleanup, err.Error())
		}
		paths = paths[n:]
	}
	return nil
}

func (c *collector) removeMarker() {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	_, _ = c.d.DeleteFiles(ctx, []string{c.journal.marker})
}

// stalePaths lists the records no run needs any more: those this run
// settled, and unsettled ones older than journalTTL before T0. Another live
// run may still need a record this one settled, so then it lists none. It
// also lists markers and fences of runs that died.
func (c *collector) stalePaths(ctx context.Context) ([]string, error) {
	now := time.Now()
	others := false
	var paths []string
	err := c.d.Walk(ctx, layout.GCActiveDir, func(fi driver.FileInfo) error {
		if fi.IsDir || fi.Path == c.journal.marker || fi.Path == c.journal.fence {
			return nil
		}
		name := fi.Path[strings.LastIndexByte(fi.Path, '/')+1:]
		age := now.Sub(fi.ModTime)
		switch {
		case strings.HasPrefix(name, layout.GCRunPrefix) && age < staleRun:
			others = true
		case strings.HasPrefix(name, layout.GCRunPrefix) && !fi.ModTime.IsZero(),
			strings.HasPrefix(name, layout.GCFencePrefix) && age > registry.GCFenceStale:
			paths = append(paths, fi.Path)
		}
		return nil
	})
	if err != nil && !errors.Is(err, driver.ErrNotFound) {
		return nil, fmt.Errorf("gc: listing runs: %w", err)
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

func (c *collector) openFence(ctx context.Context) (string, error) {
	c.journal.fences++
	p := layout.GCActiveDir + "/" + layout.GCFencePrefix + c.runID + "-" + strconv.Itoa(c.journal.fences)
	if err := c.d.PutContent(ctx, p, nil); err != nil {
		return "", fmt.Errorf("gc: writing a fence: %w", err)
	}
	return p, nil
}

// closeFence removes a fence, also when the run is being stopped.
func (c *collector) closeFence(ctx context.Context, p string) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
	defer cancel()
	_, _ = c.d.DeleteFiles(ctx, []string{p})
}

// readJournal applies the records not seen before. Records are written once
// and never change, so each is judged once.
func (c *collector) readJournal(ctx context.Context) error {
	err := c.d.Walk(ctx, layout.GCJournalDir, func(fi driver.FileInfo) error {
		if fi.IsDir {
			return nil
		}
		if _, ok := c.journal.seen[fi.Path]; ok {
			return nil
		}
		r := &record{mod: modNS(fi.ModTime)}
		repo, manifest, alg, hexs, ok := layout.ParseJournalPath(fi.Path)
		k, kok := c.keyFor(alg, hexs)
		if !ok || !kok {
			c.problem(ProblemBadJournal, fi.Path)
			c.journal.seen[fi.Path] = r
			return nil
		}
		if err := c.applyRecord(ctx, r, fi.Path, repo, manifest, k); err != nil {
			return err
		}
		c.journal.seen[fi.Path] = r
		return nil
	})
	if errors.Is(err, driver.ErrNotFound) {
		return nil
	}
	return err
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
	rec := registry.JournalRecord{Repo: repo, Manifest: true}
	if err := registry.DecodeJournalContent(&rec, b); err != nil {
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
		if bk, ok := c.digestKey(d); ok {
			c.protectBlob(rs, bk)
		}
	}
	for _, d := range rec.Children {
		ck, ok := c.digestKey(d)
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
		p := string(layout.AppendBlobData(nil, r.key.alg(), c.hexOf(r.key)))
		b, err := c.getContent(ctx, p)
		refs, _, perr := registry.ParseManifestRefs(b)
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

func newRunID() string {
	var b [4]byte
	rand.Read(b[:])
	return time.Now().UTC().Format("20060102T150405Z") + "-" + hex.EncodeToString(b[:])
}

// Active reports whether another GC run's marker is fresh: a scheduled run
// skips its turn then.
func Active(ctx context.Context, d driver.Driver) (bool, error) {
	now := time.Now()
	active := false
	err := d.Walk(ctx, layout.GCActiveDir, func(fi driver.FileInfo) error {
		name := fi.Path[strings.LastIndexByte(fi.Path, '/')+1:]
		if !fi.IsDir && strings.HasPrefix(name, layout.GCRunPrefix) && now.Sub(fi.ModTime) < staleRun {
			active = true
		}
		return nil
	})
	if errors.Is(err, driver.ErrNotFound) {
		err = nil
	}
	return active, err
}
