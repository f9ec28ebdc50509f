package gc

import (
	"context"
	"errors"
	"slices"
	"strings"
	"time"

	"github.com/opencontainers/go-digest"

	"github.com/cairn-registry/cairn/internal/digestkey"
	"github.com/cairn-registry/cairn/internal/layout"
	"github.com/cairn-registry/cairn/internal/manifest"
	"github.com/cairn-registry/cairn/internal/parallel"
	"github.com/cairn-registry/cairn/internal/repeat"
	"github.com/cairn-registry/cairn/internal/storage/driver"
)

// Revision flags.
const (
	fYoung      uint8 = 1 << iota // a tag index entry naming it is within the delay
	fLive                         // reached, or kept for another reason
	fMissing                      // its manifest blob is missing
	fBad                          // its manifest does not parse
	fUnreadable                   // storage failed to return its manifest
	fDelete                       // to be deleted
)

// Subject values of a revision besides a revision index.
const (
	noSubject       = -1 // not a referrer (or its manifest was not read)
	danglingSubject = -2 // its subject is not a revision of the repository
)

// revision is one manifest revision of a repository: 48 bytes.
type revision struct {
	key     dkey
	flags   uint8
	subject int32
	mod     int64 // revision link's modification time, Unix ns (0: unknown)
}

type tagState struct {
	name       string
	hasCurrent bool
	current    int32 // revision index, -1 when it names none
	curMod     int64
	index      idxSet // revisions this tag's index names
	stale      []dkey // old index entries naming no revision
}

type layerLink struct {
	key dkey
	del bool
	mod int64
}

// repoState is what the mark keeps of a repository for the sweep: compact
// tables, no paths.
type repoState struct {
	name      string
	revs      []revision // sorted by key
	tags      []tagState
	layers    []layerLink // sorted by key
	tagsSeen  bool
	uncertain bool // a tag link could not be read, or the listing was out of order: delete nothing
	dangling  map[int32]dkey
	children  map[int32][]int32 // index manifests' children that are revisions here
	nDelete   int
}

func modNS(t time.Time) int64 {
	if t.IsZero() {
		return 0
	}
	return t.UnixNano()
}

func (rs *repoState) findRev(k dkey) int {
	i, ok := slices.BinarySearchFunc(rs.revs, k, func(r revision, k dkey) int { return digestkey.Compare(r.key, k) })
	if !ok {
		return -1
	}
	return i
}

func (rs *repoState) findLayer(k dkey) int {
	i, ok := slices.BinarySearchFunc(rs.layers, k, func(l layerLink, k dkey) int { return digestkey.Compare(l.key, k) })
	if !ok {
		return -1
	}
	return i
}

func (rs *repoState) findTag(name string) *tagState {
	for i := range rs.tags {
		if rs.tags[i].name == name {
			return &rs.tags[i]
		}
	}
	return nil
}

func (rs *repoState) tag(name string) *tagState {
	if n := len(rs.tags); n > 0 && rs.tags[n-1].name == name {
		return &rs.tags[n-1]
	}
	rs.tags = append(rs.tags, tagState{name: strings.Clone(name), current: -1})
	return &rs.tags[len(rs.tags)-1]
}

func (rs *repoState) sortRevs() {
	cmp := func(a, b revision) int { return digestkey.Compare(a.key, b.key) }
	if !slices.IsSortedFunc(rs.revs, cmp) {
		slices.SortFunc(rs.revs, cmp)
	}
}

