package scrub

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"

	"github.com/opencontainers/go-digest"

	"github.com/cairn-registry/cairn/internal/digestkey"
	"github.com/cairn-registry/cairn/internal/layout"
	"github.com/cairn-registry/cairn/internal/manifest"
	"github.com/cairn-registry/cairn/internal/parallel"
	"github.com/cairn-registry/cairn/internal/storage/driver"
)

type referrerLink struct{ subject, ref key }

func compareReferrers(a, b referrerLink) int {
	if c := digestkey.Compare(a.subject, b.subject); c != 0 {
		return c
	}
	return digestkey.Compare(a.ref, b.ref)
}

// repoState is one repository's links as listed: compact sets, no paths.
type repoState struct {
	name      string
	layers    keySet
	revs      keySet
	tags      []string // tags with a current link
	referrers []referrerLink

	mu       sync.Mutex
	added    []key           // revisions repair linked, merged after each pass
	reported map[string]bool // paths of missing links already reported
}

// claim reports whether p is reported for the first time.
func (rs *repoState) claim(p string) bool {
	rs.mu.Lock()
	defer rs.mu.Unlock()
	if rs.reported[p] {
		return false
	}
	if rs.reported == nil {
		rs.reported = make(map[string]bool)
	}
	rs.reported[p] = true
	return true
}

func (rs *repoState) addRevision(k key) {
	rs.mu.Lock()
	defer rs.mu.Unlock()
	rs.added = append(rs.added, k)
}

// mergeAdded adds the revisions repair linked to revs and returns the new
// ones, whose manifests are still to be read.
func (rs *repoState) mergeAdded() []key {
	rs.mu.Lock()
	defer rs.mu.Unlock()
	var fresh []key
	for _, k := range rs.added {
		if !rs.revs.has(k) && !slices.Contains(fresh, k) {
			fresh = append(fresh, k)
		}
	}
	rs.added = nil
	rs.revs = append(rs.revs, fresh...)
	rs.revs.seal()
	return fresh
}

func (rs *repoState) hasReferrer(subject, ref key) bool {
	_, ok := slices.BinarySearchFunc(rs.referrers, referrerLink{subject, ref}, compareReferrers)
	return ok
}

// linkJob is a link whose content ReadLinks checks.
type linkJob struct {
	path string
	repo string
	kind layout.EntryKind
	d    digest.Digest
}

// checkRepos lists repositories/ once and checks each repository as soon
// as the listing has passed it.
func (s *scrubber) checkRepos(ctx context.Context) error {
	var links *parallel.Pool[linkJob]
	if s.opts.ReadLinks {
		links = parallel.StartPool(s.opts.Workers, func(j linkJob) { s.checkLinkContent(ctx, j) })
	}
	w := layout.RepoWalk[*repoState]{
		// Upload sessions are no one's content yet; the referrers index
		// is checked.
		SkipDir: func(k layout.EntryKind) bool { return k == layout.EntryUploads },
		Open:    func(repo string) *repoState { return &repoState{name: repo} },
		Add: func(rs *repoState, e layout.RepoEntry, fi driver.FileInfo) error {
			s.nListed.Add(1)
			return s.addEntry(ctx, rs, e, fi.Path, links)
		},
	}
	err := layout.WalkRepos(ctx, s.d, w, func(rs *repoState) error {
		s.checkRepo(ctx, rs)
		return nil
	})
	if links != nil {
		links.Wait()
	}
	if err == nil {
		err = ctx.Err()
	}
	return err
}

