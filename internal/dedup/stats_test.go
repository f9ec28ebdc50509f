package dedup

import (
	"context"
	"math"
	"strings"
	"testing"

	"github.com/opencontainers/go-digest"

	"github.com/cairn-registry/cairn/internal/layout"
	"github.com/cairn-registry/cairn/internal/meta"
)

// TestStats counts layers by state, logical and stored bytes, shared files
// and encoders over layers that share files.
func TestStats(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	v := newEnv(t, nil, Options{})

	st, err := v.eng.Stats(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if st.LogicalBytes != 0 || st.Ratio != 0 || len(st.Layers) != len(meta.States) {
		t.Fatalf("empty stats = %+v", st)
	}

	full := sharedLayers(t)
	idxFiles := variantFiles(6)
	indexed := tlayer{"index", mtOCIGzip, idxFiles, gzipStd(t, buildTar(t, idxFiles))}
	notTar := fileBody(9, 4000)
	var logical, recipes int64
	distinct := map[digest.Digest]int64{}
	for _, l := range full {
		v.process(v.put(l.blob), ModeFull, outDeduplicated)
		logical += int64(len(l.blob))
	}
	v.process(v.put(indexed.blob), ModeIndex, outIndexed)
	v.process(v.put(notTar), ModeFull, outIrreproducible)
	logical += int64(len(indexed.blob)) + int64(len(notTar))
	for _, l := range append(full, indexed) {
		fi, err := v.d.Stat(ctx, layout.BlobRecipe(l.digest()))
		if err != nil {
			t.Fatal(err)
		}
		recipes += fi.Size
		for _, f := range l.files {
			distinct[digest.FromBytes(f.body)] = int64(len(f.body))
		}
	}
	pending := digest.FromString("queued, not processed yet")
	if err := v.eng.Worker.putState(ctx, pending, summary{Mode: ModeFull}, meta.StatePending); err != nil {
		t.Fatal(err)
	}
	var fileBytes, storedFiles int64
	for _, n := range distinct {
		fileBytes += n
	}
	packs, err := v.store.ListPacks(ctx, "", 1000)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range packs {
		fi, err := v.d.Stat(ctx, layout.Pack(p.ID))
		if err != nil {
			t.Fatal(err)
		}
		storedFiles += fi.Size
	}

	st, err = v.eng.Stats(ctx)
	if err != nil {
		t.Fatal(err)
	}
	wantLayers := map[string]int64{"pending": 1, "intact": 1, "deduplicated": 3, "irreproducible": 1}
	for k, n := range wantLayers {
		if st.Layers[k] != n {
			t.Errorf("layers[%s] = %d, want %d", k, st.Layers[k], n)
		}
	}
	if st.LogicalBytes != logical {
		t.Errorf("LogicalBytes = %d, want %d", st.LogicalBytes, logical)
	}
	if want := int64(len(indexed.blob) + len(notTar)); st.StoredBytes.Intact != want {
		t.Errorf("StoredBytes.Intact = %d, want %d", st.StoredBytes.Intact, want)
	}
	if st.StoredBytes.Recipes != recipes {
		t.Errorf("StoredBytes.Recipes = %d, want %d", st.StoredBytes.Recipes, recipes)
	}
	if st.Files.Unique != int64(len(distinct)) || st.Files.Shared != int64(len(sharedFiles())) {
		t.Errorf("files unique %d shared %d, want %d and %d", st.Files.Unique, st.Files.Shared, len(distinct), len(sharedFiles()))
	}
	if st.Files.Bytes != fileBytes || st.Files.StoredBytes != storedFiles || st.StoredBytes.Files != storedFiles {
		t.Errorf("file bytes %d stored %d/%d, want %d and %d", st.Files.Bytes, st.Files.StoredBytes, st.StoredBytes.Files, fileBytes, storedFiles)
	}
	// The breakdown adds up: every pack byte is a live frame, a dead one
	// or index; every intact layer has its reason.
	// Nothing died: no dead bytes.
	if f := st.Files; f.LiveBytes+f.DeadBytes+f.IndexBytes != f.StoredBytes || f.IndexBytes <= 0 || f.LiveBytes <= 0 || f.DeadBytes != 0 {
		t.Errorf("pack bytes: live %d + dead %d + index %d, stored %d", f.LiveBytes, f.DeadBytes, f.IndexBytes, f.StoredBytes)
	}
	wantWhy := map[string]LayerBytes{"index": {1, int64(len(indexed.blob))}, "irreproducible": {1, int64(len(notTar))}, "pending": {1, 0}}
	if len(st.IntactWhy) != len(wantWhy) {
		t.Errorf("intact by reason %v, want %v", st.IntactWhy, wantWhy)
	}
	for why, want := range wantWhy {
		if st.IntactWhy[why] != want {
			t.Errorf("intact %s: %+v, want %+v", why, st.IntactWhy[why], want)
		}
	}
	if st.MetadataBytes <= 0 {
		t.Errorf("metadata bytes %d: the bolt file's size is known", st.MetadataBytes)
	}
	if total := st.StoredBytes.Intact + st.StoredBytes.Files + st.StoredBytes.Recipes; st.StoredBytes.Total != total {
		t.Errorf("StoredBytes.Total = %d, want %d", st.StoredBytes.Total, total)
	}
	if want := float64(logical) / float64(st.StoredBytes.Total); math.Abs(st.Ratio-want) > 1e-9 || st.Ratio <= 1 {
		t.Errorf("Ratio = %v, want %v (> 1: the layers share files)", st.Ratio, want)
	}
	if st.FileLevelRatio <= 0 {
		t.Errorf("FileLevelRatio = %v", st.FileLevelRatio)
	}
	// One member per compressed recipe, "none" for the plain tar.
	families := map[string]int64{}
	for enc, n := range st.Encoders {
		fam, _, _ := strings.Cut(enc, "/")
		families[fam] += n
	}
	if families["stdlib-gzip"] != 2 || families["klauspost-zstd"] != 1 || families["none"] != 1 || len(families) != 3 {
		t.Errorf("encoders = %v, want 2 stdlib-gzip, 1 klauspost-zstd, 1 none", st.Encoders)
	}
	v.m.mu.Lock()
	saved := v.m.saved
	v.m.mu.Unlock()
	if saved != st.LogicalBytes-st.StoredBytes.Total || saved <= 0 {
		t.Errorf("saved-bytes gauge = %d, want %d", saved, st.LogicalBytes-st.StoredBytes.Total)
	}
}