// add records one listed file of the repository.
func (rs *repoState) add(c *collector, e layout.RepoEntry, fi driver.FileInfo) {
	mod := modNS(fi.ModTime)
	switch e.Kind {
	case layout.EntryRevisionLink:
		k, ok := c.keys.Parse(e.Alg, e.Hex)
		if !ok {
			c.problem(ProblemBadPath, fi.Path)
			return
		}
		if rs.tagsSeen {
			// Tag index entries already hold revision indexes.
			rs.uncertain = true
		}
		rs.revs = append(rs.revs, revision{key: k, subject: noSubject, mod: mod})
	case layout.EntryTagCurrent:
		t := rs.tag(e.Tag)
		t.hasCurrent, t.curMod = true, mod
	case layout.EntryTagIndex:
		k, ok := c.keys.Parse(e.Alg, e.Hex)
		if !ok {
			c.problem(ProblemBadPath, fi.Path)
			return
		}
		if !rs.tagsSeen {
			rs.tagsSeen = true
			rs.sortRevs()
		}
		t := rs.tag(e.Tag)
		if i := rs.findRev(k); i >= 0 {
			t.index.add(uint32(i), len(rs.revs))
			if c.young(mod) {
				rs.revs[i].flags |= fYoung
			}
		} else if !c.young(mod) {
			t.stale = append(t.stale, k)
		}
	case layout.EntryLayerLink:
		k, ok := c.keys.Parse(e.Alg, e.Hex)
		if !ok {
			c.problem(ProblemBadPath, fi.Path)
			return
		}
		rs.layers = append(rs.layers, layerLink{key: k, mod: mod})
	}
}

// markAll lists the repositories and marks what their live manifests
// reference, listing the next repository while one is processed.
func (c *collector) markAll(ctx context.Context) error {
	w := layout.RepoWalk[*repoState]{
		// Upload sessions name no content yet; a deleted manifest's
		// referrers link is built from its subject (see the sweep).
		SkipDir: func(k layout.EntryKind) bool { return k == layout.EntryUploads || k == layout.EntryReferrers },
		Open:    func(repo string) *repoState { return &repoState{name: repo} },
		Add: func(rs *repoState, e layout.RepoEntry, fi driver.FileInfo) error {
			rs.add(c, e, fi)
			return nil
		},
	}
	err := layout.WalkRepos(ctx, c.d, w, func(rs *repoState) error {
		if err := c.processRepo(ctx, rs); err != nil {
			return err
		}
		c.repoIndex[rs.name] = len(c.repos)
		c.repos = append(c.repos, rs)
		return nil
	})
	if err != nil {
		return err
	}
	c.rep.Repositories = int64(len(c.repos))
	return nil
}

// manifestInfo is what reading one manifest found. Workers fill it, not
// the revision table, which other workers search meanwhile.
type manifestInfo struct {
	flags    uint8
	blobs    []dkey
	children []int32
	subject  int32
	dangling dkey
}

// processRepo reads the repository's tag links and manifests, decides which
// manifests live, and marks what they reference.
func (c *collector) processRepo(ctx context.Context, rs *repoState) error {
	c.nRepos.Add(1)
	rs.sortRevs()
	if cmp := func(a, b layerLink) int { return digestkey.Compare(a.key, b.key) }; !slices.IsSortedFunc(rs.layers, cmp) {
		slices.SortFunc(rs.layers, cmp)
	}
	if err := c.readTags(ctx, rs); err != nil {
		return err
	}
	infos, err := c.readManifests(ctx, rs)
	if err != nil {
		return err
	}
	c.liveness(rs)

	referenced := make(map[dkey]struct{})
	for i := range rs.revs {
		r := &rs.revs[i]
		if r.flags&fLive == 0 {
			continue
		}
		c.markKey(r.key)
		referenced[r.key] = struct{}{}
		for _, k := range infos[i].blobs {
			c.markKey(k)
			referenced[k] = struct{}{}
		}
		if r.flags&fUnreadable != 0 && c.blobSweepOff == "" {
			c.blobSweepOff = "a manifest of " + rs.name + " could not be read"
		}
	}
	for j := range rs.layers {
		l := &rs.layers[j]
		if _, ok := referenced[l.key]; ok {
			continue
		}
		if c.young(l.mod) {
			// A recent upload or mount: the manifest naming it may be
			// on its way.
			c.markKey(l.key)
			c.rep.KeptYoung++
			continue
		}
		l.del = true
		if !rs.uncertain {
			c.nPlanned.Add(1)
		}
	}
	if !rs.uncertain {
		c.nPlanned.Add(int64(rs.nDelete) + rs.plannedLinks())
	}
	c.rep.Manifests += int64(len(rs.revs))
	c.rep.Tags += int64(len(rs.tags))
	return nil
}

