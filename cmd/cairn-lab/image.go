package main

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"context"
	"debug/buildinfo"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/google/go-containerregistry/pkg/authn"
	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"github.com/google/go-containerregistry/pkg/v1/types"
)

const imageUsage = `usage: cairn-lab image [--oci DIR] [--push REF] [--insecure] [--tag TAG]
                       [--platforms linux/amd64,linux/arm64] [--ca-certs FILE] [--version V]

Builds cairn's OCI image without a container daemon, from the module it is
run in: ./cmd/cairn built static for each platform (CGO_ENABLED=0, -trimpath,
-tags disable_grpc_modules, -ldflags "-s -w", the git commit stamped), on an
empty base with the CA certificates, as user 65532, in a multi-arch OCI
index. Every timestamp is SOURCE_DATE_EPOCH (default: the commit time of
HEAD), so the same commit, Go toolchain and certificate file give the same
digest. Writes an OCI layout (--oci, a new directory) and/or pushes (--push);
prints the index digest on stdout.

The image runs "cairn serve --addr :5000" in /var/lib/cairn (storage under
/var/lib/cairn/cairn-data unless a configuration names another); give other
arguments to run another command or configuration.`

// Where things live in the image. The storage directory belongs to the
// image's user, so that a volume mounted there by a runtime that copies
// the image's ownership (Docker, Podman) is writable by it.
const (
	imageBinary  = "/usr/bin/cairn"
	imageWorkDir = "/var/lib/cairn"
	imageCACerts = "/etc/ssl/certs/ca-certificates.crt"
	imageUID     = 65532
)

// runImage runs `cairn-lab image [flags]`.
func runImage(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("cairn-lab image", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	ociDir := fs.String("oci", "", "write an OCI image layout to this new `DIR`")
	push := fs.String("push", "", "push the index to this `REF` (credentials from the Docker config)")
	insecure := fs.Bool("insecure", false, "push over plain HTTP")
	tag := fs.String("tag", "latest", "the index's name in the OCI layout (org.opencontainers.image.ref.name)")
	platforms := fs.String("platforms", "linux/amd64,linux/arm64", "comma-separated `OS/ARCH` list")
	caCerts := fs.String("ca-certs", "/etc/ssl/certs/ca-certificates.crt", "CA certificate bundle to put in the image (Debian's ca-certificates)")
	version := fs.String("version", "", "version to stamp (-X main.version), for builds outside a git checkout or of a release")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			fmt.Fprintln(stdout, imageUsage)
			fs.SetOutput(stdout)
			fs.PrintDefaults()
			return nil
		}
		return fmt.Errorf("%w: image: %v", errUsage, err)
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("%w: image: unexpected argument %q", errUsage, fs.Arg(0))
	}
	if *ociDir == "" && *push == "" {
		return fmt.Errorf("%w: image: give --oci DIR, --push REF or both", errUsage)
	}
	plats, err := parsePlatforms(*platforms)
	if err != nil {
		return fmt.Errorf("%w: image: %v", errUsage, err)
	}
	var ref name.Reference
	if *push != "" {
		var opts []name.Option
		if *insecure {
			opts = append(opts, name.Insecure)
		}
		if ref, err = name.ParseReference(*push, opts...); err != nil {
			return fmt.Errorf("%w: image: --push: %v", errUsage, err)
		}
	}
	if *ociDir != "" {
		if entries, err := os.ReadDir(*ociDir); err == nil && len(entries) > 0 {
			return fmt.Errorf("image: --oci %s: not empty (a layout there would gain a second image)", *ociDir)
		}
	}

	root, err := moduleRoot(ctx)
	if err != nil {
		return fmt.Errorf("image: %w", err)
	}
	inGit := exec.CommandContext(ctx, "git", "-C", root, "rev-parse", "--git-dir").Run() == nil
	epoch, err := sourceDateEpoch(ctx, root, inGit)
	if err != nil {
		return fmt.Errorf("image: %w", err)
	}
	certs, err := os.ReadFile(*caCerts)
	if err != nil {
		return fmt.Errorf("image: CA certificates: %w (apt-get install ca-certificates, or --ca-certs)", err)
	}
	work, err := os.MkdirTemp("", "cairn-image-")
	if err != nil {
		return fmt.Errorf("image: %w", err)
	}
	defer os.RemoveAll(work)

	base, err := layerOf(baseFiles(certs), epoch)
	if err != nil {
		return fmt.Errorf("image: base layer: %w", err)
	}
	var (
		adds        []mutate.IndexAddendum
		annotations map[string]string
	)
	for _, p := range plats {
		bin := filepath.Join(work, "cairn-"+p.OS+"-"+p.Architecture)
		if err := buildStatic(ctx, root, p, bin, *version, inGit, stderr); err != nil {
			return fmt.Errorf("image: %w", err)
		}
		img, labels, err := platformImage(base, bin, p, epoch)
		if err != nil {
			return fmt.Errorf("image: %s/%s: %w", p.OS, p.Architecture, err)
		}
		annotations = labels // the same build on every platform
		adds = append(adds, mutate.IndexAddendum{Add: img, Descriptor: v1.Descriptor{Platform: &p}})
	}
	idx := mutate.AppendManifests(mutate.IndexMediaType(empty.Index, types.OCIImageIndex), adds...)
	idx = mutate.Annotations(idx, annotations).(v1.ImageIndex)
	digest, err := idx.Digest()
	if err != nil {
		return fmt.Errorf("image: %w", err)
	}

	if *ociDir != "" {
		lp, err := layout.Write(*ociDir, empty.Index)
		if err != nil {
			return fmt.Errorf("image: --oci: %w", err)
		}
		if err := lp.AppendIndex(idx, layout.WithAnnotations(map[string]string{"org.opencontainers.image.ref.name": *tag})); err != nil {
			return fmt.Errorf("image: --oci: %w", err)
		}
		fmt.Fprintf(stderr, "wrote %s (OCI layout, %s)\n", *ociDir, *tag)
	}
	if ref != nil {
		if err := remote.WriteIndex(ref, idx, remote.WithContext(ctx), remote.WithAuthFromKeychain(authn.DefaultKeychain)); err != nil {
			return fmt.Errorf("image: push %s: %w", ref, err)
		}
		fmt.Fprintf(stderr, "pushed %s@%s\n", ref.Context(), digest)
	}
	fmt.Fprintln(stdout, digest)
	return nil
}

