package dedup

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/opencontainers/go-digest"

	"github.com/cairn-registry/cairn/internal/layout"
	"github.com/cairn-registry/cairn/internal/manifest"
	"github.com/cairn-registry/cairn/internal/meta"
)

func TestParseMode(t *testing.T) {
	t.Parallel()
	for in, want := range map[string]Mode{"": ModeOff, "off": ModeOff, "index": ModeIndex, "full": ModeFull, "selective": ModeSelective} {
		if got, err := ParseMode(in); err != nil || got != want {
			t.Errorf("ParseMode(%q) = %q, %v; want %q", in, got, err, want)
		}
	}
	for _, in := range []string{"Full", "on", "dedup"} {
		if _, err := ParseMode(in); err == nil {
			t.Errorf("ParseMode(%q) accepted", in)
		}
	}
}

// TestModeFor checks the first matching entry wins, in the order given:
// cmd/cairn sorts exact names first, then longer patterns.
func TestModeFor(t *testing.T) {
	t.Parallel()
	sorted := Options{Mode: ModeSelective, RepoModes: []RepoMode{
		{"mirror/special", ModeIndex},
		{"mirror/*[0-9]", ModeOff},
		{"mirror/*", ModeFull},
		{"*", ModeIndex},
	}}
	unsorted := Options{RepoModes: []RepoMode{
		{"mirror/*", ModeFull},
		{"mirror/special", ModeIndex},
	}}
	tests := []struct {
		opts Options
		repo string
		want Mode
	}{
		{sorted, "mirror/special", ModeIndex},
		{sorted, "mirror/alpine", ModeFull},
		{sorted, "mirror/alpine3", ModeOff},
		{sorted, "library", ModeIndex},
		{sorted, "a/b/c", ModeSelective}, // no pattern matches across '/'
		{unsorted, "mirror/special", ModeFull},
		{unsorted, "other", ModeOff},                                     // Mode "" is off
		{Options{RepoModes: []RepoMode{{"[", ModeFull}}}, "[", ModeFull}, // a bad pattern still matches exactly
	}
	for _, tc := range tests {
		if got := tc.opts.ModeFor(tc.repo); got != tc.want {
			t.Errorf("ModeFor(%q) with %v = %q, want %q", tc.repo, tc.opts.RepoModes, got, tc.want)
		}
	}
}

func TestOptionsActive(t *testing.T) {
	t.Parallel()
	tests := []struct {
		opts Options
		want bool
	}{
		{Options{}, false},
		{Options{Mode: ModeOff}, false},
		{Options{Mode: ModeIndex}, true},
		{Options{RepoModes: []RepoMode{{"a", ModeOff}}}, false},
		{Options{Mode: ModeOff, RepoModes: []RepoMode{{"a", ModeOff}, {"b/*", ModeSelective}}}, true},
	}
	for _, tc := range tests {
		if got := tc.opts.Active(); got != tc.want {
			t.Errorf("%+v.Active() = %v, want %v", tc.opts, got, tc.want)
		}
	}
}

func TestImageLayers(t *testing.T) {
	t.Parallel()
	d := func(s string) digest.Digest { return digest.FromString(s) }
	layer := func(mt string, dg digest.Digest) string {
		return `{"mediaType":"` + mt + `","digest":"` + string(dg) + `","size":1}`
	}
	image := func(layers ...string) []byte {
		s := `{"schemaVersion":2,"config":{"mediaType":"application/vnd.oci.image.config.v1+json","digest":"` + string(d("cfg")) + `","size":2},"layers":[`
		for i, l := range layers {
			if i > 0 {
				s += ","
			}
			s += l
		}
		return []byte(s + "]}")
	}
	tests := []struct {
		name    string
		content []byte
		want    []digest.Digest
	}{
		{"oci", image(layer(mtOCIGzip, d("a")), layer(mtOCIZstd, d("b")), layer(mtOCITar, d("c"))), []digest.Digest{d("a"), d("b"), d("c")}},
		{"docker", image(layer(mtDockerGzip, d("a")), layer(mtDockerTar, d("b")), layer(mtDockerZstd, d("c"))), []digest.Digest{d("a"), d("b"), d("c")}},
		{"foreign and artifacts skipped", image(
			layer("application/vnd.docker.image.rootfs.foreign.diff.tar.gzip", d("f")),
			layer("application/vnd.oci.image.layer.nondistributable.v1.tar+gzip", d("n")),
			layer("application/vnd.cncf.helm.chart.content.v1.tar+gzip", d("h")),
			layer(mtOCIGzip, d("a"))), []digest.Digest{d("a")}},
		{"invalid digest skipped", image(layer(mtOCIGzip, "sha256:nothex"), layer(mtOCIGzip, d("a"))), []digest.Digest{d("a")}},
		{"artifact only", image(layer("application/vnd.example.data", d("x"))), nil},
		{"no layers", image(), nil},
		{"index", []byte(`{"schemaVersion":2,"mediaType":"application/vnd.oci.image.index.v1+json","manifests":[{"mediaType":"application/vnd.oci.image.manifest.v1+json","digest":"` + string(d("m")) + `","size":3}]}`), nil},
		{"not json", []byte("layers"), nil},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var got []digest.Digest
			ok := false
			if m, err := manifest.Parse(digest.FromBytes(tc.content), tc.content); err == nil {
				got, ok = imageLayers(m)
			}
			if ok != (len(tc.want) > 0) || !slices.Equal(got, tc.want) {
				t.Fatalf("imageLayers = %v, %v; want %v", got, ok, tc.want)
			}
		})
	}
}

