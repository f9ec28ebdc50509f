package gc

import (
	"bytes"
	"context"
	"fmt"
	"maps"
	"math/rand/v2"
	"net/http"
	"os"
	"slices"
	"strconv"
	"testing"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/random"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/types"

	"github.com/cairn-registry/cairn/internal/testutil/regtest"
)

// manifest is what the oracle knows of one pushed manifest.
type manifest struct {
	desc     v1.Descriptor
	raw      []byte
	blobs    []string // config and layers
	children []string // an index's manifests
	subject  string
	img      v1.Image // nil for an index
}

type repoModel struct {
	manifests map[string]*manifest       // revisions that exist
	tags      map[string]string          // tag -> digest it names now
	history   map[string]map[string]bool // tag -> digests its index names
}

// oracle builds a random registry through the API and keeps, independently
// of cairn, a model of what is stored: enough to compute what GC must keep.
type oracle struct {
	t      *testing.T
	ctx    context.Context
	n      *node
	rnd    *rand.Rand
	repos  map[string]*repoModel
	names  []string
	shared []v1.Layer
	tagN   int
}

func newOracle(t *testing.T, n *node, seed uint64) *oracle {
	o := &oracle{t: t, ctx: t.Context(), n: n, rnd: rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15)), repos: map[string]*repoModel{}}
	// Nested names check that a repository's listing ends where its
	// children's begin.
	o.names = []string{"oracle/app", "oracle/app/sub", "oracle/tools", "zz"}
	for _, r := range o.names {
		o.repos[r] = &repoModel{manifests: map[string]*manifest{}, tags: map[string]string{}, history: map[string]map[string]bool{}}
	}
	for range 4 {
		o.shared = append(o.shared, o.layer())
	}
	return o
}

func (o *oracle) layer() v1.Layer {
	l, err := random.Layer(int64(200+o.rnd.IntN(3000)), types.OCILayer)
	if err != nil {
		o.t.Fatal(err)
	}
	return l
}

func (o *oracle) image(layers int) v1.Image {
	var ls []v1.Layer
	for range layers {
		if o.rnd.IntN(3) == 0 {
			ls = append(ls, o.shared[o.rnd.IntN(len(o.shared))])
		} else {
			ls = append(ls, o.layer())
		}
	}
	img, err := regtest.OCIImage(ls...)
	if err != nil {
		o.t.Fatal(err)
	}
	// A distinct config, so that no two images share it by chance.
	cfg, _ := img.ConfigFile()
	cfg = cfg.DeepCopy()
	cfg.Author = strconv.FormatUint(o.rnd.Uint64(), 36)
	if img, err = mutate.ConfigFile(img, cfg); err != nil {
		o.t.Fatal(err)
	}
	return img
}

func (o *oracle) pick(r string) *manifest {
	m := o.repos[r].manifests
	if len(m) == 0 {
		return nil
	}
	keys := slices.Sorted(maps.Keys(m))
	return m[keys[o.rnd.IntN(len(keys))]]
}

func (o *oracle) newTag(r string) string {
	tags := o.repos[r].tags
	if len(tags) > 0 && o.rnd.IntN(2) == 0 {
		keys := slices.Sorted(maps.Keys(tags))
		return keys[o.rnd.IntN(len(keys))] // re-tag
	}
	o.tagN++
	return "t" + strconv.Itoa(o.tagN)
}

func (o *oracle) record(r string, m *manifest, tag string) {
	rm := o.repos[r]
	rm.manifests[m.desc.Digest.String()] = m
	if tag != "" {
		rm.tags[tag] = m.desc.Digest.String()
		if rm.history[tag] == nil {
			rm.history[tag] = map[string]bool{}
		}
		rm.history[tag][m.desc.Digest.String()] = true
	}
}

