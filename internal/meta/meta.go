// Package meta is the metadata store that deduplication and garbage collection share:
// the file index with reference counts and tombstones, layer states and summaries, the
// image→layers map (ILmap), the client→layers pull map (ULmap), layer popularity and
// counters. Every method is one atomic step, so the embedded bolt store (one node,
// package meta/bolt) and the Redis store (several nodes, Lua; package meta/redis)
// can both implement it. This package holds the contract only: the interfaces,
// their lifecycles, the errors callers compare with errors.Is, and the key and
// value encodings both stores share; metatest is the suite both run.
//
// File lifecycle (the contract between dedup and GC):
//
//  1. Dedup calls AddLayerRefs with one layer's files: the layer takes one reference
//     on each distinct file, once, however often the call is retried. A result with
//     Write set means the file is unknown, tombstoned or Missing: the caller must
//     store it. With Revived also set, a GC that tombstoned the file may still delete
//     the object after the caller's write: the caller must not trust the object (nor
//     drop the layer's intact copy) until no GC run that could have tombstoned it is
//     active. A retried AddLayerRefs counts nothing and reports Write only from the
//     current state (Missing, or a revive GC has not settled): it cannot know whether
//     the first call's writes happened, so a dedup resuming after a crash checks
//     that each file's object exists.
//  2. Deleting a deduplicated layer calls ReleaseLayerRefs(layer); it drops the
//     layer's references and returns the files whose count reached zero. A retry
//     is a no-op.
//  3. GC calls Tombstone on each such file. Only when it returns true may GC delete the
//     object, and then call DropFileEntry. A file re-referenced before Tombstone makes it
//     return false; a file re-referenced after Tombstone is revived (AddLayerRefs
//     reports Write and Revived), and DropFileEntry then reports revived=true and marks
//     the entry Missing, because GC's delete may have removed the copy the reviver
//     wrote. The next AddLayerRefs of a new layer holding a Missing file reports
//     Write and clears Missing; dedup checks Files for Missing before it drops a
//     layer's intact copy.
//
// GC takes steps 2 and 3 through Bulk, many layers or files per call.
//
// Pack lifecycle (packs hold the files' bytes; package pack writes and reads them):
//
//  1. BeginPack records a pack before its object is written, so that GC knows a
//     write may be under way and an object without a record is an orphan.
//  2. Once the object is complete, PlaceFiles records where its files are (each
//     file's Location) and the pack's size. A file is readable from a pack only
//     after that: a crash before it leaves an unreferenced pack, never a file
//     pointing into a partial one.
//  3. A file leaves a pack when its entry is dropped (DropFileEntry,
//     DropFileEntries) or PlaceFiles moves it elsewhere (a rewrite, or
//     compaction moving the live files of a sparse pack into a new one); the
//     pack's Live bytes fall, and Changed is set to the store's now.
//  4. GC deletes a pack whose Live is 0: TombstonePack (only once Live has been 0
//     for the GC delay, so a restore that resolved an old location finishes
//     first), then the object, then DeletePack. PlaceFiles into a tombstoned or
//     unrecorded pack fails with ErrPackGone, so no file ever points into a pack
//     GC is deleting.
package meta

import (
	"context"
	_ "crypto/sha512" // registers sha512 so such digests validate
	"errors"
	"time"

	"github.com/opencontainers/go-digest"
)

// Errors returned by stores; compare with errors.Is.
var (
	ErrNotFound       = errors.New("meta: not found")
	ErrLocked         = errors.New("meta: store is locked by another process")
	ErrInvalidDigest  = errors.New("meta: invalid digest")
	ErrNotTombstoned  = errors.New("meta: file is not tombstoned")
	ErrInvalidState   = errors.New("meta: invalid layer state")
	ErrInvalidRelease = errors.New("meta: release of an unreferenced file")
	// ErrLayerFilesDiffer: AddLayerRefs for a layer that already holds references on
	// a different set of files. ReleaseLayerRefs first to replace the set.
	ErrLayerFilesDiffer = errors.New("meta: layer already holds a different set of files")
	// ErrInvalidLease: an empty or too long lease name or holder, or a ttl <= 0.
	ErrInvalidLease = errors.New("meta: invalid lease")
	// ErrPackGone: PlaceFiles into a pack that is not recorded or is
	// tombstoned (GC is deleting it).
	ErrPackGone = errors.New("meta: pack is not recorded or is being deleted")
	// ErrInvalidPack: an empty or too long pack id, a negative size, or a
	// placement with a negative offset or a length <= 0.
	ErrInvalidPack = errors.New("meta: invalid pack or placement")
	// ErrCorrupt: the bolt file failed its consistency check at open, or
	// bbolt panicked reading it. bolt.OpenRecovering moves such a file aside.
	ErrCorrupt = errors.New("meta: metadata file is corrupt")
)