// TestManifestPushed drives the background engine: pushed image manifests
// get their layers processed in their repository's mode; indexes, configs,
// artifacts and repositories with dedup off are left alone.
func TestManifestPushed(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	v := newEnv(t, nil, Options{Mode: ModeOff, RepoModes: []RepoMode{
		{"keep/*", ModeIndex},
		{"dedup/*", ModeFull},
	}})
	ls := sharedLayers(t)
	for _, l := range ls {
		v.put(l.blob)
	}
	cfg := v.put([]byte(`{"architecture":"amd64","os":"linux"}`))
	artifact := tlayer{name: "artifact", mediaType: "application/vnd.example.data", blob: []byte("not a layer")}
	v.put(artifact.blob)
	v.eng.Start(ctx)

	// An index, an image in a repository with dedup off, and an artifact
	// first: the intake is one queue, so once the later images' layers are
	// done these were handled too.
	index := []byte(`{"schemaVersion":2,"mediaType":"application/vnd.oci.image.index.v1+json","manifests":[{"mediaType":"application/vnd.oci.image.manifest.v1+json","digest":"` + string(ls[0].digest()) + `","size":1}]}`)
	indexDigest := digest.FromBytes(index)
	v.eng.ManifestPushed(context.Background(), "dedup/app", parsed(t, indexDigest, index))
	off := imageManifest(t, false, cfg, []tlayer{ls[2]})
	v.eng.ManifestPushed(context.Background(), "other/app", parsed(t, digest.FromBytes(off), off))
	art := imageManifest(t, false, cfg, []tlayer{artifact})
	v.eng.ManifestPushed(context.Background(), "dedup/art", parsed(t, digest.FromBytes(art), art))

	docker := imageManifest(t, true, cfg, []tlayer{ls[0]})
	v.eng.ManifestPushed(context.Background(), "dedup/app", parsed(t, digest.FromBytes(docker), docker))
	oci := imageManifest(t, false, cfg, []tlayer{ls[1]})
	v.eng.ManifestPushed(context.Background(), "keep/app", parsed(t, digest.FromBytes(oci), oci))

	wait := func(l tlayer, want meta.LayerState) {
		t.Helper()
		eventually(t, l.name+" to be "+want.String(), func() bool {
			_, st := v.state(l.digest())
			return st == want
		})
	}
	wait(ls[0], meta.StateDeduplicated)
	wait(ls[1], meta.StateIntact)
	if v.hasData(ls[0].digest()) || !v.hasData(ls[1].digest()) {
		t.Fatal("full mode kept the intact copy or index mode dropped it")
	}
	v.wantBlob(ls[0].blob)
	v.wantBlob(ls[1].blob)

	for _, d := range []digest.Digest{ls[2].digest(), cfg, artifact.digest(), indexDigest} {
		if _, st := v.state(d); st != 0 {
			t.Errorf("%s: state %v, want never processed", d.Encoded()[:12], st)
		}
	}
	// ILmap: images are recorded whatever the mode; the index is not.
	if got, err := v.store.ImageLayers(ctx, digest.FromBytes(off)); err != nil || !slices.Equal(got, []digest.Digest{ls[2].digest()}) {
		t.Fatalf("ImageLayers of the dedup-off image = %v, %v", got, err)
	}
	if got, err := v.store.ImageLayers(ctx, digest.FromBytes(docker)); err != nil || !slices.Equal(got, []digest.Digest{ls[0].digest()}) {
		t.Fatalf("ImageLayers of the docker image = %v, %v", got, err)
	}
	if _, err := v.store.ImageLayers(ctx, indexDigest); !errors.Is(err, meta.ErrNotFound) {
		t.Fatalf("ImageLayers of an index: %v, want ErrNotFound", err)
	}

	// The same image pushed to a full-mode repository: its index-mode
	// layer gets the stronger mode.
	again := imageManifest(t, false, cfg, []tlayer{ls[1]})
	v.eng.ManifestPushed(context.Background(), "dedup/other", parsed(t, digest.FromBytes(again), again))
	wait(ls[1], meta.StateDeduplicated)
	v.wantBlob(ls[1].blob)

	eventually(t, "processed metrics", func() bool {
		v.m.mu.Lock()
		defer v.m.mu.Unlock()
		return v.m.processed[string(outDeduplicated)] >= 2 && v.m.processed[string(outIndexed)] >= 1
	})
}

