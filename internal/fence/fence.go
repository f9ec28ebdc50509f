// Package fence is the protocol that lets the garbage collector run while
// the registry serves, across processes and nodes that share one store. It
// uses only the store (no lock anywhere), through paths under cairn/gc/
// (layout.GCActiveDir and layout.GCJournalDir):
//
//  1. A GC run writes its marker run-<id> (Begin) and rewrites it every
//     Heartbeat; the marker's modification time, in the store's clock, is
//     the run's T0. A marker unchanged for StaleRun belongs to a run that
//     died.
//  2. A writer that relies on stored content it did not write itself (a
//     manifest PUT on the blobs and child manifests it names and on its own
//     revision; a blob upload or mount on an existing blob) first writes a
//     journal record naming that content, then waits until every open fence
//     it saw has closed (Protect), then checks that the content exists, then
//     stores. When it finishes and no run marker at all exists, it removes
//     its record; otherwise a run removes it once it has seen the
//     operation's effects.
//  3. A sweep round that deletes what writers rely on first writes a fence
//     (fence-<id>-<round>, OpenFence), then reads the journal, then
//     deletes, then removes the fence. It stops deleting RoundMax after it
//     began; writers stop waiting for a fence after FenceWait, and ignore a
//     fence older than FenceStale at once.
//
// So a writer either had its record read by every round that deletes after
// its existence check, or its check ran after those deletions and failed
// cleanly. Running tells whether a GC runs now (a fresh marker); the
// writer's "no marker at all" is stricter on purpose: a run whose marker
// went stale may be slow rather than dead, and a record kept too long costs
// nothing but a later run's cleanup.
package fence

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/opencontainers/go-digest"

	"github.com/cairn-registry/cairn/internal/layout"
	"github.com/cairn-registry/cairn/internal/repeat"
	"github.com/cairn-registry/cairn/internal/storage/driver"
)

// Timing of the protocol. A round stops deleting RoundMax after it began
// writing its fence, so a fence still there after FenceWait belongs to a
// run that died; FenceStale and StaleRun compare the local clock with the
// store's, with margins of minutes for the difference.
const (
	FenceWait  = 60 * time.Second
	RoundMax   = 20 * time.Second
	FenceStale = 5 * time.Minute
	Heartbeat  = 30 * time.Second
	StaleRun   = 15 * time.Minute
)

// Record is what a journal record says: the repository, the manifest or
// blob the operation is about, and for a manifest the tags it writes and
// what it references.
type Record struct {
	Repo     string
	Manifest bool // Digest is a manifest being stored; else a blob
	Digest   digest.Digest
	Tags     []string
	Blobs    []digest.Digest
	Children []digest.Digest
}

// recordBody is a record's stored body; the rest is in its path.
type recordBody struct {
	Tags     []string        `json:"tags,omitempty"`
	Blobs    []digest.Digest `json:"blobs,omitempty"`
	Children []digest.Digest `json:"manifests,omitempty"`
}

// DecodeBody fills rec's tags and references from a record's body.
func DecodeBody(rec *Record, b []byte) error {
	if len(b) == 0 {
		return nil
	}
	var c recordBody
	if err := json.Unmarshal(b, &c); err != nil {
		return fmt.Errorf("journal record: %w", err)
	}
	rec.Tags, rec.Blobs, rec.Children = c.Tags, c.Blobs, c.Children
	return nil
}

// Protect writes rec to the journal and waits out the GC rounds that may
// not have read it. The caller checks existence and stores only after it
// returns, and calls done when its operation has ended (successfully or
// not).
func Protect(ctx context.Context, d driver.Driver, rec *Record) (done func(), err error) {
	var body []byte
	if rec.Manifest {
		body, err = json.Marshal(recordBody{Tags: rec.Tags, Blobs: rec.Blobs, Children: rec.Children})
		if err != nil {
			return nil, err
		}
	}
	var nonce [8]byte
	rand.Read(nonce[:])
	p := layout.JournalRecord(rec.Repo, rec.Manifest, rec.Digest, hex.EncodeToString(nonce[:]))
	// A record needs to be seen, not to last: a crash ends its operation
	// too. On a filesystem it is not synced, since an fsync there waits for
	// the data of every file being written back (ext4, data=ordered).
	put := d.PutContent
	if ipa, ok := driver.As[driver.InPlaceAppender](d); ok {
		put = ipa.PutCached
	}
	if err := put(ctx, p, body); err != nil {
		return nil, fmt.Errorf("gc journal: %w", err)
	}
	done = func() {
		// Without cancellation: a client that went away must not leave
		// the record behind to hold content until GC removes it.
		ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
		defer cancel()
		s, err := readState(ctx, d)
		if err == nil && s.markers == 0 {
			_, _ = d.DeleteFiles(ctx, []string{p})
		}
	}
	if err := waitFences(ctx, d); err != nil {
		done()
		return nil, err
	}
	return done, nil
}