// MaxPackID is the longest pack id, in bytes.
const MaxPackID = 128

// FileRef is the outcome of adding one reference to a file.
type FileRef struct {
	Digest digest.Digest
	// Refs is the count after the add.
	Refs int64
	// Write is true when the caller must store the file's content: it was unknown,
	// tombstoned (being deleted), marked Missing, or Revived.
	Write bool
	// Revived is true when a GC tombstoned the file and has not settled that
	// tombstone with DropFileEntry: its delete of the object may still land after the
	// caller's write. The caller must write the file and must not trust the object
	// until no GC run that could have tombstoned it is active.
	Revived bool
}

// FileInfo is the stored state of one file entry.
type FileInfo struct {
	Digest     digest.Digest
	Exists     bool // false: no entry at all
	Refs       int64
	Tombstoned bool // GC owns it and may be deleting the object
	Missing    bool // a revive raced a delete; the object may be gone
	// Location is where the file's bytes are; zero when none is recorded
	// (the file is an object of its own under cairn/files, written before
	// packs, or its bytes are not written yet).
	Location Location
}

// Location is where a file's stored (compressed) bytes are: Length bytes
// at Offset of the pack with id Pack. The zero Location means none.
type Location struct {
	Pack   string
	Offset int64
	Length int64
}

// IsZero reports whether l names no pack.
func (l Location) IsZero() bool { return l.Pack == "" }

// Placement asks PlaceFiles to put one file at Offset, Length of the pack.
type Placement struct {
	Digest digest.Digest
	Offset int64
	Length int64
	// From, when not zero, makes the placement conditional: it applies only
	// while the file is at From (compaction moving a file out of a pack).
	From Location
}

// PackInfo is the record of one pack.
type PackInfo struct {
	ID string
	// Size is the bytes the pack's files can occupy: its object up to its
	// own index (0 until PlaceFiles), so that Live/Size is the share of
	// them still used.
	Size int64
	// Live is the sum of the Lengths of the files located in the pack.
	Live int64
	// Changed is when the pack was begun or its Live last fell, in the
	// store's clock.
	Changed    time.Time
	Tombstoned bool
}

// Packs records the pack objects holding unique files and how much of each
// is live (the package doc's pack lifecycle).
type Packs interface {
	// BeginPack records pack id, empty, before its object is written. A pack
	// already recorded is left as it is.
	BeginPack(ctx context.Context, id string) error
	// PlaceFiles records, as one atomic step, the pack's size and where each
	// file of files is in it. A file with no entry, or whose From does not
	// match its location, is not placed; placed[i] tells for files[i]. A
	// placed file's Length is added to the pack's Live and subtracted from
	// the pack it was in (if any). A pack not recorded or tombstoned fails
	// with ErrPackGone and changes nothing.
	PlaceFiles(ctx context.Context, id string, size int64, files []Placement) (placed []bool, err error)
	// ListPacks returns up to limit packs in id order after the cursor
	// `after` (empty: from the start). An empty result means the end.
	ListPacks(ctx context.Context, after string, limit int) ([]PackInfo, error)
	// TombstonePack marks pack id as being deleted if its Live is 0 and its
	// Changed at least olderThan ago (the store's clock). It reports whether
	// the pack is tombstoned now (true again for one tombstoned already,
	// so a stopped GC resumes); false for a pack with live files, a young
	// one, or no record.
	TombstonePack(ctx context.Context, id string, olderThan time.Duration) (bool, error)
	// DeletePack removes the record of a tombstoned pack after GC deleted its
	// object. A pack not tombstoned is left alone (false); no record is a
	// no-op (true).
	DeletePack(ctx context.Context, id string) (bool, error)
}