// plannedLinks counts the referrer links and tag index entries the sweep
// will delete.
func (rs *repoState) plannedLinks() int64 {
	var n int64
	for i := range rs.revs {
		if rs.revs[i].flags&fDelete != 0 && rs.revs[i].subject != noSubject {
			n++
		}
	}
	for i := range rs.tags {
		t := &rs.tags[i]
		n += int64(len(t.stale))
		if rs.nDelete == 0 {
			continue
		}
		t.index.each(func(j uint32) bool {
			if rs.revs[j].flags&fDelete != 0 {
				n++
			}
			return true
		})
	}
	return n
}

// readTags reads every tag's current link. A link that cannot be read or
// does not hold a digest makes the repository uncertain: the manifest it
// meant is unknown, so nothing here may be deleted.
func (c *collector) readTags(ctx context.Context, rs *repoState) error {
	parallel.For(ctx, len(rs.tags), c.readConcurrency(), func(i int) {
		t := &rs.tags[i]
		if !t.hasCurrent {
			return
		}
		p := layout.TagCurrentLink(rs.name, t.name)
		b, err := c.getContent(ctx, p)
		switch {
		case errors.Is(err, driver.ErrNotFound):
			t.hasCurrent = false // deleted since the listing
			return
		case err != nil:
			if ctx.Err() == nil {
				c.problem(ProblemUnreadableLink, p)
			}
			t.current = -2
			return
		}
		k, ok := digestkey.Of(digest.Digest(strings.TrimSpace(string(b))))
		if !ok {
			c.problem(ProblemBadLink, p)
			t.current = -2
			return
		}
		if t.current = int32(rs.findRev(k)); t.current < 0 && !c.young(t.curMod) {
			// The link may have moved since the listing, to a manifest
			// pushed after the listing passed the revisions: only an old
			// link naming nothing is a problem.
			if fi, err := c.d.Stat(ctx, p); err == nil && !c.young(modNS(fi.ModTime)) {
				c.problem(ProblemDanglingTag, p)
			}
		}
	})
	if err := ctx.Err(); err != nil {
		return err
	}
	for i := range rs.tags {
		if rs.tags[i].current == -2 {
			rs.tags[i].current = -1
			rs.uncertain = true
		}
	}
	return nil
}

// readManifests reads each revision's manifest once, in parallel.
func (c *collector) readManifests(ctx context.Context, rs *repoState) ([]manifestInfo, error) {
	infos := make([]manifestInfo, len(rs.revs))
	parallel.For(ctx, len(rs.revs), c.readConcurrency(), func(i int) {
		r := &rs.revs[i]
		info := &infos[i]
		info.subject = noSubject
		p := layout.AppendBlobData(nil, r.key.Alg(), c.hexOf(r.key))
		b, err := c.getContent(ctx, string(p))
		c.nMan.Add(1)
		switch {
		case errors.Is(err, driver.ErrNotFound):
			c.problem(ProblemMissingManifest, string(p))
			info.flags |= fMissing
			return
		case err != nil:
			if ctx.Err() == nil {
				c.problem(ProblemUnreadable, string(p))
			}
			info.flags |= fUnreadable
			return
		}
		refs, bad, err := manifest.ParseRefs(b)
		if err != nil {
			c.problem(ProblemBadManifest, string(p))
			info.flags |= fBad
			return
		}
		if bad > 0 {
			c.problem(ProblemBadReference, string(p))
		}
		c.fillInfo(rs, info, refs, string(p))
	})
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	for i := range infos {
		rs.revs[i].flags |= infos[i].flags
		rs.revs[i].subject = infos[i].subject
		if infos[i].subject == danglingSubject {
			if rs.dangling == nil {
				rs.dangling = make(map[int32]dkey)
			}
			rs.dangling[int32(i)] = infos[i].dangling
		}
		if len(infos[i].children) > 0 {
			if rs.children == nil {
				rs.children = make(map[int32][]int32)
			}
			rs.children[int32(i)] = infos[i].children
		}
	}
	return infos, nil
}