// waitFences returns once every fence open now has closed, or has been
// open longer than any live run keeps one.
func waitFences(ctx context.Context, d driver.Driver) error {
	s, err := readState(ctx, d)
	if err != nil || len(s.fences) == 0 {
		return err
	}
	fences := s.fences
	deadline := time.Now().Add(FenceWait)
	pause := 10 * time.Millisecond
	for time.Now().Before(deadline) {
		t := time.NewTimer(pause)
		select {
		case <-ctx.Done():
			t.Stop()
			return ctx.Err()
		case <-t.C:
		}
		pause = min(2*pause, 200*time.Millisecond)
		now, err := readState(ctx, d)
		if err != nil {
			return err
		}
		// Fences opened since are fine: those rounds read the journal
		// after the record was written.
		fences = slices.DeleteFunc(fences, func(f string) bool { return !slices.Contains(now.fences, f) })
		if len(fences) == 0 {
			return nil
		}
	}
	return nil
}

// state is what cairn/gc/active holds.
type state struct {
	markers int      // run markers, stale or not
	fresh   int      // run markers written within StaleRun
	fences  []string // fences younger than FenceStale
}

func readState(ctx context.Context, d driver.Driver) (state, error) {
	var s state
	now := time.Now()
	err := d.Walk(ctx, layout.GCActiveDir, func(fi driver.FileInfo) error {
		if fi.IsDir {
			return driver.ErrSkipDir
		}
		name := fi.Path[strings.LastIndexByte(fi.Path, '/')+1:]
		switch {
		case strings.HasPrefix(name, layout.GCRunPrefix):
			s.markers++
			if now.Sub(fi.ModTime) < StaleRun {
				s.fresh++
			}
		case strings.HasPrefix(name, layout.GCFencePrefix):
			if fi.ModTime.IsZero() || now.Sub(fi.ModTime) < FenceStale {
				s.fences = append(s.fences, fi.Path)
			}
		}
		return nil
	})
	if errors.Is(err, driver.ErrNotFound) {
		err = nil
	}
	if err != nil {
		return state{}, fmt.Errorf("gc fences: %w", err)
	}
	return s, nil
}

// Running reports whether a GC run's marker is fresh: a GC is running now.
// A scheduled run skips its turn then, and dedup trusts a file it took
// back from a tombstone only when no run is.
func Running(ctx context.Context, d driver.Driver) (bool, error) {
	s, err := readState(ctx, d)
	return s.fresh > 0, err
}

// Marker describes a run in its marker, for operators reading the store.
type Marker struct {
	ID             string    `json:"id"`
	Host           string    `json:"host"`
	PID            int       `json:"pid"`
	Started        time.Time `json:"started"`
	DeleteUntagged bool      `json:"delete_untagged"`
	Delay          string    `json:"delay"`
}

// Run is a GC run's side of the protocol: its marker, kept fresh, and its
// rounds' fences.
type Run struct {
	d      driver.Driver
	id     string
	marker string
	t0     time.Time
	rounds int
	stop   func()
}