// FileIndex counts references to the unique files under cairn/files.
type FileIndex interface {
	// AddLayerRefs takes one reference on each distinct digest in files on behalf
	// of layer, atomically, and records which files layer holds. It is idempotent
	// per layer: if layer already holds references, nothing is counted again (a
	// dedup retried after a crash must not count twice) and the current state is
	// returned; if it holds a different set of files, it fails with
	// ErrLayerFilesDiffer. It returns one FileRef per element of files, in order; a
	// digest listed twice is counted once, and only its first occurrence has Write
	// or Revived set. An empty files takes no references and records nothing.
	AddLayerRefs(ctx context.Context, layer digest.Digest, files []digest.Digest) ([]FileRef, error)
	// ReleaseLayerRefs drops every reference layer holds and returns the distinct
	// files whose count reached zero. A layer holding none is a no-op with a nil
	// result, so a retry is safe. A recorded file with no references (an
	// inconsistent index) fails with ErrInvalidRelease and changes nothing.
	ReleaseLayerRefs(ctx context.Context, layer digest.Digest) ([]digest.Digest, error)
	// LayerFiles returns the distinct files layer holds references on, in key
	// order; ErrNotFound if it holds none.
	LayerFiles(ctx context.Context, layer digest.Digest) ([]digest.Digest, error)
	// Tombstone marks a zero-count file as being deleted. It returns false when the
	// file has references or no entry. It is idempotent: a tombstoned file returns
	// true again, so a GC that crashed between Tombstone and DropFileEntry can resume.
	Tombstone(ctx context.Context, d digest.Digest) (bool, error)
	// DropFileEntry removes a tombstoned entry after GC deleted the object (a
	// located file's Length leaves its pack's Live). If the file
	// was revived since Tombstone, the entry stays, is marked Missing, and revived is
	// true. A file never tombstoned fails with ErrNotTombstoned; no entry is a no-op.
	DropFileEntry(ctx context.Context, d digest.Digest) (revived bool, err error)
	// Files reports the state of each digest, in order.
	Files(ctx context.Context, digests []digest.Digest) ([]FileInfo, error)
	// ZeroFiles lists, in key order after the cursor `after` (empty: from the start),
	// up to limit files with zero references, tombstoned or not: the work list of a
	// GC that resumes after a crash.
	ZeroFiles(ctx context.Context, after digest.Digest, limit int) ([]digest.Digest, error)
}

// Bulk is GC's side of the file lifecycle (steps 2 and 3 above) for many layers or
// files per call, so that a GC of millions of deduplicated blobs costs thousands of
// store round trips (bolt: commits with an fsync each), not millions. Each element is
// one atomic step, as the single-item method takes it; a call as a whole is not
// atomic. After an error the result lists what was done (possibly nothing); the rest
// may or may not be done, and every step is safe to repeat.
type Bulk interface {
	// ReleaseLayers is, for each layer, ReleaseLayerRefs then DeleteLayer as one
	// atomic step: what deleting the layers' blobs calls. It returns the files whose
	// count reached zero. A layer whose release fails with ErrInvalidRelease is left
	// unchanged (its layer entry too) and named in the error; the others are
	// released all the same.
	ReleaseLayers(ctx context.Context, layers []digest.Digest) (zeroed []digest.Digest, err error)
	// TombstoneFiles is Tombstone on each file; it returns those it tombstoned (or
	// found tombstoned), in order.
	TombstoneFiles(ctx context.Context, files []digest.Digest) (tombstoned []digest.Digest, err error)
	// DropFileEntries is DropFileEntry on each file, once GC deleted the objects of files
	// TombstoneFiles returned; it returns those revived since. Unlike DropFileEntry,
	// an entry neither tombstoned nor revived is no error: the caller's tombstone
	// was settled by another GC run, or the entry was deleted and created anew, so
	// its holders may have lost the object to the caller's delete. It is marked
	// Missing, like a revived one, and returned with them.
	DropFileEntries(ctx context.Context, files []digest.Digest) (revived []digest.Digest, err error)
}

// LayerState is how a layer is held.
type LayerState uint8

// Layer states. The zero value is invalid so a missing state is never mistaken.
const (
	StatePending        LayerState = iota + 1 // queued or being disassembled
	StateIntact                               // only the intact blob serves pulls
	StateDeduplicated                         // the recipe serves pulls
	StateIrreproducible                       // no encoder reproduced it; stays intact
)

// States lists every valid state, for iteration.
var States = [...]LayerState{StatePending, StateIntact, StateDeduplicated, StateIrreproducible}

func (s LayerState) String() string {
	switch s {
	case StatePending:
		return "pending"
	case StateIntact:
		return "intact"
	case StateDeduplicated:
		return "deduplicated"
	case StateIrreproducible:
		return "irreproducible"
	}
	return "invalid"
}

// Valid reports whether s is one of the defined states.
func (s LayerState) Valid() bool { return s >= StatePending && s <= StateIrreproducible }

