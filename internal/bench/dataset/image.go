package dataset

import (
	"encoding/json"
	"fmt"
	"time"

	"github.com/opencontainers/go-digest"
)

// mediaType is the layer media type an image of builder bk gives a layer
// compressed with c. Docker schema 2 has no zstd.
func mediaType(bk builderKind, c Compression) (string, error) {
	if !bk.oci() {
		switch c {
		case GzipStdlib, GzipStdlibBestSpeed, GzipPgzip, GzipGNU:
			return MediaTypeDockerLayer, nil
		case Uncompressed:
			return "application/vnd.docker.image.rootfs.diff.tar", nil
		}
		return "", fmt.Errorf("a Docker schema 2 image cannot hold a %s layer", c)
	}
	switch c {
	case GzipStdlib, GzipStdlibBestSpeed, GzipPgzip, GzipGNU:
		return MediaTypeOCILayerGzip, nil
	case Zstd:
		return MediaTypeOCILayerZstd, nil
	case Uncompressed:
		return MediaTypeOCILayer, nil
	}
	return "", fmt.Errorf("unknown compression %q", c)
}

// The JSON shapes below fix field order, so configs and manifests are the
// same bytes on every build.
type (
	imageConfig struct {
		Architecture string        `json:"architecture"`
		Config       runConfig     `json:"config"`
		Created      time.Time     `json:"created"`
		History      []historyItem `json:"history"`
		OS           string        `json:"os"`
		RootFS       rootFS        `json:"rootfs"`
	}
	runConfig struct {
		Env        []string          `json:"Env"`
		Cmd        []string          `json:"Cmd"`
		WorkingDir string            `json:"WorkingDir,omitempty"`
		Labels     map[string]string `json:"Labels,omitempty"`
	}
	historyItem struct {
		Created   time.Time `json:"created"`
		CreatedBy string    `json:"created_by"`
		Comment   string    `json:"comment,omitempty"`
	}
	rootFS struct {
		Type    string          `json:"type"`
		DiffIDs []digest.Digest `json:"diff_ids"`
	}
	descriptor struct {
		MediaType string        `json:"mediaType"`
		Digest    digest.Digest `json:"digest"`
		Size      int64         `json:"size"`
	}
	manifest struct {
		SchemaVersion int          `json:"schemaVersion"`
		MediaType     string       `json:"mediaType"`
		Config        descriptor   `json:"config"`
		Layers        []descriptor `json:"layers"`
	}
)

// image writes the config and manifest of one planned image.
func (b *builder) image(p imagePlan) (*Image, error) {
	s := p.spec
	im := &Image{Repo: s.repo, Tag: s.tag, Builder: string(s.builder)}
	cfg := imageConfig{
		Architecture: "amd64",
		OS:           "linux",
		Config: runConfig{
			Env:    []string{"PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"},
			Cmd:    []string{"bash"},
			Labels: map[string]string{"org.opencontainers.image.version": s.tag},
		},
		RootFS: rootFS{Type: "layers"},
	}
	var created time.Time
	for i, lp := range p.layers {
		l, ok := b.blobs[blobKey{lp.key, p.comps[i]}]
		if !ok {
			return nil, fmt.Errorf("dataset: %s:%s: layer %q was not built", s.repo, s.tag, lp.desc)
		}
		mt, err := mediaType(s.builder, l.Compression)
		if err != nil {
			return nil, err
		}
		// One Layer per image use: the media type is the image's.
		lc := *l
		lc.MediaType = mt
		im.Layers = append(im.Layers, &lc)
		// Layers are stacked in time: each is at least a minute after the
		// one below it.
		t := b.tars[lp.key].Epoch
		if !created.IsZero() && !t.After(created) {
			t = created.Add(time.Minute)
		}
		created = t
		cfg.History = append(cfg.History, historyItem{Created: t, CreatedBy: "/bin/sh -c " + lp.desc, Comment: "buildkit.dockerfile.v0"})
		cfg.RootFS.DiffIDs = append(cfg.RootFS.DiffIDs, l.DiffID)
		if lp.app != nil {
			cfg.Config.WorkingDir = "/app/" + lp.app.name
			cfg.Config.Cmd = []string{"python3", "-m", lp.app.name}
		}
	}
	cfg.Created = created
	raw, err := json.Marshal(cfg)
	if err != nil {
		return nil, fmt.Errorf("dataset: %w", err)
	}
	im.Config, im.ConfigDigest = raw, digest.FromBytes(raw)
	m := manifest{SchemaVersion: 2, MediaType: MediaTypeDockerManifest}
	im.ConfigMediaType = MediaTypeDockerConfig
	if s.builder.oci() {
		m.MediaType, im.ConfigMediaType = MediaTypeOCIManifest, MediaTypeOCIConfig
	}
	m.Config = descriptor{MediaType: im.ConfigMediaType, Digest: im.ConfigDigest, Size: int64(len(raw))}
	for _, l := range im.Layers {
		m.Layers = append(m.Layers, descriptor{MediaType: l.MediaType, Digest: l.Digest, Size: l.Size})
	}
	raw, err = json.MarshalIndent(m, "", "   ")
	if err != nil {
		return nil, fmt.Errorf("dataset: %w", err)
	}
	im.ManifestMediaType, im.Manifest, im.Digest = m.MediaType, raw, digest.FromBytes(raw)
	return im, nil
}
