# scripts/install-tools.sh — sourced by scripts/test.sh; also runnable alone
# (`bash scripts/install-tools.sh`) to install the client tools the tests use.
#
# Debian packages come from apt; Go tools are built at pinned versions into
# .cache/bin, and rebuilt only when the pinned version changes (stamp files).

# Pinned versions: "module@version package-dir". Bump here; the stamp files
# make the next run rebuild.
CRANE_SRC="github.com/google/go-containerregistry@v0.20.6 ./cmd/crane"
REGCTL_SRC="github.com/regclient/regclient@v0.11.7 ./cmd/regctl"
ORAS_SRC="oras.land/oras@v1.2.3 ./cmd/oras"
# helm lints and renders deploy/helm/cairn (test/deploy).
HELM_SRC="helm.sh/helm/v3@v3.22.0 ./cmd/helm"
# distribution's registry is the other side of replication (test/replicate).
# Its module zip has a vendor directory without the vendored code: built with
# -mod=mod (a third field: extra go build flags).
DISTRIBUTION_SRC="github.com/distribution/distribution/v3@v3.0.0 ./cmd/registry -mod=mod"
# Ory Hydra is the OIDC provider of test/identity (scripts/services/hydra.sh),
# built into .cache/bin by install_hydra below: its in-memory store (DSN=memory) is SQLite
# through mattn/go-sqlite3, which needs cgo (gcc) and the sqlite build tag,
# as Hydra's own release builds use. Measured on 2 cores: 2 min with its
# modules already downloaded; 7.5 min from nothing (no module or build
# cache) while other builds shared the cores.
HYDRA_SRC="github.com/ory/hydra/v2@v2.3.0 . -tags=sqlite,sqlite_omit_load_extension"

# Debian packages: skopeo and podman; uidmap for podman's user namespace setup;
# golang-github-containers-common (a podman/skopeo dependency) ships
# /etc/containers/policy.json and registries.conf; chromium renders the web
# page in test/webui (headless); test/deploy checks deploy/cairn.service with
# systemd-analyze (systemd) and puts ca-certificates in cairn's image.
DEBIAN_PACKAGES=(skopeo podman uidmap golang-github-containers-common chromium systemd ca-certificates)

_as_root() {
	if [[ $(id -u) == 0 ]]; then
		"$@"
	elif command -v sudo >/dev/null; then
		sudo "$@"
	else
		echo "need root (or sudo) to run: $*" >&2
		return 1
	fi
}