// Layers stores each deduplicated layer's state and summary: opaque bytes
// for dedup's own record of the layer (sizes, encoders, mode). The recipe
// that rebuilds a layer lives in storage, not here.
type Layers interface {
	// PutLayer stores summary (may be nil) and state for layer, replacing
	// both.
	PutLayer(ctx context.Context, layer digest.Digest, summary []byte, state LayerState) error
	// SetLayerState changes the state and keeps the summary; ErrNotFound
	// if none.
	SetLayerState(ctx context.Context, layer digest.Digest, state LayerState) error
	// GetLayer returns the summary and state; ErrNotFound if none.
	GetLayer(ctx context.Context, layer digest.Digest) ([]byte, LayerState, error)
	// DeleteLayer removes the layer's entry; no entry is a no-op.
	DeleteLayer(ctx context.Context, layer digest.Digest) error
	// ListLayers returns up to limit layers in state, in key order after the cursor
	// `after` (empty: from the start). An empty result means the end.
	ListLayers(ctx context.Context, state LayerState, after digest.Digest, limit int) ([]digest.Digest, error)
	// LayerCounts returns the number of layers in each state.
	LayerCounts(ctx context.Context) (map[LayerState]int64, error)
}

// ImageMap is the ILmap: which layers a manifest names.
type ImageMap interface {
	SetImageLayers(ctx context.Context, manifest digest.Digest, layers []digest.Digest) error
	// ImageLayers returns the layers in the order set; ErrNotFound if none.
	ImageLayers(ctx context.Context, manifest digest.Digest) ([]digest.Digest, error)
	DeleteImage(ctx context.Context, manifest digest.Digest) error
}

// LayerPull is one ULmap entry: how often a client pulled a layer.
type LayerPull struct {
	Layer digest.Digest
	Pulls int64
	Last  time.Time
}

// Pulls is the ULmap and layer popularity. Per-client entries are capped; the least
// recently pulled entry is evicted first, so a very old pull may count as a first pull.
type Pulls interface {
	// RecordPull records that client pulled layer at now and returns how many times
	// the client had pulled it before (0: first pull).
	RecordPull(ctx context.Context, client string, layer digest.Digest, now time.Time) (int64, error)
	// ClientLayers returns the client's entries, most recently pulled first.
	ClientLayers(ctx context.Context, client string) ([]LayerPull, error)
	// RepullRatio is repeat pulls / all pulls recorded for client (0 if none).
	RepullRatio(ctx context.Context, client string) (float64, error)
	// LayerPulls counts pulls of layer (by anyone) at or after since, at the
	// store's bucket granularity and within its retained horizon.
	LayerPulls(ctx context.Context, layer digest.Digest, since time.Time) (int64, error)
}

// Stats holds named counters (encoder hits, bytes saved, ...).
type Stats interface {
	AddStat(ctx context.Context, name string, delta int64) error
	Stats(ctx context.Context) (map[string]int64, error)
}

// MaxLeaseName is the longest lease name or holder, in bytes.
const MaxLeaseName = 1024

// Leases keep several nodes sharing a store from doing one long job (the dedup of
// a layer) at the same time. A lease is advisory: a holder that stalls past its
// ttl loses the lease without being told, and another may take it. So a lease
// only saves work; what it guards must stay safe to run twice at once. A holder
// working longer than its ttl renews with TryLease (every ttl/3, say) and stops
// when that reports false. The store's clock decides expiry (bolt: the host's,
// Redis: the server's), never the caller's; a ttl counts in whole milliseconds,
// rounded up. Names and holders are non-empty and at most MaxLeaseName bytes.
type Leases interface {
	// TryLease takes the lease on name for holder until now+ttl if it is free,
	// expired, or already held by holder (which renews it). It reports whether
	// holder holds it now.
	TryLease(ctx context.Context, name, holder string, ttl time.Duration) (bool, error)
	// ReleaseLease gives up holder's lease on name (no-op if not held by holder).
	ReleaseLease(ctx context.Context, name, holder string) error
}

// Identity ties the metadata store to the storage it indexes. The store is
// the source of truth: recipes name each layer's files and every pack holds
// its own index, so the metadata can be rebuilt from storage (package
// dedup's Rebuild). StoreID is written only when the metadata is known to
// be a complete index of the storage with that id: at the end of a
// rebuild. A store that is new, flushed, restored from another store, or
// whose rebuild stopped half-way reports "" or another id, and nothing is
// deleted on its word (GC keeps packs and files while it is so).
type Identity interface {
	// StoreID returns the id of the storage this metadata is a complete
	// index of; "" when none is recorded.
	StoreID(ctx context.Context) (string, error)
	// SetStoreID records id; "" clears it (a rebuild begins).
	SetStoreID(ctx context.Context, id string) error
}

// Store is the whole metadata store.
type Store interface {
	Identity
	FileIndex
	Layers
	Bulk
	Packs
	ImageMap
	Pulls
	Stats
	Leases
	Close() error
}
