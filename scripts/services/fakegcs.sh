# scripts/services/fakegcs.sh — fake-gcs-server for the gcs storage driver tests.
# Sourced by scripts/test.sh (or by hand):
#
#   REPO=/work/main; source scripts/services/fakegcs.sh
#   start_fakegcs && go test ./internal/storage/driver/gcs/; stop_fakegcs
#
# start_fakegcs builds the pinned fake-gcs-server into $REPO/.cache/bin (once per
# version, recorded in a stamp file), starts it on a free loopback port with an
# in-memory backend, waits until it answers and exports CAIRN_TEST_GCS_ENDPOINT.
# The PID is kept in FAKEGCS_PID (and SERVER_PIDS[fakegcs] when the caller has
# that array); stop_fakegcs stops exactly that PID and removes the temp dir.

FAKEGCS_MODULE="github.com/fsouza/fake-gcs-server@v1.56.1"

# shellcheck source=scripts/services/lib.sh
source "${BASH_SOURCE[0]%/*}/lib.sh"

_fakegcs_log() { printf '==> fakegcs: %s\n' "$*" >&2; }

_fakegcs_install() {
	local bindir=${REPO:?REPO must be the repo root}/.cache/bin
	local stamp=$bindir/.fake-gcs-server.version
	FAKEGCS_BIN=$bindir/fake-gcs-server
	if [[ -x $FAKEGCS_BIN && -f $stamp && $(<"$stamp") == "$FAKEGCS_MODULE" ]]; then
		return 0
	fi
	mkdir -p "$bindir"
	_fakegcs_log "go install $FAKEGCS_MODULE (first run takes a few minutes)"
	# GOFLAGS from the environment (e.g. -mod=vendor) must not leak into
	# building a foreign module; run outside the repo so its go.mod is not used.
	(cd / && GOFLAGS= GOBIN=$bindir CGO_ENABLED=0 go install -trimpath "$FAKEGCS_MODULE") || return 1
	printf '%s' "$FAKEGCS_MODULE" >"$stamp"
}

_fakegcs_free_port() {
	python3 - <<'EOF' 2>/dev/null || echo $((20000 + RANDOM % 20000))
import socket
s = socket.socket()
s.bind(("127.0.0.1", 0))
print(s.getsockname()[1])
s.close()
EOF
}

# _fakegcs_answers URL PORT — the JSON API answers (or, without curl, the
# port accepts connections).
_fakegcs_answers() {
	if command -v curl >/dev/null; then
		curl -fsS -o /dev/null "$1/storage/v1/b" 2>/dev/null
	else
		svc_listening "$2"
	fi
}

start_fakegcs() {
	_fakegcs_install || return 1
	local port url
	port=$(_fakegcs_free_port)
	url=http://127.0.0.1:$port
	FAKEGCS_DIR=$(mktemp -d "${TMPDIR:-/tmp}/cairn-fakegcs.XXXXXX")
	FAKEGCS_LOG=${SERVER_LOGS:-$FAKEGCS_DIR}/fake-gcs-server.log
	# -public-host and -external-url must name the address clients use: the Go
	# client sends object reads (XML API) to the endpoint's host, and resumable
	# uploads continue at the Location the server returns.
	"$FAKEGCS_BIN" -scheme http -host 127.0.0.1 -port "$port" \
		-public-host "127.0.0.1:$port" -external-url "$url" \
		-backend memory -log-level warn >"$FAKEGCS_LOG" 2>&1 &
	FAKEGCS_PID=$!
	svc_record fakegcs "$FAKEGCS_PID"
	if ! svc_await fakegcs "$FAKEGCS_PID" "$FAKEGCS_LOG" 30 _fakegcs_answers "$url" "$port"; then
		stop_fakegcs
		return 1
	fi
	export CAIRN_TEST_GCS_ENDPOINT=$url
	_fakegcs_log "listening on $url (pid $FAKEGCS_PID)"
}

stop_fakegcs() {
	if [[ -n ${FAKEGCS_PID:-} ]]; then
		svc_stop "$FAKEGCS_PID"
		svc_record fakegcs
	fi
	if [[ -n ${FAKEGCS_DIR:-} ]]; then
		rm -rf "$FAKEGCS_DIR"
	fi
	unset FAKEGCS_PID FAKEGCS_DIR CAIRN_TEST_GCS_ENDPOINT
	return 0
}