// addEntry records one listed file of rs.
func (s *scrubber) addEntry(ctx context.Context, rs *repoState, e layout.RepoEntry, p string, links *parallel.Pool[linkJob]) error {
	switch e.Kind {
	case layout.EntryLayerLink, layout.EntryRevisionLink, layout.EntryTagIndex:
		k, ok := s.keys.Parse(e.Alg, e.Hex)
		if !ok {
			s.add(Finding{Kind: KindBadPath, Path: p, Detail: "the link's path names no valid digest"})
			return nil
		}
		s.nLnk.Add(1)
		switch e.Kind {
		case layout.EntryLayerLink:
			rs.layers.add(k)
		case layout.EntryRevisionLink:
			rs.revs.add(k)
		}
		if links != nil {
			return links.Send(ctx, linkJob{path: p, repo: rs.name, kind: e.Kind, d: digest.Digest(e.Alg + ":" + e.Hex)})
		}
	case layout.EntryTagCurrent:
		if n := len(rs.tags); n == 0 || rs.tags[n-1] != e.Tag {
			rs.tags = append(rs.tags, strings.Clone(e.Tag))
		}
	case layout.EntryReferrerLink:
		sk, ok1 := s.keys.Parse(e.SubjectAlg, e.SubjectHex)
		k, ok2 := s.keys.Parse(e.Alg, e.Hex)
		if !ok1 || !ok2 {
			s.add(Finding{Kind: KindBadPath, Path: p, Detail: "the referrers link's path names no valid digest"})
			return nil
		}
		s.nLnk.Add(1)
		rs.referrers = append(rs.referrers, referrerLink{subject: sk, ref: k})
		if links != nil {
			return links.Send(ctx, linkJob{path: p, repo: rs.name, kind: e.Kind, d: digest.Digest(e.Alg + ":" + e.Hex)})
		}
	}
	return nil
}

// checkRepo checks one repository's links and manifests.
func (s *scrubber) checkRepo(ctx context.Context, rs *repoState) {
	s.nRepos.Add(1)
	s.nTags.Add(int64(len(rs.tags)))
	rs.layers.seal()
	rs.revs.seal()
	if !slices.IsSortedFunc(rs.referrers, compareReferrers) {
		slices.SortFunc(rs.referrers, compareReferrers)
	}
	conc := 4 * s.opts.Workers // small reads: latency-bound
	for _, k := range rs.layers {
		if s.blobs.flags(k)&(bData|bRecipe) == 0 {
			s.missingLayerBlob(ctx, rs, k)
		}
	}
	var todo []key
	for _, k := range rs.revs {
		if s.blobs.flags(k)&bData != 0 || s.storedSince(ctx, rs, k) {
			todo = append(todo, k)
		}
	}
	parallel.For(ctx, len(rs.tags), conc, func(i int) { s.checkTag(ctx, rs, rs.tags[i]) })
	todo = append(todo, rs.mergeAdded()...)
	// Repairs may link more revisions (a tag's, an index's children):
	// their manifests are read in the next round.
	for round := 0; len(todo) > 0 && round < 8 && ctx.Err() == nil; round++ {
		parallel.For(ctx, len(todo), conc, func(i int) { s.checkManifest(ctx, rs, todo[i]) })
		todo = rs.mergeAdded()
	}
	for _, r := range rs.referrers {
		if !rs.revs.has(r.ref) {
			s.danglingReferrer(ctx, rs, r)
		}
	}
}

// missingLayerBlob confirms and reports a _layers link whose blob the
// listing did not find.
func (s *scrubber) missingLayerBlob(ctx context.Context, rs *repoState, k key) {
	d := s.keys.Digest(k)
	lp := string(layout.AppendLayerLink(nil, rs.name, string(d.Algorithm()), d.Encoded()))
	missing, err := s.missingNow(ctx, layout.BlobData(d), layout.BlobRecipe(d))
	if err != nil {
		s.unreadable(ctx, layout.BlobData(d), d, err)
		return
	}
	if !missing || s.goneNow(ctx, lp) {
		return
	}
	s.addUnrepairable(Finding{Kind: KindMissingBlob, Path: lp, Digest: string(d),
		Detail: "the linked blob has neither data nor a recipe (deleted, or a deduplicated layer whose recipe is gone)"})
}

// storedSince looks again for the data of a revision the listing found
// without it: stored since (a push racing the listing) it is read with
// the others; still missing, it is reported.
func (s *scrubber) storedSince(ctx context.Context, rs *repoState, k key) bool {
	d := s.keys.Digest(k)
	rp := string(layout.AppendRevisionLink(nil, rs.name, string(d.Algorithm()), d.Encoded()))
	missing, err := s.missingNow(ctx, layout.BlobData(d))
	if err != nil {
		s.unreadable(ctx, layout.BlobData(d), d, err)
		return false
	}
	if !missing {
		return true
	}
	if s.goneNow(ctx, rp) {
		return false
	}
	s.addUnrepairable(Finding{Kind: KindMissingManifest, Path: rp, Digest: string(d), Detail: "the revision's manifest data is not stored"})
	return false
}