func (o *oracle) describeImage(img v1.Image, subject string) *manifest {
	raw, err := img.RawManifest()
	if err != nil {
		o.t.Fatal(err)
	}
	d, _ := img.Digest()
	mt, _ := img.MediaType()
	m := &manifest{desc: v1.Descriptor{MediaType: mt, Digest: d, Size: int64(len(raw))}, raw: raw, img: img, subject: subject}
	cfg, _ := img.ConfigName()
	m.blobs = append(m.blobs, cfg.String())
	ls, _ := img.Layers()
	for _, l := range ls {
		ld, _ := l.Digest()
		m.blobs = append(m.blobs, ld.String())
	}
	return m
}

func (o *oracle) pushImage(r, tag string, img v1.Image, subject string) *manifest {
	m := o.describeImage(img, subject)
	ref := r + "@" + m.desc.Digest.String()
	if tag != "" {
		ref = r + ":" + tag
	}
	if err := remote.Write(o.n.ref(o.t, ref), img, o.n.opts(o.ctx)...); err != nil {
		o.t.Fatalf("push %s: %v", ref, err)
	}
	o.record(r, m, tag)
	return m
}

func (o *oracle) pushIndex(r, tag string) {
	var idx v1.ImageIndex = empty.Index
	var kids []*manifest
	for _, arch := range []string{"amd64", "arm64"} {
		img := o.image(1 + o.rnd.IntN(2))
		kids = append(kids, o.describeImage(img, ""))
		idx = mutate.AppendManifests(idx, mutate.IndexAddendum{Add: img, Descriptor: v1.Descriptor{Platform: &v1.Platform{OS: "linux", Architecture: arch}}})
	}
	if err := remote.WriteIndex(o.n.ref(o.t, r+":"+tag), idx, o.n.opts(o.ctx)...); err != nil {
		o.t.Fatalf("push index %s:%s: %v", r, tag, err)
	}
	raw, _ := idx.RawManifest()
	d, _ := idx.Digest()
	mt, _ := idx.MediaType()
	m := &manifest{desc: v1.Descriptor{MediaType: mt, Digest: d, Size: int64(len(raw))}, raw: raw}
	for _, k := range kids {
		o.record(r, k, "")
		m.children = append(m.children, k.desc.Digest.String())
	}
	o.record(r, m, tag)
}

// putRaw PUTs a stored manifest's bytes under ref (a re-tag, or a copy).
func (o *oracle) putRaw(r, ref string, m *manifest) {
	req, _ := http.NewRequestWithContext(o.ctx, http.MethodPut, o.n.srv.URL+"/v2/"+r+"/manifests/"+ref, bytes.NewReader(m.raw))
	req.Header.Set("Content-Type", string(m.desc.MediaType))
	if resp := regtest.Send(o.t, o.n.hc, req); resp.Status != http.StatusCreated {
		o.t.Fatalf("%v, want 201", resp)
	}
}

func (o *oracle) del(r, ref string) {
	req, _ := http.NewRequestWithContext(o.ctx, http.MethodDelete, o.n.srv.URL+"/v2/"+r+"/manifests/"+ref, nil)
	if resp := regtest.Send(o.t, o.n.hc, req); resp.Status != http.StatusAccepted {
		o.t.Fatalf("%v, want 202", resp)
	}
}

// isChild reports whether d is a child of an index of r.
func (o *oracle) isChild(r, d string) bool {
	for _, m := range o.repos[r].manifests {
		if slices.Contains(m.children, d) {
			return true
		}
	}
	return false
}

