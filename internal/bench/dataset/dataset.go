// Package dataset builds realistic container images from Debian packages,
// for dedup tests and benchmarks: a Debian base layer, application layers
// from overlapping package sets, several versions of the same stack, each
// compressed the way the tool that pushed it does (docker and buildkit:
// compress/gzip; podman: klauspost/pgzip; zstd; a few uncompressed layers and
// one layer compressed by GNU gzip, which no Go encoder reproduces).
//
// Debs come from the machine's apt sources (apt-get download, no root
// needed) and are cached across runs. Layer tars are built deterministically
// from the debs' own data tars (original owners, modes, links and mtimes;
// paths in file-system walk order, dpkg's status and file lists added as a
// real apt-get install layer would), so two builds from the same apt
// sources give the same digests. Push sends the images to a registry with
// go-containerregistry, byte for byte as built.
package dataset

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"time"

	"github.com/opencontainers/go-digest"
)

// ErrNoApt means apt-get, apt-cache or dpkg-deb is not installed.
var ErrNoApt = errors.New("dataset: Debian package tools missing")

// Compression names how a layer blob was compressed.
type Compression string

// Compressions a dataset uses.
const (
	// GzipStdlib is compress/gzip at DefaultCompression (docker, buildkit).
	GzipStdlib Compression = "gzip-stdlib"
	// GzipStdlibBestSpeed is compress/gzip at BestSpeed, the default of
	// go-containerregistry's tarball layers (crane append, ko): the full
	// profile's crane images use it, and Layer.Recompressed makes such a
	// blob of any layer.
	GzipStdlibBestSpeed Compression = "gzip-stdlib-bestspeed"
	// GzipPgzip is klauspost/pgzip's NewWriter, as containers/image
	// (podman, buildah, skopeo) uses it.
	GzipPgzip Compression = "gzip-pgzip"
	// GzipGNU is the system gzip binary (gzip -n).
	GzipGNU Compression = "gzip-gnu"
	// Zstd is klauspost/compress/zstd's NewWriter with its defaults.
	Zstd Compression = "zstd"
	// Uncompressed is the plain tar.
	Uncompressed Compression = "none"
)

// Media types used by the images.
const (
	MediaTypeOCIManifest    = "application/vnd.oci.image.manifest.v1+json"
	MediaTypeOCIConfig      = "application/vnd.oci.image.config.v1+json"
	MediaTypeOCILayer       = "application/vnd.oci.image.layer.v1.tar"
	MediaTypeOCILayerGzip   = "application/vnd.oci.image.layer.v1.tar+gzip"
	MediaTypeOCILayerZstd   = "application/vnd.oci.image.layer.v1.tar+zstd"
	MediaTypeDockerManifest = "application/vnd.docker.distribution.manifest.v2+json"
	MediaTypeDockerConfig   = "application/vnd.docker.container.image.v1+json"
	MediaTypeDockerLayer    = "application/vnd.docker.image.rootfs.diff.tar.gzip"
)

// Options configures Build.
type Options struct {
	// Profile is the dataset's size. Default ProfileSmall.
	Profile Profile
	// CacheDir keeps downloaded debs and their extracted tars across
	// runs. Default DefaultCacheDir().
	CacheDir string
	// WorkDir receives the layer tars and blobs. Required. Layers already
	// built there by the same code are reused.
	WorkDir string
	// Log receives one line per phase; nil for none.
	Log io.Writer
}

// DefaultCacheDir is $XDG_CACHE_HOME/cairn/dataset (or the OS equivalent),
// or a directory under the temp dir when there is no user cache dir.
func DefaultCacheDir() string {
	if d, err := os.UserCacheDir(); err == nil {
		return filepath.Join(d, "cairn", "dataset")
	}
	return filepath.Join(os.TempDir(), "cairn-dataset-cache")
}

// Dataset is a built set of images.
type Dataset struct {
	Profile Profile
	Images  []*Image
	// Layers are the distinct layer blobs, in first-use order.
	Layers []*Layer
	// Packages is the number of distinct debs used and DebBytes their size.
	Packages int
	DebBytes int64
}

// Image is one image: a manifest, its config and its layers.
type Image struct {
	Repo, Tag string
	// Builder is the tool the image is modelled as pushed by.
	Builder           string
	ManifestMediaType string
	Manifest          []byte
	Digest            digest.Digest
	Config            []byte
	ConfigDigest      digest.Digest
	ConfigMediaType   string
	Layers            []*Layer
}