// addUnrepairable records a finding repair has nothing to rebuild from.
func (s *scrubber) addUnrepairable(f Finding) {
	if s.opts.Repair {
		f.Repair = "nothing to rebuild it from"
	}
	s.add(f)
}

// storedNow reports whether blob d (key k) has one of the files want
// names (bData, bRecipe): as listed or, for what was stored since the
// listing, by a Stat now.
func (s *scrubber) storedNow(ctx context.Context, k key, d digest.Digest, want uint8) (bool, error) {
	if s.blobs.flags(k)&want != 0 {
		return true, nil
	}
	var paths []string
	if want&bData != 0 {
		paths = append(paths, layout.BlobData(d))
	}
	if want&bRecipe != 0 {
		paths = append(paths, layout.BlobRecipe(d))
	}
	missing, err := s.missingNow(ctx, paths...)
	return err == nil && !missing, err
}

// goneNow reports whether p is absent now: the link a finding rests on
// was deleted since the listing (by a client, or a GC), so no finding.
func (s *scrubber) goneNow(ctx context.Context, p string) bool {
	gone, err := s.missingNow(ctx, p)
	return err == nil && gone
}

// checkTag reads a tag's current link: it must hold a digest naming a
// revision of the repository.
func (s *scrubber) checkTag(ctx context.Context, rs *repoState, tag string) {
	p := layout.TagCurrentLink(rs.name, tag)
	b, err := s.getContent(ctx, p)
	switch {
	case errors.Is(err, driver.ErrNotFound):
		return // untagged since the listing
	case err != nil:
		s.unreadable(ctx, p, "", err)
		return
	}
	d, err := digest.Parse(strings.TrimSpace(string(b)))
	k, ok := s.keys.Of(d)
	if err != nil || !ok {
		s.add(Finding{Kind: KindBadLink, Path: p, Detail: fmt.Sprintf("holds %s, not a digest", quoted(b))})
		return
	}
	if rs.revs.has(k) {
		return
	}
	// Confirm: the revision is still missing and the tag still names it.
	rp := string(layout.AppendRevisionLink(nil, rs.name, string(d.Algorithm()), d.Encoded()))
	if missing, err := s.missingNow(ctx, rp); err != nil || !missing {
		return
	}
	if b, err := s.getContent(ctx, p); err != nil || strings.TrimSpace(string(b)) != string(d) {
		return
	}
	f := Finding{Kind: KindDanglingTag, Path: p, Digest: string(d), Detail: "the tag names a manifest that is not a revision of " + rs.name}
	if s.blobs.flags(k)&bData == 0 {
		f.Detail += "; its data is not stored either"
	}
	if s.opts.Repair {
		f.Repaired, f.Repair = s.relink(ctx, rs, d)
	}
	s.add(f)
}

// relink makes manifest d a revision of rs again.
func (s *scrubber) relink(ctx context.Context, rs *repoState, d digest.Digest) (bool, string) {
	ok, err := s.reg.RelinkManifest(ctx, rs.name, d)
	switch {
	case err != nil:
		return false, "relinking failed: " + oneLine(err.Error())
	case !ok:
		return false, "the manifest's data is not stored"
	}
	if k, ok := s.keys.Of(d); ok {
		rs.addRevision(k)
	}
	return true, "revision link written"
}

// checkManifest reads revision k's manifest once and checks that what it
// names is linked into the repository, as its push required.
func (s *scrubber) checkManifest(ctx context.Context, rs *repoState, k key) {
	d := s.keys.Digest(k)
	dp := layout.BlobData(d)
	b, ok := s.readListed(ctx, dp, d)
	if !ok {
		return
	}
	s.nManifests.Add(1)
	if d.Algorithm().FromBytes(b) != d {
		return // the blobs pass reported it; what it names is not to be trusted
	}
	m, err := manifest.Parse(d, b)
	if err != nil {
		s.add(Finding{Kind: KindBadManifest, Path: dp, Digest: string(d), Detail: oneLine(err.Error())})
		return
	}
	if !s.opts.Sparse {
		var refs []digest.Digest
		if m.Config != nil {
			refs = append(refs, m.Config.Digest)
		}
		for _, l := range slices.Concat(m.Layers, m.Blobs) {
			if !manifest.IsNonDistributable(l.MediaType) {
				refs = append(refs, l.Digest)
			}
		}
		refs = append(refs, m.FSLayers...)
		for _, c := range m.Manifests {
			if s.opts.IndexChildrenOptional {
				break
			}
			if manifest.IsChildBlob(c.MediaType) {
				refs = append(refs, c.Digest)
			} else {
				s.checkChild(ctx, rs, d, c.Digest)
			}
		}
		for _, ref := range refs {
			s.checkBlobRef(ctx, rs, d, ref)
		}
	}
	if m.Subject != nil {
		s.checkSubject(ctx, rs, d, m.Subject.Digest)
	}
}