// step makes one random change through the API.
func (o *oracle) step() {
	r := o.names[o.rnd.IntN(len(o.names))]
	rm := o.repos[r]
	switch op := o.rnd.IntN(100); {
	case op < 30: // an image, tagged (new tag or re-tag) or by digest only
		tag := ""
		if o.rnd.IntN(4) != 0 {
			tag = o.newTag(r)
		}
		o.pushImage(r, tag, o.image(1+o.rnd.IntN(3)), "")
	case op < 40:
		o.pushIndex(r, o.newTag(r))
	case op < 55: // a referrer, sometimes tagged, sometimes of a referrer
		s := o.pick(r)
		if s == nil {
			return
		}
		art := mutate.ConfigMediaType(o.image(1), "application/vnd.example.sbom.config+json")
		art = mutate.Subject(art, s.desc).(v1.Image)
		tag := ""
		if o.rnd.IntN(5) == 0 {
			tag = o.newTag(r)
		}
		o.pushImage(r, tag, art, s.desc.Digest.String())
	case op < 68: // re-tag an existing manifest
		if m := o.pick(r); m != nil {
			tag := o.newTag(r)
			o.putRaw(r, tag, m)
			o.record(r, m, tag)
		}
	case op < 75: // copy an image to another repository
		m := o.pick(r)
		if m == nil || m.img == nil || m.subject != "" {
			return
		}
		to := o.names[o.rnd.IntN(len(o.names))]
		tag := o.newTag(to)
		if err := remote.Write(o.n.ref(o.t, to+":"+tag), m.img, o.n.opts(o.ctx)...); err != nil {
			o.t.Fatal(err)
		}
		cp := *m
		o.record(to, &cp, tag)
	case op < 83: // delete a manifest by digest (never an index's child)
		m := o.pick(r)
		if m == nil || o.isChild(r, m.desc.Digest.String()) {
			return
		}
		d := m.desc.Digest.String()
		o.del(r, d)
		delete(rm.manifests, d)
		for tag, cur := range rm.tags {
			if cur == d {
				delete(rm.tags, tag)
				delete(rm.history, tag)
			}
		}
	case op < 90: // delete a tag
		if len(rm.tags) == 0 {
			return
		}
		tag := o.newTagExisting(r)
		o.del(r, tag)
		delete(rm.tags, tag)
		delete(rm.history, tag)
	default: // an orphan blob
		if err := remote.WriteLayer(o.n.ref(o.t, r+":x").Context(), o.layer(), o.n.opts(o.ctx)...); err != nil {
			o.t.Fatal(err)
		}
	}
}

func (o *oracle) newTagExisting(r string) string {
	keys := slices.Sorted(maps.Keys(o.repos[r].tags))
	return keys[o.rnd.IntN(len(keys))]
}

// live computes, per repository, the manifests GC must keep: tags reach
// manifests (without delete-untagged, so does every non-referrer), an
// index keeps its children and a manifest its referrers.
func (o *oracle) live(deleteUntagged bool) map[string]map[string]bool {
	out := map[string]map[string]bool{}
	for r, rm := range o.repos {
		live := map[string]bool{}
		var queue []string
		push := func(d string) {
			if _, ok := rm.manifests[d]; ok && !live[d] {
				live[d] = true
				queue = append(queue, d)
			}
		}
		for _, d := range rm.tags {
			push(d)
		}
		if !deleteUntagged {
			for d, m := range rm.manifests {
				if m.subject == "" {
					push(d)
				}
			}
		}
		for len(queue) > 0 {
			d := queue[0]
			queue = queue[1:]
			for _, c := range rm.manifests[d].children {
				push(c)
			}
			for rd, m := range rm.manifests {
				if m.subject == d {
					push(rd)
				}
			}
		}
		out[r] = live
	}
	return out
}

