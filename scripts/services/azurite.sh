# shellcheck shell=bash
# scripts/services/azurite.sh — Azurite (Azure Storage emulator, blob service
# only) for the azure driver's tests. Sourced by scripts/test.sh; REPO must be
# set to the repo root.
#
#   start_azurite  installs azurite@$AZURITE_VERSION under $REPO/.cache/npm when
#                  missing, starts azurite-blob on a free loopback port with its
#                  data in a temp dir, waits until it answers and exports
#                  CAIRN_TEST_AZURE_ENDPOINT, CAIRN_TEST_AZURE_ACCOUNT and
#                  CAIRN_TEST_AZURE_KEY.
#   stop_azurite   stops the PID start_azurite started (never by name) and
#                  removes the temp dir.

# 3.35.0 is the newest release that runs on Node 20 (3.36 needs Node >= 21).
AZURITE_VERSION=3.35.0
# Azurite's fixed development account and its well-known key (public, in
# Azurite's README); the emulator accepts no other by default.
AZURITE_ACCOUNT=devstoreaccount1
AZURITE_KEY='Eby8vdM02xNOcqFlqUwJPLlmEtlCDXJ1OUzFT50uSRZ6IFsuFq2UVErCz4I6tq/K1SZFPTOtr/KBHBeksoGMGw=='
AZURITE_PID=
AZURITE_DIR=

# shellcheck source=scripts/services/lib.sh
source "${BASH_SOURCE[0]%/*}/lib.sh"

_azurite_log() { printf '==> azurite: %s\n' "$*" >&2; }

_azurite_install() {
	local prefix=$REPO/.cache/npm have
	have=$(node -p "require('$prefix/node_modules/azurite/package.json').version" 2>/dev/null || true)
	if [[ $have == "$AZURITE_VERSION" && -x $prefix/node_modules/.bin/azurite-blob ]]; then
		return 0
	fi
	command -v npm >/dev/null || {
		_azurite_log "npm not found (apt-get install nodejs npm)"
		return 1
	}
	_azurite_log "installing azurite@$AZURITE_VERSION under $prefix"
	mkdir -p "$prefix"
	npm install --prefix "$prefix" --no-audit --no-fund --loglevel=error "azurite@$AZURITE_VERSION" >&2
}

# _azurite_free_port prints a loopback TCP port that is free right now.
_azurite_free_port() {
	node -e 'const s = require("net").createServer();
s.listen(0, "127.0.0.1", () => { console.log(s.address().port); s.close(); });'
}

start_azurite() {
	: "${REPO:?REPO must be set to the repo root}"
	_azurite_install || return 1
	local port log
	port=$(_azurite_free_port) || return 1
	AZURITE_DIR=$(mktemp -d "${TMPDIR:-/tmp}/cairn-azurite.XXXXXX") || return 1
	log=$AZURITE_DIR/azurite.log
	"$REPO/.cache/npm/node_modules/.bin/azurite-blob" \
		--blobHost 127.0.0.1 --blobPort "$port" --location "$AZURITE_DIR/data" \
		--disableTelemetry --skipApiVersionCheck --silent >"$log" 2>&1 &
	AZURITE_PID=$!
	svc_record azurite "$AZURITE_PID"
	# Node starts in about a second; allow 60 s on a loaded machine.
	if ! svc_await azurite "$AZURITE_PID" "$log" 60 svc_listening "$port"; then
		stop_azurite
		return 1
	fi
	export CAIRN_TEST_AZURE_ENDPOINT=http://127.0.0.1:$port/$AZURITE_ACCOUNT
	export CAIRN_TEST_AZURE_ACCOUNT=$AZURITE_ACCOUNT
	export CAIRN_TEST_AZURE_KEY=$AZURITE_KEY
	_azurite_log "azurite@$AZURITE_VERSION (pid $AZURITE_PID) at $CAIRN_TEST_AZURE_ENDPOINT"
}

stop_azurite() {
	if [[ -n $AZURITE_PID ]]; then
		svc_stop "$AZURITE_PID"
		svc_record azurite
	fi
	AZURITE_PID=
	if [[ -n $AZURITE_DIR ]]; then
		rm -rf "$AZURITE_DIR"
	fi
	AZURITE_DIR=
	unset CAIRN_TEST_AZURE_ENDPOINT CAIRN_TEST_AZURE_ACCOUNT CAIRN_TEST_AZURE_KEY
}
