package dataset

import (
	"fmt"
	"slices"
)

// Profile selects the size of a dataset.
type Profile string

// Profiles. Both are fixed lists of images; what they contain depends only
// on the machine's apt sources.
const (
	// ProfileSmall is for tests: five images over a few MB of debs, built
	// in seconds once the debs are cached.
	ProfileSmall Profile = "small"
	// ProfileFull is for benchmarks: about forty images over a few hundred
	// MB of debs.
	ProfileFull Profile = "full"
)

// builderKind is the tool an image is modelled as pushed by: it decides the
// manifest format and how layers are compressed by default.
type builderKind string

const (
	// docker (and buildkit's default): Docker schema 2, compress/gzip at
	// DefaultCompression.
	docker builderKind = "docker"
	// podman (buildah, skopeo: containers/image): OCI, pgzip.NewWriter
	// (default level, 1 MiB blocks).
	podman builderKind = "podman"
	// buildkitZstd is buildkit or podman with zstd: OCI, klauspost zstd
	// at its default level.
	buildkitZstd builderKind = "buildkit-zstd"
	// crane (go-containerregistry: crane append, ko): Docker schema 2,
	// compress/gzip at BestSpeed.
	crane builderKind = "crane"
)

func (b builderKind) compression() Compression {
	switch b {
	case podman:
		return GzipPgzip
	case buildkitZstd:
		return Zstd
	case crane:
		return GzipStdlibBestSpeed
	}
	return GzipStdlib
}

func (b builderKind) oci() bool { return b != docker && b != crane }

// layerSpec describes one layer: either the Debian packages it installs or
// a generated application.
type layerSpec struct {
	// pkgs are installed by this layer: with resolve, also their
	// dependencies, minus every package of the layers below.
	pkgs    []string
	resolve bool
	// older takes the newest version older than apt's candidate where the
	// sources have one: the same stack built before the last update.
	older bool
	// app, when set, makes a generated application layer instead.
	app *appSpec
	// comp overrides the builder's compression for this layer.
	comp Compression
}

// appSpec is a generated application: files small text files whose first
// changed contents depend on the version, the rest on the name only, so
// versions of one application share most files.
type appSpec struct {
	name, version  string
	files, changed int
}

type imageSpec struct {
	repo, tag string
	builder   builderKind
	layers    []layerSpec
}

func pkgs(older bool, names ...string) layerSpec {
	return layerSpec{pkgs: names, resolve: true, older: older}
}

// fixed installs exactly names, without dependencies: for the small profile,
// whose base lacks what apt would pull in (dpkg, tar, ...).
func fixed(older bool, names ...string) layerSpec {
	return layerSpec{pkgs: names, older: older}
}

func app(name, version string, files, changed int) layerSpec {
	return layerSpec{app: &appSpec{name: name, version: version, files: files, changed: changed}}
}

func withComp(l layerSpec, c Compression) layerSpec { l.comp = c; return l }

func specs(p Profile) ([]imageSpec, error) {
	switch p {
	case ProfileSmall:
		return smallSpecs(), nil
	case ProfileFull:
		return fullSpecs(), nil
	}
	return nil, fmt.Errorf("dataset: unknown profile %q (want %s or %s)", p, ProfileSmall, ProfileFull)
}

// smallSpecs: one minimal base and four small stacks, all fixed package
// lists (not resolved), so the whole set stays a few MB of debs.
func smallSpecs() []imageSpec {
	base := layerSpec{pkgs: []string{
		"base-files", "base-passwd", "libc6", "libgcc-s1", "gcc-12-base",
		"dash", "mawk", "debianutils", "netbase", "tzdata",
	}}
	jq := []string{"jq", "libjq1", "libonig5"}
	jqFile := append(slices.Clone(jq), "file", "libmagic1", "libmagic-mgc", "zlib1g", "liblzma5", "libbz2-1.0")
	return []imageSpec{
		{"small/jq", "1.0", docker, []layerSpec{base, fixed(true, jq...), app("jqtool", "1.0", 8, 2)}},
		{"small/jq", "1.1", docker, []layerSpec{base, fixed(false, jqFile...), app("jqtool", "1.1", 8, 2)}},
		{"small/jq-podman", "1.1", podman, []layerSpec{base, fixed(false, jqFile...), app("jqtool", "1.1", 8, 2)}},
		{"small/sqlite", "3", buildkitZstd, []layerSpec{base, fixed(false, "sqlite3", "libsqlite3-0", "libreadline8", "readline-common", "libtinfo6"), withComp(app("notes", "3.0", 6, 1), Uncompressed)}},
		{"small/lua", "5.4", docker, []layerSpec{base, fixed(false, "lua5.4", "libreadline8", "readline-common", "libtinfo6"), withComp(app("luatool", "5.4", 6, 1), GzipGNU)}},
	}
}

