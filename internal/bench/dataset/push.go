package dataset

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/partial"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/types"
)

// PushOptions tunes Push. Zero values take the defaults noted.
type PushOptions struct {
	// Transport carries the requests. Default http.DefaultTransport.
	Transport http.RoundTripper
	// Jobs is the number of blobs uploaded at once per image. Default 4.
	Jobs int
}

// Push uploads images to the registry at registryURL ("http://host:port" or
// "host:port"; plain HTTP unless the scheme is https) with
// go-containerregistry's remote.Write, one image after the other. Blobs go
// out as the exact bytes built, manifests as the exact bytes whose digest
// Image.Digest is.
func Push(ctx context.Context, registryURL string, images []*Image, opts PushOptions) error {
	host, insecure, err := registryHost(registryURL)
	if err != nil {
		return err
	}
	if opts.Transport == nil {
		opts.Transport = http.DefaultTransport
	}
	if opts.Jobs <= 0 {
		opts.Jobs = 4
	}
	var nameOpts []name.Option
	if insecure {
		nameOpts = append(nameOpts, name.Insecure)
	}
	for _, im := range images {
		ref, err := name.NewTag(host+"/"+im.Repo+":"+im.Tag, nameOpts...)
		if err != nil {
			return fmt.Errorf("dataset: push %s:%s: %w", im.Repo, im.Tag, err)
		}
		img, err := partial.CompressedToImage(ggcrImage{im})
		if err != nil {
			return fmt.Errorf("dataset: push %s:%s: %w", im.Repo, im.Tag, err)
		}
		if err := remote.Write(ref, img, remote.WithContext(ctx), remote.WithTransport(opts.Transport), remote.WithJobs(opts.Jobs)); err != nil {
			return fmt.Errorf("dataset: push %s:%s: %w", im.Repo, im.Tag, err)
		}
	}
	return nil
}

func registryHost(s string) (host string, insecure bool, err error) {
	if !strings.Contains(s, "://") {
		return strings.TrimSuffix(s, "/"), true, nil
	}
	u, err := url.Parse(s)
	if err != nil || u.Host == "" {
		return "", false, fmt.Errorf("dataset: bad registry URL %q", s)
	}
	return u.Host, u.Scheme != "https", nil
}

// ggcrImage presents an Image to go-containerregistry as a compressed image
// whose manifest, config and blobs are served verbatim.
type ggcrImage struct{ im *Image }

func (g ggcrImage) RawConfigFile() ([]byte, error) { return g.im.Config, nil }
func (g ggcrImage) RawManifest() ([]byte, error)   { return g.im.Manifest, nil }
func (g ggcrImage) MediaType() (types.MediaType, error) {
	return types.MediaType(g.im.ManifestMediaType), nil
}

func (g ggcrImage) LayerByDigest(h v1.Hash) (partial.CompressedLayer, error) {
	if h.String() == g.im.ConfigDigest.String() {
		return configBlob{g.im}, nil
	}
	for _, l := range g.im.Layers {
		if l.Digest.String() == h.String() {
			return ggcrLayer{l}, nil
		}
	}
	return nil, fmt.Errorf("dataset: %s:%s has no blob %s", g.im.Repo, g.im.Tag, h)
}

type ggcrLayer struct{ l *Layer }

func (g ggcrLayer) Digest() (v1.Hash, error)            { return v1.NewHash(g.l.Digest.String()) }
func (g ggcrLayer) DiffID() (v1.Hash, error)            { return v1.NewHash(g.l.DiffID.String()) }
func (g ggcrLayer) Size() (int64, error)                { return g.l.Size, nil }
func (g ggcrLayer) MediaType() (types.MediaType, error) { return types.MediaType(g.l.MediaType), nil }
func (g ggcrLayer) Compressed() (io.ReadCloser, error)  { return g.l.Open() }

type configBlob struct{ im *Image }

func (c configBlob) Digest() (v1.Hash, error) { return v1.NewHash(c.im.ConfigDigest.String()) }
func (c configBlob) Size() (int64, error)     { return int64(len(c.im.Config)), nil }
func (c configBlob) MediaType() (types.MediaType, error) {
	return types.MediaType(c.im.ConfigMediaType), nil
}
func (c configBlob) Compressed() (io.ReadCloser, error) {
	return io.NopCloser(strings.NewReader(string(c.im.Config))), nil
}