install_debian_packages() {
	local missing=() p
	for p in "${DEBIAN_PACKAGES[@]}"; do
		dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' || missing+=("$p")
	done
	# The dedup dataset builder (internal/bench/dataset) downloads debs with
	# apt-get download, which needs package lists; fresh images ship none.
	if ! compgen -G '/var/lib/apt/lists/*_Packages*' >/dev/null; then
		echo "==> apt-get update (no package lists yet)" >&2
		_as_root env DEBIAN_FRONTEND=noninteractive apt-get update -qq
	fi
	((${#missing[@]} == 0)) && return 0
	echo "==> apt-get install ${missing[*]}" >&2
	_as_root env DEBIAN_FRONTEND=noninteractive apt-get update -qq
	_as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}"
}

# install_go_tool NAME "MODULE@VERSION ./PKGDIR [GOFLAGS...]" — build a tool into .cache/bin
# unless that exact version is already built there.
#
# It builds inside the downloaded module (not `go install pkg@version`): go
# install also asks the proxy for the module's version list to look for a
# deprecation notice, and the proxy refuses that list for some modules
# (oras.land/oras answers 403), which makes go install fail.
install_go_tool() {
	local name=$1 src=$2 bindir=${TOOLBIN:?} stamp mod pkgdir flags dir
	stamp=$bindir/.$name.version
	if [[ -x $bindir/$name && -f $stamp && $(<"$stamp") == "$src" ]]; then
		return 0
	fi
	read -r mod pkgdir flags <<<"$src"
	echo "==> build $name from $mod $pkgdir" >&2
	# GOFLAGS from the environment (e.g. -mod=vendor) must not leak into
	# building a foreign module.
	dir=$(cd / && GOFLAGS= go mod download -json "$mod" | sed -n 's/^[[:space:]]*"Dir": "\(.*\)",$/\1/p')
	[[ -n $dir && -d $dir ]] || { echo "go mod download $mod: no module directory" >&2; return 1; }
	(cd "$dir" && GOFLAGS="-trimpath $flags" CGO_ENABLED=0 go build -o "$bindir/$name" "$pkgdir") || return 1
	printf '%s' "$src" >"$stamp"
}

# install_hydra — build Hydra ($HYDRA_SRC) into .cache/bin unless that version
# is there. Not install_go_tool: Hydra's go.mod replaces its API client
# (github.com/ory/hydra-client-go/v2) with ./internal/httpclient, a nested
# module that the module zip leaves out, so the build runs in a copy of the
# module whose go.mod drops that replace and takes the client version it
# requires (v2.2.1) from the proxy; and SQLite needs cgo.
install_hydra() {
	local bindir=${TOOLBIN:?} stamp mod pkgdir flags dir work version rc=0
	stamp=$bindir/.hydra.version
	if [[ -x $bindir/hydra && -f $stamp && $(<"$stamp") == "$HYDRA_SRC" ]]; then
		return 0
	fi
	read -r mod pkgdir flags <<<"$HYDRA_SRC"
	version=${mod##*@}
	# scripts/test.sh builds tools while apt installs packages, gcc among
	# them when missing: wait for it rather than fail.
	for ((rc = 0; rc < 600; rc++)); do
		command -v gcc >/dev/null && break
		sleep 1
	done
	rc=0
	echo "==> build hydra from $mod (cgo, a few minutes the first time)" >&2
	dir=$(cd / && GOFLAGS= go mod download -json "$mod" | sed -n 's/^[[:space:]]*"Dir": "\(.*\)",$/\1/p')
	[[ -n $dir && -d $dir ]] || { echo "go mod download $mod: no module directory" >&2; return 1; }
	work=$(mktemp -d "${TMPDIR:-/tmp}/cairn-hydra-src.XXXXXX") || return 1
	cp -R "$dir/." "$work" && chmod -R u+w "$work" &&
		(cd "$work" && GOFLAGS= go mod edit -dropreplace github.com/ory/hydra-client-go/v2 &&
			GOFLAGS="-trimpath -mod=mod $flags" CGO_ENABLED=1 go build \
				-ldflags "-X github.com/ory/hydra/v2/driver/config.Version=$version" -o "$bindir/hydra" "$pkgdir") || rc=1
	rm -rf "$work"
	((rc == 0)) || return 1
	printf '%s' "$HYDRA_SRC" >"$stamp"
}

install_go_tools() {
	install_go_tool crane "$CRANE_SRC"
	install_go_tool regctl "$REGCTL_SRC"
	install_go_tool oras "$ORAS_SRC"
	install_go_tool helm "$HELM_SRC"
	install_go_tool distribution-registry "$DISTRIBUTION_SRC"
	# Hydra is a server, built when its service is wanted (scripts/test.sh's
	# build_tools calls install_hydra for it; start_hydra too).
}

# tool_versions prints one line naming the client tool versions in use.
tool_versions() {
	local out=() n
	for n in crane regctl oras helm distribution-registry hydra; do
		if [[ -f ${TOOLBIN:?}/.$n.version ]]; then
			out+=("$n $(<"$TOOLBIN/.$n.version")")
		fi
	done
	command -v skopeo >/dev/null && out+=("$(skopeo --version)")
	command -v podman >/dev/null && out+=("$(podman --version)")
	command -v chromium >/dev/null && out+=("$(chromium --version 2>/dev/null)")
	command -v systemd-analyze >/dev/null && out+=("$(systemd-analyze --version | sed -n 1p)")
	local IFS=';'
	printf '%s\n' "${out[*]}"
}

if [[ ${BASH_SOURCE[0]} == "$0" ]]; then
	set -euo pipefail
	cd "$(dirname "${BASH_SOURCE[0]}")/.."
	TOOLBIN=$PWD/.cache/bin
	mkdir -p "$TOOLBIN"
	install_debian_packages
	install_go_tools
fi
