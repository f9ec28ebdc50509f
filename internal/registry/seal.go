package registry

import (
	"cmp"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"slices"
	"strings"
	"sync"

	"github.com/opencontainers/go-digest"

	"github.com/cairn-registry/cairn/internal/layout"
	"github.com/cairn-registry/cairn/internal/storage/driver"
)

// Lifecycle of a blob's durability on a filesystem (a driver with a cache
// epoch: driver.InPlaceAppender), unless Options.SyncBlobs:
//
//   - An upload's commit writes a marker, UnsyncedMarker(epoch, digest,
//     nonce), naming the layer link it is about to write, then gives the
//     session's file its blob name (MoveNew: never over a blob already
//     there) and writes the link, none of it synced. The 201 comes at the
//     speed of the page cache; a sync there would wait for the disk to
//     write every byte, and (ext4, data=ordered) other files' bytes too.
//   - The blob is sealed in the background at once: its bytes, its name
//     and its links synced, then the marker removed. A seal that fails
//     removes the blob and its links, whose bytes on disk are unknown; the
//     client pushes it again.
//   - A manifest PUT seals every blob it names, this process's (waiting for
//     the background seal, or doing it) and any another process left
//     marked, before it stores the manifest. So an image whose manifest was
//     accepted is durable whole, as when every blob was synced before its
//     201: manifests are what clients pull, and every client pushes the
//     manifest after its blobs.
//   - The marker is made before the blob's name and reaches the disk first:
//     a journaling filesystem (ext4, XFS, btrfs) writes metadata in the
//     order it was made. At start, Recover seals what an earlier process of
//     the same boot left marked (the page cache still holds the bytes), and
//     checks every blob marked in another epoch (the machine restarted)
//     against its digest: a blob the crash tore is deleted with its links,
//     so that a push finds it missing and sends it again. No manifest
//     accepted before the crash names such a blob.
//
// Blobs stored any other way (object stores, several chunks copied into
// one, a session's bytes verified after a restart, a mount) are durable
// before their 201, as before.

// sealSlots bounds the seals run in the background at once.
const sealSlots = 2

// sealer tracks this process's blobs that are not sealed yet.
type sealer struct {
	slots   chan struct{}
	mu      sync.Mutex
	pending map[digest.Digest][]*sealEntry
}

func newSealer() *sealer {
	return &sealer{slots: make(chan struct{}, sealSlots), pending: make(map[digest.Digest][]*sealEntry)}
}

// sealEntry is one commit's unsynced blob, its link and its marker.
type sealEntry struct {
	d      digest.Digest
	link   string
	marker string
	once   sync.Once
	err    error
}

func (s *sealer) add(e *sealEntry) {
	s.mu.Lock()
	s.pending[e.d] = append(s.pending[e.d], e)
	s.mu.Unlock()
}

func (s *sealer) remove(e *sealEntry) {
	s.mu.Lock()
	defer s.mu.Unlock()
	es := slices.DeleteFunc(s.pending[e.d], func(x *sealEntry) bool { return x == e })
	if len(es) == 0 {
		delete(s.pending, e.d)
	} else {
		s.pending[e.d] = es
	}
}

func (s *sealer) entries(d digest.Digest) []*sealEntry {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.pending[d])
}

func (s *sealer) all() []*sealEntry {
	s.mu.Lock()
	defer s.mu.Unlock()
	var es []*sealEntry
	for _, v := range s.pending {
		es = append(es, v...)
	}
	return es
}

// placeUnsynced gives session id's chunk object src the name of blob d
// without a sync, after its marker, and returns the entry to seal once
// the link is written (see the lifecycle above).
func (r *Registry) placeUnsynced(ctx context.Context, repo, id string, d digest.Digest, src string) (*sealEntry, error) {
	var nonce [8]byte
	rand.Read(nonce[:])
	e := &sealEntry{d: d, link: layout.LayerLink(repo, d), marker: layout.UnsyncedMarker(r.epoch, d, hex.EncodeToString(nonce[:]))}
	if err := r.cache.PutCached(ctx, e.marker, []byte(e.link)); err != nil {
		return nil, err
	}
	err := r.cache.MoveNew(ctx, src, layout.BlobData(d))
	if errors.Is(err, fs.ErrExist) {
		// Placed meanwhile by another push: that one is sealed (or
		// marked) already, and this session's copy goes with it.
		r.d.DeleteFiles(context.WithoutCancel(ctx), []string{e.marker})
		return nil, nil
	}
	if err != nil {
		r.d.DeleteFiles(context.WithoutCancel(ctx), []string{e.marker})
		return nil, r.placed(ctx, id, layout.BlobData(d), err)
	}
	r.seals.add(e)
	return e, nil
}