func parsePlatforms(s string) ([]v1.Platform, error) {
	var out []v1.Platform
	for _, f := range strings.Split(s, ",") {
		parts := strings.Split(strings.TrimSpace(f), "/")
		if len(parts) != 2 || parts[0] == "" || parts[1] == "" {
			return nil, fmt.Errorf("--platforms: %q is not OS/ARCH", f)
		}
		p := v1.Platform{OS: parts[0], Architecture: parts[1]}
		if p.Architecture == "arm64" {
			p.Variant = "v8" // what runtimes match linux/arm64 against
		}
		out = append(out, p)
	}
	return out, nil
}

func moduleRoot(ctx context.Context) (string, error) {
	out, err := exec.CommandContext(ctx, "go", "env", "GOMOD").Output()
	if err != nil {
		return "", fmt.Errorf("go env GOMOD: %w", err)
	}
	mod := strings.TrimSpace(string(out))
	if mod == "" || mod == os.DevNull {
		return "", errors.New("not inside cairn's module (run from the repository)")
	}
	return filepath.Dir(mod), nil
}

// sourceDateEpoch is the one time every timestamp in the image carries:
// $SOURCE_DATE_EPOCH (reproducible-builds.org), else the commit time of
// HEAD. Outside git, without the variable, there is no time that two
// builds would agree on, so it is an error rather than the clock.
func sourceDateEpoch(ctx context.Context, root string, inGit bool) (time.Time, error) {
	if s := os.Getenv("SOURCE_DATE_EPOCH"); s != "" {
		n, err := strconv.ParseInt(s, 10, 64)
		if err != nil {
			return time.Time{}, fmt.Errorf("SOURCE_DATE_EPOCH=%q: not a number of seconds", s)
		}
		return time.Unix(n, 0).UTC(), nil
	}
	if !inGit {
		return time.Time{}, errors.New("not a git checkout: set SOURCE_DATE_EPOCH (seconds since 1970) for the image's timestamps")
	}
	out, err := exec.CommandContext(ctx, "git", "-C", root, "log", "-1", "--format=%ct").Output()
	if err != nil {
		return time.Time{}, fmt.Errorf("git log: %w", err)
	}
	n, err := strconv.ParseInt(strings.TrimSpace(string(out)), 10, 64)
	if err != nil {
		return time.Time{}, fmt.Errorf("git log: commit time %q: %w", out, err)
	}
	return time.Unix(n, 0).UTC(), nil
}