// check compares storage with the model after GC, and pulls everything
// that lives.
func (o *oracle) check(root string, deleteUntagged bool) {
	t := o.t
	t.Helper()
	live := o.live(deleteUntagged)
	got := readDisk(t, root)
	wantBlobs := map[string]bool{}
	for _, r := range o.names {
		rm := o.repos[r]
		wantRevs, wantLayers, wantIdx := map[string]bool{}, map[string]bool{}, map[string]bool{}
		for d := range live[r] {
			wantRevs[d], wantBlobs[d] = true, true
			for _, b := range rm.manifests[d].blobs {
				wantLayers[b], wantBlobs[b] = true, true
			}
		}
		for tag, ds := range rm.history {
			for d := range ds {
				if live[r][d] {
					wantIdx[tag+"@"+d] = true
				}
			}
		}
		if diff := diffSets(got.revisions[r], wantRevs); diff != "" {
			t.Errorf("%s: revisions: %s", r, diff)
		}
		if diff := diffSets(got.layers[r], wantLayers); diff != "" {
			t.Errorf("%s: _layers links: %s", r, diff)
		}
		if diff := diffSets(got.tagIndex[r], wantIdx); diff != "" {
			t.Errorf("%s: tag index entries: %s", r, diff)
		}
		for d := range live[r] {
			if err := o.n.pullTree(o.ctx, r, d, d); err != nil {
				t.Errorf("pull %s@%s: %v", r, d, err)
			}
		}
		for tag, d := range rm.tags {
			if err := o.n.pullTree(o.ctx, r, tag, d); err != nil {
				t.Errorf("pull %s:%s: %v", r, tag, err)
			}
			if m := rm.manifests[d]; m.img != nil {
				if err := o.n.pullImage(o.ctx, t, r, tag, d); err != nil {
					t.Errorf("ggcr pull %s:%s: %v", r, tag, err)
				}
			}
		}
	}
	if diff := diffSets(got.blobs, wantBlobs); diff != "" {
		t.Errorf("blobs: %s", diff)
	}
}

func (o *oracle) liveCount(deleteUntagged bool) int {
	n := 0
	for _, l := range o.live(deleteUntagged) {
		n += len(l)
	}
	return n
}

func (o *oracle) revisionCount() int {
	n := 0
	for _, rm := range o.repos {
		n += len(rm.manifests)
	}
	return n
}

// TestOracle builds random registries through the API and checks that GC,
// without and then with --delete-untagged, leaves exactly what the model
// says is reachable, and that all of it pulls byte-exact.
// CAIRN_GC_ORACLE_SEEDS sets how many registries (default 3).
func TestOracle(t *testing.T) {
	seeds := 3
	if s := os.Getenv("CAIRN_GC_ORACLE_SEEDS"); s != "" {
		seeds, _ = strconv.Atoi(s)
	}
	for i := range seeds {
		seed := uint64(i)*7919 + 17
		t.Run(fmt.Sprintf("seed%d", seed), func(t *testing.T) {
			root := t.TempDir()
			n := startNode(t, root)
			o := newOracle(t, n, seed)
			for range 60 {
				o.step()
			}
			before := o.revisionCount()
			rep := runGC(t, root, "--delay", "0s")
			o.check(root, false)
			// The model has no notion of deletion: drop what GC deleted.
			if int(rep.Deleted.Manifests) != before-o.liveCount(false) {
				t.Errorf("report: %d manifests deleted, model says %d", rep.Deleted.Manifests, before-o.liveCount(false))
			}
			o.prune(false)
			if t.Failed() {
				return
			}
			rep = runGC(t, root, "--delay", "0s", "--delete-untagged")
			o.check(root, true)
			if want := o.revisionCount() - o.liveCount(true); int(rep.Deleted.Manifests) != want {
				t.Errorf("report: %d manifests deleted, model says %d", rep.Deleted.Manifests, want)
			}
			if len(rep.Problems) != 0 || rep.BlobSweep != "done" {
				t.Errorf("report: problems %v, blob sweep %q", rep.Problems, rep.BlobSweep)
			}
			t.Logf("seed %d: %d revisions; kept %d without --delete-untagged, %d with; last run deleted %+v",
				seed, before, o.liveCount(false), o.liveCount(true), rep.Deleted)
		})
	}
}

// prune removes from the model what GC deleted.
func (o *oracle) prune(deleteUntagged bool) {
	live := o.live(deleteUntagged)
	for r, rm := range o.repos {
		for d := range rm.manifests {
			if !live[r][d] {
				delete(rm.manifests, d)
			}
		}
	}
}