// TestSelectivePromoteOnPulls: in selective mode, pulls reported by the
// server make a deduplicated layer hot, and the engine writes its intact
// copy back in the background.
func TestSelectivePromoteOnPulls(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	v := newEnv(t, nil, Options{Mode: ModeSelective, HotPulls: 3})
	l := sharedLayers(t)[1]
	d := v.put(l.blob)
	v.eng.Start(ctx)
	m := imageManifest(t, false, d, []tlayer{l})
	v.eng.ManifestPushed(context.Background(), "app", parsed(t, digest.FromBytes(m), m))
	eventually(t, "deduplication", func() bool {
		_, st := v.state(d)
		return st == meta.StateDeduplicated
	})
	for _, c := range []string{"a", "b", "c"} {
		v.eng.BlobPulled(ctx, c, d)
	}
	eventually(t, "promotion", func() bool {
		_, st := v.state(d)
		return st == meta.StateIntact
	})
	v.wantData(l.blob)
}

// TestRunAllProgress: a run reports its progress, and at its end every
// layer its manifests name is done.
func TestRunAllProgress(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	v := newEnv(t, nil, Options{Mode: ModeFull})
	ls := sharedLayers(t)
	for i, pair := range [][]tlayer{ls[:2], ls[1:3]} {
		for _, l := range pair {
			v.put(l.blob)
		}
		m := imageManifest(t, false, digest.FromString("cfg"), pair)
		md := v.put(m)
		repo := fmt.Sprintf("run/img%d", i)
		if err := v.d.PutContent(ctx, layout.RevisionLink(repo, md), []byte(md)); err != nil {
			t.Fatal(err)
		}
	}
	var mu sync.Mutex
	var seen []RunProgress
	st, err := v.eng.RunAll(ctx, RunOptions{Progress: func(p RunProgress) {
		mu.Lock()
		seen = append(seen, p)
		mu.Unlock()
	}, ProgressInterval: time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	last := seen[len(seen)-1]
	if !last.Final || last.Manifests != 2 || last.Layers != 3 || last.Done != 3 || last.Errors != 0 || st.Layers != 3 {
		t.Fatalf("final progress %+v, stats %+v; want 2 manifests, 3 of 3 layers done", last, st)
	}
	for _, p := range seen[:len(seen)-1] {
		if p.Final || p.Done > p.Layers {
			t.Fatalf("progress %+v before the end", p)
		}
	}
}

// TestAdmitCountsPendingBytes: an image's layers admitted for dedup are
// pending with the sizes the manifest gives, so stats count their intact
// bytes before they are processed.
func TestAdmitCountsPendingBytes(t *testing.T) {
	v := newEnv(t, nil, Options{Mode: ModeFull})
	ls := sharedLayers(t)[:2]
	cfg := v.put([]byte(`{"architecture":"amd64","os":"linux"}`))
	m := imageManifest(t, false, cfg, ls)
	pm := parsed(t, digest.FromBytes(m), m)
	layers, _ := imageLayers(pm)
	if err := v.eng.Worker.admit(t.Context(), newIntakeJob(pm, layers, ModeFull)); err != nil {
		t.Fatal(err)
	}
	st, err := v.eng.Stats(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	want := int64(len(ls[0].blob) + len(ls[1].blob))
	if got := st.IntactWhy["pending"]; got.Layers != 2 || got.Bytes != want {
		t.Fatalf("pending %+v, want 2 layers of %d bytes", got, want)
	}
}