// buildTags leave out what serves nobody in cairn's binary:
// disable_grpc_modules drops cloud.google.com/go/storage's gRPC DirectPath
// (xDS, Envoy's protos: 13 MB of the binary), which the GCS driver, on the
// JSON API, never uses.
const buildTags = "disable_grpc_modules"

// buildStatic builds ./cmd/cairn for p into out. -buildvcs=true is given
// in a git checkout because a GOFLAGS=-buildvcs=false in the environment
// (some CI images set it) would otherwise leave the commit out and the
// binary would say "devel".
func buildStatic(ctx context.Context, root string, p v1.Platform, out, version string, inGit bool, stderr io.Writer) error {
	ldflags := "-s -w"
	if version != "" {
		ldflags += " -X main.version=" + version
	}
	args := []string{"build", "-trimpath", "-tags=" + buildTags, "-ldflags=" + ldflags, "-o", out}
	if inGit {
		args = append(args, "-buildvcs=true")
	}
	args = append(args, "./cmd/cairn")
	cmd := exec.CommandContext(ctx, "go", args...)
	cmd.Dir = root
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0", "GOOS="+p.OS, "GOARCH="+p.Architecture)
	cmd.Stderr = stderr
	fmt.Fprintf(stderr, "go %s (GOOS=%s GOARCH=%s CGO_ENABLED=0)\n", strings.Join(args, " "), p.OS, p.Architecture)
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("go build for %s/%s: %w", p.OS, p.Architecture, err)
	}
	return nil
}

// platformImage stacks the binary's layer on base and describes the image,
// with labels taken from the binary's own build information so that they
// can never disagree with what `cairn version` prints.
func platformImage(base v1.Layer, bin string, p v1.Platform, epoch time.Time) (v1.Image, map[string]string, error) {
	data, err := os.ReadFile(bin)
	if err != nil {
		return nil, nil, err
	}
	binLayer, err := layerOf([]imageFile{
		{path: "usr/", mode: 0o755},
		{path: "usr/bin/", mode: 0o755},
		{path: strings.TrimPrefix(imageBinary, "/"), mode: 0o755, data: data},
	}, epoch)
	if err != nil {
		return nil, nil, err
	}
	labels := map[string]string{
		"org.opencontainers.image.title":    "cairn",
		"org.opencontainers.image.source":   "https://github.com/cairn-registry/cairn",
		"org.opencontainers.image.licenses": "Apache-2.0",
		"org.opencontainers.image.created":  epoch.Format(time.RFC3339),
	}
	if bi, err := buildinfo.ReadFile(bin); err == nil {
		if bi.Main.Version != "" && bi.Main.Version != "(devel)" {
			labels["org.opencontainers.image.version"] = bi.Main.Version
		}
		for _, s := range bi.Settings {
			if s.Key == "vcs.revision" {
				labels["org.opencontainers.image.revision"] = s.Value
			}
		}
	}
	cfg := &v1.ConfigFile{
		Architecture: p.Architecture,
		OS:           p.OS,
		Variant:      p.Variant,
		Created:      v1.Time{Time: epoch},
		Config: v1.Config{
			Entrypoint:   []string{imageBinary},
			Cmd:          []string{"serve", "--addr", ":5000"},
			User:         fmt.Sprintf("%d:%d", imageUID, imageUID),
			WorkingDir:   imageWorkDir,
			Env:          []string{"PATH=/usr/bin", "HOME=" + imageWorkDir},
			ExposedPorts: map[string]struct{}{"5000/tcp": {}},
			Labels:       labels,
			StopSignal:   "SIGTERM",
		},
		RootFS: v1.RootFS{Type: "layers"},
	}
	img, err := mutate.ConfigFile(mutate.ConfigMediaType(mutate.MediaType(empty.Image, types.OCIManifestSchema1), types.OCIConfigJSON), cfg)
	if err != nil {
		return nil, nil, err
	}
	img, err = mutate.Append(img,
		mutate.Addendum{Layer: base, MediaType: types.OCILayer, History: v1.History{
			Created: v1.Time{Time: epoch}, CreatedBy: "cairn-lab image: CA certificates, passwd, " + imageWorkDir,
		}},
		mutate.Addendum{Layer: binLayer, MediaType: types.OCILayer, History: v1.History{
			Created: v1.Time{Time: epoch}, CreatedBy: "cairn-lab image: " + imageBinary + " (go build -trimpath -tags=" + buildTags + " -ldflags=\"-s -w\", CGO_ENABLED=0)",
		}},
	)
	if err != nil {
		return nil, nil, err
	}
	return img, labels, nil
}

