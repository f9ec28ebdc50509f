package e2e

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"testing"

	"github.com/opencontainers/go-digest"
	"github.com/opencontainers/image-spec/specs-go"
	ocispec "github.com/opencontainers/image-spec/specs-go/v1"
)

// TestHardeningSmallOnes covers the small items of issue 10, item 5, each of
// which failed on the old code.
func TestHardeningSmallOnes(t *testing.T) {
	e := start(t)
	const repo = "hard/small"
	bs := e.uploadBlobSet(repo, 2)

	t.Run("tag query bounded", func(t *testing.T) {
		e := e.with(t)
		m := ociManifest(t, bs.config, bs.layers, map[string]string{"n": "tags"})
		q := url.Values{}
		for i := range 101 {
			q.Add("tag", fmt.Sprintf("t%d", i))
		}
		r := e.do(http.MethodPut, "/v2/"+repo+"/manifests/"+sha(m)+"?"+q.Encode(), m, "Content-Type", mtOCIManifest)
		wantError(t, r, http.StatusBadRequest, "TAG_INVALID")
		if !strings.Contains(string(r.Body), "at most 100") {
			t.Errorf("%v: the error does not say the bound", r)
		}
		if tags, _ := e.tagsList(repo, ""); len(tags) != 0 {
			t.Errorf("a refused push left tags: %v", tags)
		}
		q.Del("tag")
		for i := range 100 {
			q.Add("tag", fmt.Sprintf("t%d", i))
		}
		r = e.do(http.MethodPut, "/v2/"+repo+"/manifests/"+sha(m)+"?"+q.Encode(), m, "Content-Type", mtOCIManifest)
		wantStatus(t, r, http.StatusCreated)
		if tags, _ := e.tagsList(repo, ""); len(tags) != 100 {
			t.Errorf("100 tags pushed, %d listed", len(tags))
		}
	})

	t.Run("delete of an invalid reference", func(t *testing.T) {
		e := e.with(t)
		for _, ref := range []string{".x", "-x", strings.Repeat("a", 129)} {
			r := e.do(http.MethodDelete, "/v2/"+repo+"/manifests/"+ref, nil)
			wantError(t, r, http.StatusNotFound, "MANIFEST_UNKNOWN")
		}
	})

	t.Run("descriptor sizes must match", func(t *testing.T) {
		e := e.with(t)
		for _, c := range []struct {
			field string
			edit  func(cfg *ocispec.Descriptor, layers []ocispec.Descriptor)
		}{
			{"config", func(cfg *ocispec.Descriptor, _ []ocispec.Descriptor) { cfg.Size++ }},
			{"layers[1]", func(_ *ocispec.Descriptor, l []ocispec.Descriptor) { l[1].Size-- }},
			{"layers[0]", func(_ *ocispec.Descriptor, l []ocispec.Descriptor) { l[0].Size = 0 }},
		} {
			cfg, layers := bs.config, append([]ocispec.Descriptor(nil), bs.layers...)
			c.edit(&cfg, layers)
			m := ociManifest(t, cfg, layers, nil)
			r := e.putManifest(repo, "bad", mtOCIManifest, m)
			wantError(t, r, http.StatusBadRequest, "MANIFEST_INVALID")
			if !strings.Contains(string(r.Body), c.field) {
				t.Errorf("%v: the error does not name %s", r, c.field)
			}
		}
		// An index whose child's size is wrong is refused too.
		m := ociManifest(t, bs.config, bs.layers, nil)
		wantStatus(t, e.putManifest(repo, "good", mtOCIManifest, m), http.StatusCreated)
		idx, err := json.Marshal(ocispec.Index{
			Versioned: specs.Versioned{SchemaVersion: 2},
			MediaType: ocispec.MediaTypeImageIndex,
			Manifests: []ocispec.Descriptor{{MediaType: mtOCIManifest, Digest: digest.Digest(sha(m)), Size: int64(len(m)) + 1}},
		})
		if err != nil {
			t.Fatal(err)
		}
		wantError(t, e.putManifest(repo, "idx", ocispec.MediaTypeImageIndex, idx), http.StatusBadRequest, "MANIFEST_INVALID")
		if r := e.do(http.MethodGet, "/v2/"+repo+"/manifests/bad", nil); r.Status != http.StatusNotFound {
			t.Errorf("a refused manifest is served: %v", r)
		}
	})
}