// Layer is one layer blob.
type Layer struct {
	Digest      digest.Digest
	Size        int64
	MediaType   string
	Compression Compression
	// DiffID and TarSize describe the uncompressed tar; Files counts its
	// members with content.
	DiffID  digest.Digest
	TarSize int64
	Files   int
	// Description says what the layer holds, for history and reports.
	Description string

	blobPath, tarPath string
}

// Open returns the blob's bytes as pushed.
func (l *Layer) Open() (*os.File, error) { return os.Open(l.blobPath) }

// OpenTar returns the layer's uncompressed tar.
func (l *Layer) OpenTar() (*os.File, error) { return os.Open(l.tarPath) }

// Recompressed returns the blob of l's tar compressed with c instead, as a
// producer that uses c pushes it; it belongs to no image. The blob is kept
// beside l's and reused by later calls.
func (l *Layer) Recompressed(ctx context.Context, c Compression) (*Layer, error) {
	b := &builder{work: filepath.Dir(filepath.Dir(l.blobPath)), logf: func(string, ...any) {}}
	return b.compress(ctx, &tarResult{Path: l.tarPath, DiffID: l.DiffID, Size: l.TarSize, Files: l.Files, Desc: l.Description}, c)
}

// LogicalBytes is the sum of the sizes of the distinct layer blobs.
func (d *Dataset) LogicalBytes() int64 {
	var n int64
	for _, l := range d.Layers {
		n += l.Size
	}
	return n
}

// RepoOf names, for each distinct layer, the repository of the first
// image holding it: where a client GETs the blob.
func (d *Dataset) RepoOf() map[digest.Digest]string {
	m := make(map[digest.Digest]string, len(d.Layers))
	for _, im := range d.Images {
		for _, l := range im.Layers {
			if _, ok := m[l.Digest]; !ok {
				m[l.Digest] = im.Repo
			}
		}
	}
	return m
}

// Build makes the profile's images: resolves and downloads the debs,
// builds every distinct layer tar once, compresses it once per compression
// that uses it, and writes configs and manifests.
func Build(ctx context.Context, opts Options) (*Dataset, error) {
	if opts.Profile == "" {
		opts.Profile = ProfileSmall
	}
	if opts.CacheDir == "" {
		opts.CacheDir = DefaultCacheDir()
	}
	if opts.WorkDir == "" {
		return nil, errors.New("dataset: no work dir")
	}
	sp, err := specs(opts.Profile)
	if err != nil {
		return nil, err
	}
	if err := checkTools(); err != nil {
		return nil, err
	}
	for _, d := range []string{opts.CacheDir, opts.WorkDir} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			return nil, fmt.Errorf("dataset: %w", err)
		}
	}
	b := &builder{
		apt:  &apt{cache: opts.CacheDir},
		work: opts.WorkDir,
		logf: func(format string, args ...any) {
			if opts.Log != nil {
				fmt.Fprintf(opts.Log, format+"\n", args...)
			}
		},
	}
	start := time.Now()
	plans, err := b.plan(ctx, sp)
	if err != nil {
		return nil, err
	}
	ds := &Dataset{Profile: opts.Profile}
	ds.Packages, ds.DebBytes = b.debStats()
	b.logf("dataset %s: %d images, %d debs (%.1f MB), resolved in %s", opts.Profile, len(plans), ds.Packages, float64(ds.DebBytes)/1e6, time.Since(start).Round(time.Millisecond))
	if err := b.buildLayers(ctx, plans); err != nil {
		return nil, err
	}
	seen := make(map[digest.Digest]bool)
	for _, p := range plans {
		im, err := b.image(p)
		if err != nil {
			return nil, err
		}
		ds.Images = append(ds.Images, im)
		for _, l := range im.Layers {
			if !seen[l.Digest] {
				seen[l.Digest] = true
				ds.Layers = append(ds.Layers, l)
			}
		}
	}
	b.logf("dataset %s: %d images, %d distinct layers, %.1f MB of blobs, built in %s", opts.Profile, len(ds.Images), len(ds.Layers), float64(ds.LogicalBytes())/1e6, time.Since(start).Round(time.Millisecond))
	return ds, nil
}