// imageFile is one entry of a layer; a path ending in "/" is a directory.
type imageFile struct {
	path     string
	mode     int64
	uid, gid int
	data     []byte
}

// baseFiles is what every platform shares: CA certificates for the object
// stores and upstreams cairn calls over TLS, a passwd and group naming the
// user (some libraries look the user up), a sticky /tmp for the proxy's
// spool, and the working directory owned by the user.
func baseFiles(certs []byte) []imageFile {
	return []imageFile{
		{path: "etc/", mode: 0o755},
		{path: "etc/group", mode: 0o644, data: fmt.Appendf(nil, "root:x:0:\ncairn:x:%d:\n", imageUID)},
		{path: "etc/passwd", mode: 0o644, data: fmt.Appendf(nil,
			"root:x:0:0:root:/root:/sbin/nologin\ncairn:x:%d:%d:cairn:%s:/sbin/nologin\n", imageUID, imageUID, imageWorkDir)},
		{path: "etc/ssl/", mode: 0o755},
		{path: "etc/ssl/certs/", mode: 0o755},
		{path: strings.TrimPrefix(imageCACerts, "/"), mode: 0o644, data: certs},
		{path: "tmp/", mode: 0o1777},
		{path: "var/", mode: 0o755},
		{path: "var/lib/", mode: 0o755},
		{path: strings.TrimPrefix(imageWorkDir, "/") + "/", mode: 0o755, uid: imageUID, gid: imageUID},
	}
}

// layerOf makes a gzip-compressed OCI layer of files, in the order given,
// every entry stamped with epoch and no owner names: the bytes depend on
// the contents alone. It compresses here, once, rather than letting the
// tarball package compress on every read.
func layerOf(files []imageFile, epoch time.Time) (v1.Layer, error) {
	var buf bytes.Buffer
	zw, err := gzip.NewWriterLevel(&buf, gzip.BestCompression)
	if err != nil {
		return nil, err
	}
	tw := tar.NewWriter(zw)
	for _, f := range files {
		h := &tar.Header{Name: f.path, Mode: f.mode, Uid: f.uid, Gid: f.gid, ModTime: epoch}
		if strings.HasSuffix(f.path, "/") {
			h.Typeflag = tar.TypeDir
		} else {
			h.Typeflag = tar.TypeReg
			h.Size = int64(len(f.data))
		}
		if err := tw.WriteHeader(h); err != nil {
			return nil, fmt.Errorf("tar %s: %w", f.path, err)
		}
		if _, err := tw.Write(f.data); err != nil {
			return nil, fmt.Errorf("tar %s: %w", f.path, err)
		}
	}
	if err := tw.Close(); err != nil {
		return nil, err
	}
	if err := zw.Close(); err != nil {
		return nil, err
	}
	b := buf.Bytes()
	return tarball.LayerFromOpener(func() (io.ReadCloser, error) {
		return io.NopCloser(bytes.NewReader(b)), nil
	}, tarball.WithMediaType(types.OCILayer))
}
