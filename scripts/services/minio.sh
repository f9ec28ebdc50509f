# shellcheck shell=bash
# scripts/services/minio.sh — a MinIO server for the s3 driver's tests.
# Sourced by scripts/test.sh; REPO must be set to the repo root.
#
#   start_minio  builds minio at $MINIO_VERSION into $REPO/.cache/bin when that
#                version is not built there yet (several minutes on 2 cores),
#                starts it on a free loopback port with its data in a temp
#                dir, waits for /minio/health/live and exports
#                CAIRN_TEST_S3_ENDPOINT, CAIRN_TEST_S3_ACCESS_KEY,
#                CAIRN_TEST_S3_SECRET_KEY and CAIRN_TEST_S3_REGION.
#   stop_minio   stops the PID start_minio started (never by name) and removes
#                the temp dir.
#
# Tests create their own buckets (with the SDK; no mc client is needed).

# RELEASE.2025-09-07T16-13-09Z as a pseudo-version: MinIO's tags are not
# semver. The module proxy refuses the later RELEASE.2025-10-15T17-29-55Z
# (403), so this is the newest release `go install` can fetch.
MINIO_VERSION=v0.0.0-20250907161309-07c3a429bfed
MINIO_USER=cairn-test
MINIO_PASSWORD=cairn-test-secret
MINIO_PID=
MINIO_DIR=

# shellcheck source=scripts/services/lib.sh
source "${BASH_SOURCE[0]%/*}/lib.sh"

_minio_log() { printf '==> minio: %s\n' "$*" >&2; }

install_minio() {
	local bindir=$REPO/.cache/bin stamp
	stamp=$bindir/.minio.version
	if [[ -x $bindir/minio && -f $stamp && $(<"$stamp") == "$MINIO_VERSION" ]]; then
		return 0
	fi
	_minio_log "building github.com/minio/minio@$MINIO_VERSION into $bindir (takes minutes)"
	mkdir -p "$bindir"
	# Outside the repo, so cairn's go.mod and GOFLAGS play no part.
	(cd / && GOFLAGS=-trimpath CGO_ENABLED=0 GOBIN=$bindir \
		go install "github.com/minio/minio@$MINIO_VERSION") || return 1
	printf '%s' "$MINIO_VERSION" >"$stamp"
}

# _minio_free_ports N prints N distinct loopback TCP ports that are free now.
_minio_free_ports() {
	python3 - "$1" <<'EOF'
import socket, sys
socks = []
for _ in range(int(sys.argv[1])):
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    socks.append(s)
print(" ".join(str(s.getsockname()[1]) for s in socks))
EOF
}

start_minio() {
	: "${REPO:?REPO must be set to the repo root}"
	install_minio || return 1
	local ports port console log
	ports=$(_minio_free_ports 2) || return 1
	read -r port console <<<"$ports"
	MINIO_DIR=$(mktemp -d "${TMPDIR:-/tmp}/cairn-minio.XXXXXX") || return 1
	log=$MINIO_DIR/minio.log
	# MINIO_CI_CD: accept a data dir on the root disk; MINIO_UPDATE=off: no
	# update checks (no network); MINIO_BROWSER=off: no console UI.
	MINIO_ROOT_USER=$MINIO_USER MINIO_ROOT_PASSWORD=$MINIO_PASSWORD \
		MINIO_BROWSER=off MINIO_UPDATE=off MINIO_CI_CD=1 \
		"$REPO/.cache/bin/minio" server "$MINIO_DIR/data" --quiet \
		--address "127.0.0.1:$port" --console-address "127.0.0.1:$console" >"$log" 2>&1 &
	MINIO_PID=$!
	svc_record minio "$MINIO_PID"
	if ! svc_await minio "$MINIO_PID" "$log" 60 curl -fsS -o /dev/null "http://127.0.0.1:$port/minio/health/live"; then
		stop_minio
		return 1
	fi
	export CAIRN_TEST_S3_ENDPOINT=http://127.0.0.1:$port
	export CAIRN_TEST_S3_ACCESS_KEY=$MINIO_USER
	export CAIRN_TEST_S3_SECRET_KEY=$MINIO_PASSWORD
	export CAIRN_TEST_S3_REGION=us-east-1
	_minio_log "minio $MINIO_VERSION (pid $MINIO_PID) at $CAIRN_TEST_S3_ENDPOINT"
}

stop_minio() {
	if [[ -n $MINIO_PID ]]; then
		svc_stop "$MINIO_PID"
		svc_record minio
	fi
	MINIO_PID=
	if [[ -n $MINIO_DIR ]]; then
		rm -rf "$MINIO_DIR"
	fi
	MINIO_DIR=
	unset CAIRN_TEST_S3_ENDPOINT CAIRN_TEST_S3_ACCESS_KEY CAIRN_TEST_S3_SECRET_KEY CAIRN_TEST_S3_REGION
}