// sealLater seals e in the background, sealSlots at a time. Not a task on
// the server's runner: a manifest PUT waits for the seals of its blobs, so
// they must not queue behind dedup or GC work.
func (r *Registry) sealLater(e *sealEntry) {
	go func() {
		r.seals.slots <- struct{}{}
		defer func() { <-r.seals.slots }()
		r.seal(e)
	}()
}

// seal syncs e's blob and link and removes its marker, once; later calls
// wait for the first and return its outcome.
func (r *Registry) seal(e *sealEntry) error {
	e.once.Do(func() {
		ctx := context.Background()
		e.err = r.syncMarked(ctx, e.d, []string{e.link})
		if e.err == nil {
			_, e.err = r.d.DeleteFiles(ctx, []string{e.marker})
		} else {
			// The bytes on disk are unknown: nothing may name them.
			r.d.DeleteFiles(ctx, []string{layout.BlobData(e.d), e.link, e.marker})
			e.err = fmt.Errorf("blob %s is lost, push it again: %w", e.d, e.err)
		}
		r.seals.remove(e)
	})
	return e.err
}

// syncMarked syncs blob d and the links; a file gone meanwhile (a blob
// deleted, a link removed) has nothing to keep.
func (r *Registry) syncMarked(ctx context.Context, d digest.Digest, links []string) error {
	for _, p := range append([]string{layout.BlobData(d)}, links...) {
		if err := r.cache.Sync(ctx, p); err != nil && !errors.Is(err, driver.ErrNotFound) {
			return err
		}
	}
	return nil
}

// sealBlobs seals the blobs a manifest of repo names before it is stored:
// this process's entries, and markers another process of this boot left;
// a marker of another epoch (another node on a shared filesystem) has its
// blob checked first.
func (r *Registry) sealBlobs(ctx context.Context, repo string, blobs []digest.Digest) error {
	if r.cache == nil {
		return nil
	}
	if r.seals != nil {
		for _, d := range blobs {
			for _, e := range r.seals.entries(d) {
				if err := r.seal(e); err != nil {
					return err
				}
			}
		}
	}
	epochs, err := r.d.List(ctx, layout.UnsyncedDir)
	if errors.Is(err, driver.ErrNotFound) {
		return nil
	}
	if err != nil {
		return err
	}
	for _, dir := range epochs {
		epoch := dir[strings.LastIndexByte(dir, '/')+1:]
		for _, d := range blobs {
			markers, err := r.d.List(ctx, layout.UnsyncedBlobDir(epoch, d))
			if errors.Is(err, driver.ErrNotFound) {
				continue
			}
			if err != nil {
				return err
			}
			for _, m := range markers {
				if epoch == r.epoch {
					err = r.sealMarker(ctx, m, d, layout.LayerLink(repo, d))
				} else if lost, cerr := r.checkMarked(ctx, m, d); cerr != nil || lost {
					// Another node's blob on a shared filesystem, or one
					// a failed Recover left: its bytes are checked.
					err = cmp.Or(cerr, fmt.Errorf("%w: %s was lost when its node stopped", ErrManifestBlobUnknown, d))
				}
				if err != nil {
					return err
				}
			}
		}
	}
	return nil
}

// sealMarker syncs the blob and links a marker names, and extra, then
// removes the marker.
func (r *Registry) sealMarker(ctx context.Context, marker string, d digest.Digest, extra ...string) error {
	b, err := r.d.GetContent(ctx, marker)
	if errors.Is(err, driver.ErrNotFound) {
		return nil // sealed by its own process meanwhile
	}
	if err != nil {
		return err
	}
	if err := r.syncMarked(ctx, d, append(markerLinks(d, b), extra...)); err != nil {
		return err
	}
	_, err = r.d.DeleteFiles(ctx, []string{marker})
	return err
}