// fillInfo turns a manifest's references into keys: children that are
// revisions of the repository become edges, anything else is a blob.
func (c *collector) fillInfo(rs *repoState, info *manifestInfo, refs manifest.Refs, p string) {
	for _, d := range refs.Blobs {
		if k, ok := c.keys.Of(d); ok {
			info.blobs = append(info.blobs, k)
		} else {
			c.problem(ProblemBadReference, p)
		}
	}
	for _, d := range refs.Manifests {
		k, ok := c.keys.Of(d)
		if !ok {
			c.problem(ProblemBadReference, p)
			continue
		}
		if j := rs.findRev(k); j >= 0 {
			info.children = append(info.children, int32(j))
		} else {
			info.blobs = append(info.blobs, k) // sparse index, or a child stored elsewhere
		}
	}
	if refs.Subject != "" {
		k, ok := c.keys.Of(refs.Subject)
		switch {
		case !ok:
			c.problem(ProblemBadReference, p)
		case rs.findRev(k) >= 0:
			info.subject = int32(rs.findRev(k))
		default:
			info.subject, info.dangling = danglingSubject, k
		}
	}
}

// liveness decides which revisions live. Roots are tagged manifests,
// recent ones, unreadable ones (their fate is unknown) and, without
// delete-untagged, every manifest that is not a referrer; an index keeps
// its children and a manifest its referrers.
func (c *collector) liveness(rs *repoState) {
	n := len(rs.revs)
	var queue []int32
	push := func(i int32) {
		if rs.revs[i].flags&fLive == 0 {
			rs.revs[i].flags |= fLive
			queue = append(queue, i)
		}
	}
	head := make([]int32, n)
	next := make([]int32, n)
	for i := range head {
		head[i] = -1
	}
	for i := range rs.revs {
		if s := rs.revs[i].subject; s >= 0 {
			next[i], head[s] = head[s], int32(i)
		}
	}
	drain := func() {
		for len(queue) > 0 {
			i := queue[len(queue)-1]
			queue = queue[:len(queue)-1]
			for _, ch := range rs.children[i] {
				push(ch)
			}
			for j := head[i]; j >= 0; j = next[j] {
				push(j)
			}
		}
	}
	for i := range rs.revs {
		r := &rs.revs[i]
		if rs.uncertain || r.flags&fUnreadable != 0 || (!c.opts.DeleteUntagged && r.subject == noSubject) {
			push(int32(i))
		}
	}
	for i := range rs.tags {
		if cur := rs.tags[i].current; cur >= 0 {
			push(cur)
		}
	}
	drain()
	// What only its age keeps, counted as kept young.
	for i := range rs.revs {
		r := &rs.revs[i]
		if r.flags&fLive == 0 && (c.young(r.mod) || r.flags&fYoung != 0) {
			c.rep.KeptYoung++
			push(int32(i))
			drain()
		}
	}
	for i := range rs.revs {
		if rs.revs[i].flags&fLive == 0 {
			rs.revs[i].flags |= fDelete
			rs.nDelete++
		}
	}
}

// readConcurrency is how many small reads run at once.
func (c *collector) readConcurrency() int { return 4 * c.opts.Concurrency }

// getContent reads a small file, trying again after transient failures.
func (c *collector) getContent(ctx context.Context, p string) ([]byte, error) {
	var b []byte
	err := repeat.Retry(ctx, 3, func(err error) bool { return errors.Is(err, driver.ErrNotFound) }, func() error {
		var err error
		b, err = c.d.GetContent(ctx, p)
		return err
	})
	return b, err
}
