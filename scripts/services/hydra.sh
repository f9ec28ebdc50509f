# shellcheck shell=bash
# scripts/services/hydra.sh — Ory Hydra v2, the OIDC provider of the OIDC
# tests (test/identity). Sourced by scripts/test.sh (or by hand):
#
#   REPO=/work/main; source scripts/services/hydra.sh
#   start_hydra && go test -run OIDC ./test/identity/; stop_hydra
#
#   install_hydra  (scripts/install-tools.sh) builds the pinned Hydra into
#                  .cache/bin once per version.
#   start_hydra    runs `hydra serve all --dev` with the in-memory store
#                  (DSN=memory) on two free loopback ports, waits until its
#                  admin API is ready and exports CAIRN_TEST_HYDRA_PUBLIC and
#                  CAIRN_TEST_HYDRA_ADMIN (URLs). Its issuer is the public URL;
#                  its access tokens are JWTs (a password cairn takes too) with
#                  the login app's claims at the top level, as in ID tokens.
#   stop_hydra     stops the PID start_hydra started (never by name).
#
# Hydra sends browsers to a login and a consent app, which the tests serve
# themselves (internal/testutil/hydratest), each on a port of its own: so
# Hydra names them on a host that resolves nowhere, http://login.hydratest,
# and each test's client maps that host to its own app (a dialer for Go's
# http.Client, --host-resolver-rules for Chromium). Keep HYDRA_LOGIN_BASE in
# step with hydratest.LoginBase.

HYDRA_LOGIN_BASE=http://login.hydratest
HYDRA_PID=
HYDRA_DIR=

# shellcheck source=scripts/services/lib.sh
source "${BASH_SOURCE[0]%/*}/lib.sh"

_hydra_log() { printf '==> hydra: %s\n' "$*" >&2; }

# _hydra_ready PORT — the admin API on the loopback PORT says it is ready
# (200 from /health/ready; bash's /dev/tcp, so no curl is needed).
_hydra_ready() {
	(
		exec 3<>"/dev/tcp/127.0.0.1/$1" || exit 1
		printf 'GET /health/ready HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n' >&3
		IFS= read -r -t 5 status <&3 || exit 1
		[[ $status == "HTTP/1."?" 200"* ]]
	) 2>/dev/null
}

# _hydra_exec PUBLIC ADMIN — `hydra serve all` on the ports PUBLIC and ADMIN,
# in HYDRA_DIR, with the in-memory store. HYDRA_BIN and HYDRA_SECRET are
# start_hydra's.
_hydra_exec() {
	local public=$1 admin=$2
	cd "$HYDRA_DIR" || exit 1
	export DSN=memory SECRETS_SYSTEM=$HYDRA_SECRET LOG_LEVEL=warn \
		SERVE_PUBLIC_HOST=127.0.0.1 SERVE_PUBLIC_PORT=$public \
		SERVE_ADMIN_HOST=127.0.0.1 SERVE_ADMIN_PORT=$admin \
		URLS_SELF_ISSUER=http://127.0.0.1:$public \
		URLS_LOGIN=$HYDRA_LOGIN_BASE/login URLS_CONSENT=$HYDRA_LOGIN_BASE/consent \
		URLS_ERROR=$HYDRA_LOGIN_BASE/error \
		OIDC_SUBJECT_IDENTIFIERS_SUPPORTED_TYPES=public \
		STRATEGIES_ACCESS_TOKEN=jwt OAUTH2_ALLOWED_TOP_LEVEL_CLAIMS=preferred_username,groups
	exec "$HYDRA_BIN" serve all --dev --sqa-opt-out
}

# _hydra_admin_ready PUBLIC ADMIN — the admin API on ADMIN is ready.
_hydra_admin_ready() {
	_hydra_ready "$2"
}

start_hydra() {
	local HYDRA_BIN=${TOOLBIN:-${REPO:?REPO must be the repo root}/.cache/bin}/hydra
	local HYDRA_SECRET log
	if [[ ! -x $HYDRA_BIN ]]; then
		if declare -F install_hydra >/dev/null; then
			TOOLBIN=${TOOLBIN:-$REPO/.cache/bin} install_hydra || return 1
		else
			_hydra_log "$HYDRA_BIN not found (bash scripts/install-tools.sh builds it)"
			return 1
		fi
	fi
	HYDRA_DIR=$(mktemp -d "${TMPDIR:-/tmp}/cairn-hydra.XXXXXX") || return 1
	log=${SERVER_LOGS:-$HYDRA_DIR}/hydra.log
	HYDRA_SECRET=$(head -c 24 /dev/urandom | od -An -tx1 | tr -d ' \n')
	if ! svc_start_on_free_port hydra HYDRA_PID 2 "$log" 60 _hydra_exec _hydra_admin_ready; then
		_hydra_log "failed to start"
		stop_hydra
		return 1
	fi
	export CAIRN_TEST_HYDRA_PUBLIC=http://127.0.0.1:${SVC_PORTS[0]}
	export CAIRN_TEST_HYDRA_ADMIN=http://127.0.0.1:${SVC_PORTS[1]}
	_hydra_log "$("$HYDRA_BIN" version | sed -n 's/^Version: *//p') (pid $HYDRA_PID): issuer $CAIRN_TEST_HYDRA_PUBLIC, admin $CAIRN_TEST_HYDRA_ADMIN"
}

stop_hydra() {
	svc_stop "$HYDRA_PID"
	svc_record hydra
	HYDRA_PID=
	if [[ -n $HYDRA_DIR ]]; then
		rm -rf "$HYDRA_DIR"
	fi
	HYDRA_DIR=
	unset CAIRN_TEST_HYDRA_PUBLIC CAIRN_TEST_HYDRA_ADMIN
}
