package dedup

import (
	"bytes"
	"context"
	"encoding/json"
	"testing"

	"github.com/cairn-registry/cairn/internal/layout"
)

// TestRecipeFileCompressed: a recipe file is stored as zstd of its JSON,
// a fraction of the JSON's size; a recipe file of plain JSON (written
// before) is still read, and the layer rebuilt from it.
func TestRecipeFileCompressed(t *testing.T) {
	ctx := context.Background()
	v := newEnv(t, nil, Options{})
	var plain, stored int
	for _, l := range sharedLayers(t) {
		d := v.put(l.blob)
		v.process(d, ModeFull, outDeduplicated)
		raw, err := v.d.GetContent(ctx, layout.BlobRecipe(d))
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.HasPrefix(raw, zstdMagic) {
			t.Fatalf("recipe of %s is not zstd", d)
		}
		rec, err := decodeRecipe(d, raw)
		if err != nil {
			t.Fatal(err)
		}
		js, err := json.Marshal(rec)
		if err != nil {
			t.Fatal(err)
		}
		plain, stored = plain+len(js), stored+len(raw)

		// The former format: plain JSON.
		if err := v.d.PutContent(ctx, layout.BlobRecipe(d), js); err != nil {
			t.Fatal(err)
		}
		v.eng.recipes.remove(d)
		v.wantBlob(l.blob)
	}
	t.Logf("recipes: %d bytes of JSON stored in %d (%.1fx)", plain, stored, float64(plain)/float64(stored))
	// These recipes are mostly file digests (random hex) and an already
	// compressed tar skeleton: a quarter off is what zstd finds in them.
	if stored*5 > plain*4 {
		t.Fatalf("recipes stored in %d bytes for %d of JSON: want at most 80%%", stored, plain)
	}
}