// badRef reports a descriptor digest that does not parse.
func (s *scrubber) badRef(rs *repoState, m, ref digest.Digest) {
	s.add(Finding{Kind: KindBadManifest, Path: layout.BlobData(m), Digest: string(m),
		Detail: fmt.Sprintf("names %q in %s, not a digest", ref, rs.name)})
}

// checkBlobRef checks that manifest m's config or layer ref is linked into
// rs (a _layers link, or a revision) and stored.
func (s *scrubber) checkBlobRef(ctx context.Context, rs *repoState, m, ref digest.Digest) {
	k, ok := s.keys.Of(ref)
	if !ok {
		s.badRef(rs, m, ref)
		return
	}
	if rs.layers.has(k) || rs.revs.has(k) {
		return // a link without its blob is the link check's finding
	}
	alg, hexs := string(ref.Algorithm()), ref.Encoded()
	lp := string(layout.AppendLayerLink(nil, rs.name, alg, hexs))
	if !rs.claim(lp) {
		return
	}
	mrp := string(layout.AppendRevisionLink(nil, rs.name, string(m.Algorithm()), m.Encoded()))
	missing, err := s.missingNow(ctx, lp, string(layout.AppendRevisionLink(nil, rs.name, alg, hexs)))
	if err != nil || !missing || s.goneNow(ctx, mrp) {
		return
	}
	stored, err := s.storedNow(ctx, k, ref, bData|bRecipe)
	if err != nil {
		return
	}
	if !stored {
		s.addUnrepairable(Finding{Kind: KindMissingBlob, Path: layout.BlobData(ref), Digest: string(ref), Ref: string(m),
			Detail: "a manifest of " + rs.name + " names it; it has neither data nor a recipe, and no link"})
		return
	}
	f := Finding{Kind: KindMissingLink, Path: lp, Digest: string(ref), Ref: string(m),
		Detail: "a manifest of " + rs.name + " names this stored blob, which the repository does not link (its pulls fail)"}
	if s.opts.Repair {
		ok, err := s.reg.MountBlob(ctx, rs.name, ref, "")
		switch {
		case err != nil:
			f.Repair = "linking failed: " + oneLine(err.Error())
		case !ok:
			f.Repair = "the blob is no longer stored"
		default:
			f.Repaired, f.Repair = true, "layer link written"
		}
	}
	s.add(f)
}

// checkChild checks that index m's child manifest is a revision of rs.
func (s *scrubber) checkChild(ctx context.Context, rs *repoState, m, child digest.Digest) {
	k, ok := s.keys.Of(child)
	if !ok {
		s.badRef(rs, m, child)
		return
	}
	if rs.revs.has(k) {
		return
	}
	rp := string(layout.AppendRevisionLink(nil, rs.name, string(child.Algorithm()), child.Encoded()))
	if !rs.claim(rp) {
		return
	}
	mrp := string(layout.AppendRevisionLink(nil, rs.name, string(m.Algorithm()), m.Encoded()))
	if missing, err := s.missingNow(ctx, rp); err != nil || !missing || s.goneNow(ctx, mrp) {
		return
	}
	stored, err := s.storedNow(ctx, k, child, bData)
	if err != nil {
		return
	}
	if !stored {
		s.addUnrepairable(Finding{Kind: KindMissingManifest, Path: layout.BlobData(child), Digest: string(child), Ref: string(m),
			Detail: "an index of " + rs.name + " names this manifest; its data is not stored"})
		return
	}
	f := Finding{Kind: KindMissingLink, Path: rp, Digest: string(child), Ref: string(m),
		Detail: "an index of " + rs.name + " names this stored manifest, which is not a revision of the repository"}
	if s.opts.Repair {
		f.Repaired, f.Repair = s.relink(ctx, rs, child)
	}
	s.add(f)
}