// Begin writes the run's marker, starts its heartbeat and takes T0 from
// it: the store's clock, the one every modification time the run compares
// is in. m.ID, Host, PID and Started are filled in.
func Begin(ctx context.Context, d driver.Driver, m Marker) (*Run, error) {
	m.ID = newRunID()
	m.Host, _ = os.Hostname()
	m.PID = os.Getpid()
	if m.Started.IsZero() {
		m.Started = time.Now().UTC()
	}
	body, err := json.Marshal(m)
	if err != nil {
		return nil, err
	}
	r := &Run{d: d, id: m.ID, marker: layout.GCRunMarker(m.ID)}
	if err := d.PutContent(ctx, r.marker, body); err != nil {
		return nil, fmt.Errorf("gc: writing the run marker: %w", err)
	}
	fi, err := d.Stat(ctx, r.marker)
	if err != nil {
		r.deleteQuietly([]string{r.marker})
		return nil, fmt.Errorf("gc: reading the run marker: %w", err)
	}
	r.t0 = fi.ModTime
	if r.t0.IsZero() {
		r.t0 = time.Now()
	}
	r.stop = repeat.Every(Heartbeat, func() { _ = d.PutContent(ctx, r.marker, body) })
	return r, nil
}

// ID names the run.
func (r *Run) ID() string { return r.id }

// T0 is the store's time when the run began.
func (r *Run) T0() time.Time { return r.t0 }

// Marker is the path of the run's marker.
func (r *Run) Marker() string { return r.marker }

// OpenFence writes the fence of the run's next round.
func (r *Run) OpenFence(ctx context.Context) (string, error) {
	r.rounds++
	p := layout.GCFence(r.id, r.rounds)
	if err := r.d.PutContent(ctx, p, nil); err != nil {
		return "", fmt.Errorf("gc: writing a fence: %w", err)
	}
	return p, nil
}

// Rounds is how many fences the run opened.
func (r *Run) Rounds() int { return r.rounds }

// CloseFence removes a fence, also when the run is being stopped.
func (r *Run) CloseFence(ctx context.Context, p string) {
	r.deleteQuietly([]string{p})
}

// Stop ends the heartbeat; the caller then deletes the marker (with End's
// paths, in one bulk request).
func (r *Run) Stop() { r.stop() }

// Leftovers lists the markers and fences of runs that died, and reports
// whether another run's marker is fresh (then records this run settled may
// still be needed by it).
func (r *Run) Leftovers(ctx context.Context) (paths []string, others bool, err error) {
	now := time.Now()
	err = r.d.Walk(ctx, layout.GCActiveDir, func(fi driver.FileInfo) error {
		name := fi.Path[strings.LastIndexByte(fi.Path, '/')+1:]
		if fi.IsDir || fi.Path == r.marker || strings.HasPrefix(name, layout.GCFencePrefix+r.id+"-") {
			return nil
		}
		age := now.Sub(fi.ModTime)
		switch {
		case strings.HasPrefix(name, layout.GCRunPrefix) && age < StaleRun:
			others = true
		case strings.HasPrefix(name, layout.GCRunPrefix) && !fi.ModTime.IsZero(),
			strings.HasPrefix(name, layout.GCFencePrefix) && age > FenceStale:
			paths = append(paths, fi.Path)
		}
		return nil
	})
	if err != nil && !errors.Is(err, driver.ErrNotFound) {
		return nil, false, fmt.Errorf("gc: listing runs: %w", err)
	}
	return paths, others, nil
}

func (r *Run) deleteQuietly(paths []string) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	_, _ = r.d.DeleteFiles(ctx, paths)
}

// WalkJournal calls fn for each record in the journal, with its path,
// modification time and what its path says (ok false for a path that is
// not a record's); the body is read by the caller when it needs it.
func WalkJournal(ctx context.Context, d driver.Driver, fn func(p string, mod time.Time, rec Record, ok bool) error) error {
	err := d.Walk(ctx, layout.GCJournalDir, func(fi driver.FileInfo) error {
		if fi.IsDir {
			return nil
		}
		repo, manifest, alg, hexs, ok := layout.ParseJournalPath(fi.Path)
		rec := Record{Repo: repo, Manifest: manifest}
		if ok {
			rec.Digest = digest.NewDigestFromEncoded(digest.Algorithm(alg), hexs)
			ok = rec.Digest.Validate() == nil
		}
		return fn(fi.Path, fi.ModTime, rec, ok)
	})
	if errors.Is(err, driver.ErrNotFound) {
		return nil
	}
	return err
}

func newRunID() string {
	var b [4]byte
	rand.Read(b[:])
	return time.Now().UTC().Format("20060102T150405Z") + "-" + hex.EncodeToString(b[:])
}