// markerLinks returns the layer links a marker's content names, keeping
// only links of blob d: a torn marker names nothing.
func markerLinks(d digest.Digest, b []byte) []string {
	var links []string
	for _, l := range strings.Split(string(b), "\n") {
		if e := layout.ParseRepoPath(l); driver.ValidPath(l) && e.Kind == layout.EntryLayerLink && e.Alg == string(d.Algorithm()) && e.Hex == d.Encoded() {
			links = append(links, l)
		}
	}
	return links
}

// SealAll seals every blob this process has not sealed yet: at shutdown.
func (r *Registry) SealAll(ctx context.Context) error {
	if r.seals == nil {
		return nil
	}
	var errs []error
	for _, e := range r.seals.all() {
		if err := ctx.Err(); err != nil {
			return err
		}
		errs = append(errs, r.seal(e))
	}
	return errors.Join(errs...)
}

// Recovered is what Recover did.
type Recovered struct {
	// Sealed counts blobs an earlier process of this boot left unsynced.
	Sealed int
	// Verified counts blobs unsynced when the machine stopped that hold
	// their digest's bytes; Lost, those that did not and were deleted with
	// their links.
	Verified, Lost int
}

// Recover deals with the markers earlier processes left (see the
// lifecycle above): before serving, since a blob torn by a crash must not
// be served. A blob it cannot read is reported and keeps its marker.
func (r *Registry) Recover(ctx context.Context) (Recovered, error) {
	var (
		rec  Recovered
		errs []error
	)
	if r.cache == nil {
		return rec, nil
	}
	err := r.d.Walk(ctx, layout.UnsyncedDir, func(fi driver.FileInfo) error {
		if fi.IsDir {
			return nil
		}
		epoch, d, ok := layout.ParseUnsyncedMarker(fi.Path)
		if !ok {
			return nil
		}
		if epoch == r.epoch {
			if err := r.sealMarker(ctx, fi.Path, d); err != nil {
				errs = append(errs, err)
			} else {
				rec.Sealed++
			}
			return nil
		}
		lost, err := r.checkMarked(ctx, fi.Path, d)
		switch {
		case err != nil:
			errs = append(errs, err)
		case lost:
			rec.Lost++
		default:
			rec.Verified++
		}
		return nil
	})
	if err != nil && !errors.Is(err, driver.ErrNotFound) {
		errs = append(errs, err)
	}
	return rec, errors.Join(errs...)
}

// checkMarked verifies the blob a marker of another epoch names: intact, it
// is synced and its links rewritten where the crash tore them; torn or
// short, it is deleted with its links. Either way the marker goes.
func (r *Registry) checkMarked(ctx context.Context, marker string, d digest.Digest) (lost bool, err error) {
	b, err := r.d.GetContent(ctx, marker)
	if err != nil && !errors.Is(err, driver.ErrNotFound) {
		return false, err
	}
	links := markerLinks(d, b)
	ok, err := r.holdsDigest(ctx, d)
	if err != nil {
		return false, err
	}
	if !ok {
		paths := append([]string{layout.BlobData(d), marker}, links...)
		if _, err := r.d.DeleteFiles(ctx, paths); err != nil {
			return false, err
		}
		return true, nil
	}
	for _, l := range links {
		if got, err := r.readLink(ctx, l); err != nil || got != d {
			if err := r.writeLink(ctx, l, d); err != nil {
				return false, err
			}
		}
	}
	if err := r.syncMarked(ctx, d, links); err != nil {
		return false, err
	}
	_, err = r.d.DeleteFiles(ctx, []string{marker})
	return false, err
}

// holdsDigest reports whether blob d's data is there and hashes to d; a
// missing blob does not.
func (r *Registry) holdsDigest(ctx context.Context, d digest.Digest) (bool, error) {
	rc, err := r.d.Reader(ctx, layout.BlobData(d), 0)
	if errors.Is(err, driver.ErrNotFound) {
		return false, nil
	}
	if err != nil {
		return false, err
	}
	defer rc.Close()
	v := d.Verifier()
	if _, err := io.Copy(v, rc); err != nil {
		return false, fmt.Errorf("check blob %s: %w", d, err)
	}
	return v.Verified(), nil
}
