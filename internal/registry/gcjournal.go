package registry

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/cairn-registry/cairn/internal/layout"

	"github.com/opencontainers/go-digest"

	"github.com/cairn-registry/cairn/internal/storage/driver"
)

// GC journal and fences.
//
// Before a registry operation relies on stored content it did not write
// itself (a manifest PUT on the blobs and child manifests it names and on
// its own revision; a blob upload or mount on an existing blob), it writes
// a journal record naming that content, then looks for open GC sweep
// rounds (fences) and waits until every fence it saw has closed; only then
// does it check that the content exists and store what it stores. A GC
// round opens its fence before it reads the journal and deletes only while
// its fence is open, so any record written before a writer saw no fence
// (or saw its fences close) is read by every round that deletes after the
// writer's existence checks. When the operation ends and no GC run is
// active, the writer removes its record; otherwise GC removes it once it has
// seen the operation's effects.

// GCFenceWait bounds how long a writer waits for a fence it saw to close. A
// GC round stops deleting GCRoundMax after it began writing its fence, so
// a fence still there after GCFenceWait belongs to a GC that died.
const (
	GCFenceWait = 60 * time.Second
	GCRoundMax  = 20 * time.Second
	// GCFenceStale: a fence this much older than the writer's clock is
	// ignored at once (it outlived any round by far); the margin covers
	// clock differences between nodes and the object store.
	GCFenceStale = 5 * time.Minute
)

// JournalRecord is what a journal record says: the repository, the
// manifest or blob the operation is about, and for a manifest the tags it
// writes and what it references.
type JournalRecord struct {
	Repo     string
	Manifest bool // Digest is a manifest being stored; else a blob
	Digest   digest.Digest
	Tags     []string        `json:"tags,omitempty"`
	Blobs    []digest.Digest `json:"blobs,omitempty"`
	Children []digest.Digest `json:"manifests,omitempty"`
}

// journalContent is a record's stored body; the rest is in its path.
type journalContent struct {
	Tags     []string        `json:"tags,omitempty"`
	Blobs    []digest.Digest `json:"blobs,omitempty"`
	Children []digest.Digest `json:"manifests,omitempty"`
}

// DecodeJournalContent fills rec's tags and references from a record body.
func DecodeJournalContent(rec *JournalRecord, b []byte) error {
	if len(b) == 0 {
		return nil
	}
	var c journalContent
	if err := json.Unmarshal(b, &c); err != nil {
		return fmt.Errorf("journal record: %w", err)
	}
	rec.Tags, rec.Blobs, rec.Children = c.Tags, c.Blobs, c.Children
	return nil
}

// manifestRecord describes a manifest push for the journal; ok is false when
// content does not parse (validation then refuses it before anything is
// read or stored).
func manifestRecord(repo string, d digest.Digest, content []byte, tags []string) (*JournalRecord, bool) {
	refs, _, err := ParseManifestRefs(content)
	if err != nil {
		return nil, false
	}
	return &JournalRecord{Repo: repo, Manifest: true, Digest: d, Tags: tags, Blobs: refs.Blobs, Children: refs.Manifests}, true
}

// protectForGC writes rec to the journal and waits out the GC rounds that
// may not have read it; see "GC journal and fences". The caller checks
// existence and stores only after it returns, and calls done when its
// operation has ended (successfully or not).
func (r *Registry) protectForGC(ctx context.Context, rec *JournalRecord) (done func(), err error) {
	var body []byte
	if rec.Manifest {
		body, err = json.Marshal(journalContent{Tags: rec.Tags, Blobs: rec.Blobs, Children: rec.Children})
		if err != nil {
			return nil, err
		}
	}
	var nonce [8]byte
	rand.Read(nonce[:])
	p := layout.JournalRecord(rec.Repo, rec.Manifest, rec.Digest, hex.EncodeToString(nonce[:]))
	if err := r.d.PutContent(ctx, p, body); err != nil {
		return nil, fmt.Errorf("gc journal: %w", err)
	}
	done = func() {
		// Without cancellation: a client that went away must not leave
		// the record behind to hold content until GC removes it.
		ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
		defer cancel()
		runs, _, err := r.gcActive(ctx)
		if err == nil && !runs {
			_, _ = r.d.DeleteFiles(ctx, []string{p})
		}
	}
	if err := r.waitFences(ctx); err != nil {
		done()
		return nil, err
	}
	return done, nil
}

// waitFences returns once every fence open now has closed, or has been
// open longer than any live GC keeps one.
func (r *Registry) waitFences(ctx context.Context) error {
	_, fences, err := r.gcActive(ctx)
	if err != nil || len(fences) == 0 {
		return err
	}
	deadline := time.Now().Add(GCFenceWait)
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
		_, now, err := r.gcActive(ctx)
		if err != nil {
			return err
		}
		// Fences opened since are fine: those rounds read the journal
		// after the record was written.
		fences = slices.DeleteFunc(fences, func(f string) bool { return !slices.Contains(now, f) })
		if len(fences) == 0 {
			return nil
		}
	}
	return nil
}

// gcActive lists GCActivePath: whether a GC run marker is present, and the
// fences that are not stale.
func (r *Registry) gcActive(ctx context.Context) (runs bool, fences []string, err error) {
	now := time.Now()
	err = r.d.Walk(ctx, layout.GCActiveDir, func(fi driver.FileInfo) error {
		if fi.IsDir {
			return driver.ErrSkipDir
		}
		name := fi.Path[strings.LastIndexByte(fi.Path, '/')+1:]
		switch {
		case strings.HasPrefix(name, layout.GCRunPrefix):
			runs = true
		case strings.HasPrefix(name, layout.GCFencePrefix):
			if fi.ModTime.IsZero() || now.Sub(fi.ModTime) < GCFenceStale {
				fences = append(fences, fi.Path)
			}
		}
		return nil
	})
	if errors.Is(err, driver.ErrNotFound) {
		err = nil
	}
	if err != nil {
		return false, nil, fmt.Errorf("gc fences: %w", err)
	}
	return runs, fences, nil
}
