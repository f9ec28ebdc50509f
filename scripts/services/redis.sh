# shellcheck shell=bash
# scripts/services/redis.sh — a Redis server for the Redis metadata store's tests.
# Sourced by scripts/test.sh (or by hand):
#
#   REPO=/work/main; source scripts/services/redis.sh
#   start_redis && go test ./internal/meta/; stop_redis
#
#   start_redis  runs the Debian package's redis-server (apt-get install
#                redis-server; test.sh installs it), after checking that its
#                major version is $REDIS_MAJOR, on a free loopback port with no
#                persistence and its working dir in a temp dir, waits until it
#                answers PING and exports CAIRN_TEST_REDIS_ADDR (host:port).
#   stop_redis   stops the PID start_redis started (never by name) and removes
#                the temp dir.
#
# The pin is by major version: Debian's exact versions leave the mirrors with
# each security update, and the store needs nothing newer than Redis 7.0.

REDIS_MAJOR=7
REDIS_PID=
REDIS_DIR=

# shellcheck source=scripts/services/lib.sh
source "${BASH_SOURCE[0]%/*}/lib.sh"

_redis_log() { printf '==> redis: %s\n' "$*" >&2; }

# _redis_ping PORT — the server on PORT answers PING (bash's /dev/tcp, so no
# redis-cli is needed).
_redis_ping() {
	(
		exec 3<>"/dev/tcp/127.0.0.1/$1" || exit 1
		printf 'PING\r\n' >&3
		IFS= read -r -t 2 reply <&3 || exit 1
		[[ $reply == +PONG* ]]
	) 2>/dev/null
}

# _redis_check_version prints the server's version when its major is REDIS_MAJOR.
_redis_check_version() {
	local out version
	out=$(redis-server --version) || return 1
	version=${out#*v=}
	version=${version%% *}
	if [[ ${version%%.*} != "$REDIS_MAJOR" ]]; then
		_redis_log "redis-server is version '$version' ($(command -v redis-server)); the tests pin major version $REDIS_MAJOR.x"
		return 1
	fi
	echo "$version"
}

# _redis_exec PORT — redis-server in the foreground on PORT. --save "" and
# --appendonly no: nothing on disk; --dir: where it would go.
_redis_exec() {
	exec redis-server --port "$1" --bind 127.0.0.1 --save "" --appendonly no \
		--dir "$REDIS_DIR" --daemonize no
}

start_redis() {
	local version log
	if ! command -v redis-server >/dev/null; then
		_redis_log "redis-server not found (apt-get install redis-server)"
		return 1
	fi
	version=$(_redis_check_version) || return 1
	REDIS_DIR=$(mktemp -d "${TMPDIR:-/tmp}/cairn-redis.XXXXXX") || return 1
	log=${SERVER_LOGS:-$REDIS_DIR}/redis.log
	if ! svc_start_on_free_port redis REDIS_PID 1 "$log" 30 _redis_exec _redis_ping; then
		_redis_log "failed to start"
		stop_redis
		return 1
	fi
	export CAIRN_TEST_REDIS_ADDR=127.0.0.1:${SVC_PORTS[0]}
	_redis_log "redis $version (pid $REDIS_PID) at $CAIRN_TEST_REDIS_ADDR"
}

stop_redis() {
	svc_stop "$REDIS_PID"
	svc_record redis
	REDIS_PID=
	if [[ -n $REDIS_DIR ]]; then
		rm -rf "$REDIS_DIR"
	fi
	REDIS_DIR=
	unset CAIRN_TEST_REDIS_ADDR
}