// checkSubject checks that manifest m, whose subject is subject, is in
// its subject's referrers index.
func (s *scrubber) checkSubject(ctx context.Context, rs *repoState, m, subject digest.Digest) {
	sk, ok := s.keys.Of(subject)
	k, _ := s.keys.Of(m)
	if !ok {
		s.badRef(rs, m, subject)
		return
	}
	if rs.hasReferrer(sk, k) {
		return
	}
	lp := string(layout.AppendReferrerLink(nil, rs.name, string(subject.Algorithm()), subject.Encoded(), string(m.Algorithm()), m.Encoded()))
	mrp := string(layout.AppendRevisionLink(nil, rs.name, string(m.Algorithm()), m.Encoded()))
	if missing, err := s.missingNow(ctx, lp); err != nil || !missing || s.goneNow(ctx, mrp) {
		return
	}
	f := Finding{Kind: KindMissingLink, Path: lp, Digest: string(m), Ref: string(subject),
		Detail: "the manifest's subject is " + string(subject) + ", but its referrers index in " + rs.name + " does not list it"}
	if s.opts.Repair {
		f.Repaired, f.Repair = s.relink(ctx, rs, m)
	}
	s.add(f)
}

// danglingReferrer confirms and reports a referrers link naming no
// revision: the referrers API skips it, and nothing removes it.
func (s *scrubber) danglingReferrer(ctx context.Context, rs *repoState, r referrerLink) {
	subject, d := s.keys.Digest(r.subject), s.keys.Digest(r.ref)
	lp := string(layout.AppendReferrerLink(nil, rs.name, string(subject.Algorithm()), subject.Encoded(), string(d.Algorithm()), d.Encoded()))
	rp := string(layout.AppendRevisionLink(nil, rs.name, string(d.Algorithm()), d.Encoded()))
	if missing, err := s.missingNow(ctx, rp); err != nil || !missing || s.goneNow(ctx, lp) {
		return
	}
	f := Finding{Kind: KindDanglingReferrer, Path: lp, Digest: string(d), Ref: string(subject),
		Detail: "the referrers link names a manifest that is not a revision of " + rs.name}
	if s.opts.Repair {
		f.Repair = "left as it is: repair never deletes"
	}
	s.add(f)
}

// checkLinkContent reads a link and checks it holds the digest its path
// names (what distribution reads; cairn goes by the path).
func (s *scrubber) checkLinkContent(ctx context.Context, j linkJob) {
	if ctx.Err() != nil {
		return
	}
	b, ok := s.readListed(ctx, j.path, j.d)
	if !ok {
		return
	}
	if strings.TrimSpace(string(b)) == string(j.d) {
		return
	}
	f := Finding{Kind: KindBadLink, Path: j.path, Digest: string(j.d), Detail: fmt.Sprintf("holds %s, not the digest its path names", quoted(b))}
	if s.opts.Repair {
		f.Repaired, f.Repair = s.rewriteLink(ctx, j)
	}
	s.add(f)
}

// rewriteLink writes the digest its path names into a link; links that
// make content visible go through the registry (GC protocol, existence).
func (s *scrubber) rewriteLink(ctx context.Context, j linkJob) (bool, string) {
	var ok bool
	var err error
	switch j.kind {
	case layout.EntryLayerLink:
		ok, err = s.reg.MountBlob(ctx, j.repo, j.d, "")
	case layout.EntryRevisionLink:
		ok, err = s.reg.RelinkManifest(ctx, j.repo, j.d)
	default: // tag history and referrers index entries: nothing is read through them
		err = s.d.PutContent(ctx, j.path, []byte(j.d))
		ok = err == nil
	}
	switch {
	case err != nil:
		return false, "rewriting failed: " + oneLine(err.Error())
	case !ok:
		return false, "the content it names is not stored"
	}
	return true, "rewritten"
}

// quoted shows at most 80 bytes of a link's content.
func quoted(b []byte) string {
	if len(b) > 80 {
		return fmt.Sprintf("%q...", b[:80])
	}
	return fmt.Sprintf("%q", b)
}