// debianRequired is the package set of a debian:bookworm image (Priority
// required plus apt; usr-is-merged stands in for usrmerge, as debootstrap
// merges /usr itself), resolved with dependencies.
var debianRequired = []string{
	"base-files", "base-passwd", "bash", "bsdutils", "coreutils", "dash",
	"debconf", "debian-archive-keyring", "debianutils", "diffutils", "dpkg",
	"findutils", "gcc-12-base", "gpgv", "grep", "gzip", "hostname",
	"init-system-helpers", "libc-bin", "login", "mawk", "mount", "ncurses-base",
	"ncurses-bin", "passwd", "perl-base", "sed", "sysvinit-utils", "tar",
	"tzdata", "util-linux", "apt", "usr-is-merged",
}

// fullSpecs: a current and an older Debian base, a dozen stacks in two or
// three versions each (older packages, current packages, current plus a few
// more), every stack pushed by docker and most also by podman or buildkit
// with zstd, plus layered stacks and one layer compressed by GNU gzip.
func fullSpecs() []imageSpec {
	base := layerSpec{pkgs: debianRequired, resolve: true}
	base0 := layerSpec{pkgs: debianRequired, resolve: true, older: true}
	img := func(repo, tag string, b builderKind, layers ...layerSpec) imageSpec {
		return imageSpec{repo: repo, tag: tag, builder: b, layers: layers}
	}
	// stack adds the three usual versions of one stack: built on the older
	// base with older packages, on the current base, and current with extra
	// packages and the next app version; the current one is also pushed by
	// other builders.
	var out []imageSpec
	stack := func(repo, tag string, names, extra []string, others ...builderKind) {
		a := func(v string) layerSpec { return app(repo, v, 24, 3) }
		out = append(out,
			img("full/"+repo, tag+"-old", docker, base0, pkgs(true, names...), a("1.0")),
			img("full/"+repo, tag, docker, base, pkgs(false, names...), a("1.1")))
		for _, b := range others {
			out = append(out, img("full/"+repo+"-"+string(b), tag, b, base, pkgs(false, names...), a("1.1")))
		}
		if len(extra) > 0 {
			out = append(out, img("full/"+repo, tag+"-plus", docker, base, pkgs(false, append(extra, names...)...), a("1.2")))
		}
	}
	out = append(out,
		img("full/debian", "bookworm", docker, base),
		img("full/debian", "bookworm-old", docker, base0),
		img("full/debian-podman", "bookworm", podman, base))
	stack("python", "3.11", []string{"python3"}, []string{"python3-pip"}, podman, buildkitZstd)
	stack("perl", "5.36", []string{"perl"}, []string{"libjson-perl", "libyaml-libyaml-perl"}, podman)
	stack("nginx", "1.22", []string{"nginx"}, []string{"ssl-cert"}, podman)
	stack("apache", "2.4", []string{"apache2"}, nil, buildkitZstd)
	stack("ruby", "3.1", []string{"ruby"}, []string{"ruby-json"}, podman)
	stack("node", "18", []string{"nodejs"}, nil, podman)
	stack("build", "12", []string{"gcc", "make", "libc6-dev"}, []string{"g++"})
	stack("redis", "7.0", []string{"redis-server"}, nil, buildkitZstd)
	stack("postgres", "15", []string{"postgresql-15"}, nil, crane)
	stack("git", "2.39", []string{"git", "curl", "ca-certificates"}, nil, crane)
	out = append(out,
		// A stack on a stack: the python layer here lacks what the build
		// layer already installed.
		img("full/python-build", "3.11", docker, base, pkgs(false, "gcc", "make", "libc6-dev"), pkgs(false, "python3", "python3-dev"), app("pybuild", "1.0", 24, 3)),
		img("full/python-build-podman", "3.11", podman, base, pkgs(false, "gcc", "make", "libc6-dev"), pkgs(false, "python3", "python3-dev"), app("pybuild", "1.0", 24, 3)),
		// One application layer compressed by GNU gzip, which no Go encoder
		// reproduces, and one left uncompressed.
		img("full/tools", "1", docker, base, pkgs(false, "jq", "file", "less"), withComp(app("tools", "1.0", 24, 3), GzipGNU)),
		img("full/tools-oci", "1", podman, base, pkgs(false, "jq", "file", "less"), withComp(app("tools", "1.0", 24, 3), Uncompressed)),
	)
	return out
}
