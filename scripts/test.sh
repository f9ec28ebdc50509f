#!/usr/bin/env bash
# scripts/test.sh — THE test command of cairn; CI runs exactly this (.ci/run).
#
# It installs what the tests need when missing (Debian packages, pinned Go-built
# client tools under .cache/bin), checks formatting and vet, builds bin/cairn,
# starts the servers tests need (by PID, stopped by a trap) and runs every Go test.
#
# Environment:
#   CI=true                 client tests fail instead of skipping when a tool is missing
#   CAIRN_SKIP_INSTALL=1    do not install anything (use what is on PATH)
#   CAIRN_NO_RACE=1         run ./internal/... without -race
#   CAIRN_TEST_PKGS="..."   packages to test instead of ./... (e.g. ./test/clients/)
#   CAIRN_SERVICES="..."    servers to start (default "minio fakegcs azurite redis ldap hydra";
#                           "" starts none, for runs that do not need them)
#   CAIRN_FUZZTIME=5s       after the tests, fuzz every Fuzz* target for this long
#                           each (a go test -fuzztime value: 5s, 30s, 1000x);
#                           0 skips fuzzing. Unset with CAIRN_TEST_PKGS: skipped.
#                           Unset, a target whose func line follows a
#                           "//cairn:fuzztime 30s" line gets that time instead.
set -euo pipefail

cd "$(dirname "${BASH_SOURCE[0]}")/.."
ROOT=$PWD
CACHE=$ROOT/.cache
TOOLBIN=$CACHE/bin
mkdir -p "$TOOLBIN"
export PATH="$TOOLBIN:$PATH"

# shellcheck source=scripts/install-tools.sh
source "$ROOT/scripts/install-tools.sh"

log() { printf '==> %s\n' "$*" >&2; }
now() { date +%s; }
T0=$(now)
step_t=$T0
step() {
	local t
	t=$(now)
	log "$* (+$((t - step_t))s since previous step, $((t - T0))s total)"
	step_t=$t
}

# --- servers the tests need ---------------------------------------------------
# Each server has a script scripts/services/<name>.sh defining start_<name> and
# stop_<name> (and optionally install_<name>). start_<name> records the PID it
# started in SERVER_PIDS[<name>] and exports the env vars its tests read
# (CAIRN_TEST_S3_*, CAIRN_TEST_GCS_*, CAIRN_TEST_AZURE_*, ...); stop_servers,
# run by the EXIT trap, calls stop_<name> for each, which stops exactly that
# PID, never by name. To add a server: write scripts/services/<name>.sh, add
# <name> to the default of CAIRN_SERVICES below, and list the commands its
# script needs in SERVICE_NEEDS.
declare -A SERVER_PIDS=()
SERVER_LOGS=$CACHE/server-logs
mkdir -p "$SERVER_LOGS"
REPO=$ROOT # the service scripts' name for the repo root
read -r -a SERVERS <<<"${CAIRN_SERVICES-minio fakegcs azurite redis ldap hydra}"
# Commands a service script runs, as "command:debian-package" pairs; a
# missing command is installed with apt.
declare -A SERVICE_NEEDS=(
	[minio]="curl:curl python3:python3"
	[fakegcs]="curl:curl"
	[azurite]="node:nodejs npm:npm"
	[redis]="redis-server:redis-server"
	[ldap]="slapd:slapd ldapadd:ldap-utils openssl:openssl"
	# hydra builds with cgo (its in-memory store is SQLite): gcc and libc headers.
	[hydra]="gcc:gcc gcc:libc6-dev"
)
# shellcheck source=scripts/services/lib.sh
source "$ROOT/scripts/services/lib.sh"
for _s in "${SERVERS[@]}"; do
	# shellcheck source=/dev/null
	source "$ROOT/scripts/services/$_s.sh"
done
unset _s

# wait_port HOST PORT SECONDS — wait until a TCP port accepts connections.
wait_port() {
	local host=$1 port=$2 secs=$3 i
	for ((i = 0; i < secs * 10; i++)); do
		if (exec 3<>"/dev/tcp/$host/$port") 2>/dev/null; then
			return 0
		fi
		sleep 0.1
	done
	log "timeout waiting for $host:$port"
	return 1
}

# stop_pid NAME — stop the recorded PID of a server whose script has no
# stop_<name> (SIGTERM, SIGKILL after 10 s).
stop_pid() {
	svc_stop "${SERVER_PIDS[$1]:-}"
	unset "SERVER_PIDS[$1]"
}

start_servers() {
	local s
	for s in "${SERVERS[@]}"; do
		"start_$s"
	done
}

stop_servers() {
	local s
	for s in "${!SERVER_PIDS[@]}"; do
		if declare -F "stop_$s" >/dev/null; then
			"stop_$s"
		else
			stop_pid "$s"
		fi
	done
}
trap stop_servers EXIT
trap 'exit 130' INT TERM

# --- steps ----------------------------------------------------------------------
# build_tools builds every pinned Go tool: the clients, and the servers whose
# scripts can build ahead of starting (install_<name>, or their private
# _<name>_install).
build_tools() {
	local srv
	install_go_tools
	for srv in "${SERVERS[@]}"; do
		if declare -F "install_$srv" >/dev/null; then
			"install_$srv"
		elif [[ $srv != azurite ]] && declare -F "_${srv}_install" >/dev/null; then
			"_${srv}_install" # azurite's needs npm, which apt may be installing
		fi
	done
}

install_all() {
	command -v go >/dev/null || { log "go is not on PATH"; return 1; }
	if [[ ${CAIRN_SKIP_INSTALL:-} != 1 ]]; then
		local srv need
		for srv in "${SERVERS[@]}"; do
			for need in ${SERVICE_NEEDS[$srv]:-}; do
				command -v "${need%%:*}" >/dev/null || DEBIAN_PACKAGES+=("${need#*:}")
			done
		done
		# -race needs cgo, hence a C compiler.
		if [[ ${CAIRN_NO_RACE:-} != 1 ]] && ! command -v gcc >/dev/null; then
			DEBIAN_PACKAGES+=(gcc libc6-dev)
		fi
		# apt waits on the network while go builds use the CPU: run both at once.
		local gopid
		build_tools &
		gopid=$!
		install_debian_packages || { wait "$gopid" || true; return 1; }
		wait "$gopid"
	fi
	log "$(go version); $(tool_versions)"
}

check_format() {
	# Every Go file git would track (committed or new, not ignored), testdata aside.
	local files=() f unformatted
	while IFS= read -r f; do
		[[ -f $f ]] && files+=("$f")
	done < <(git ls-files --cached --others --exclude-standard -- '*.go' ':!:**/testdata/**' | sort -u)
	if ((${#files[@]} > 0)); then
		unformatted=$(gofmt -l "${files[@]}")
		if [[ -n $unformatted ]]; then
			log "gofmt would change these files (run gofmt -w):"
			printf '%s\n' "$unformatted" >&2
			return 1
		fi
	fi
	go vet ./...
}

build() {
	mkdir -p bin
	go build -o bin/cairn ./cmd/cairn
	export CAIRN_BIN=$ROOT/bin/cairn
}

run_tests() {
	local race=(-race)
	[[ ${CAIRN_NO_RACE:-} == 1 ]] && race=()
	# A package's tests end at -timeout, a hang guard only: a loaded 2-core
	# machine took 8 minutes for test/dedup, near go test's default 10.
	local timeout=(-timeout 45m)
	if [[ -n ${CAIRN_TEST_PKGS:-} ]]; then
		# shellcheck disable=SC2086
		go test -count=1 "${timeout[@]}" $CAIRN_TEST_PKGS
		return
	fi
	# The race detector slows tests several-fold; it runs where the concurrency
	# lives (internal/...), the end-to-end packages run without it.
	local internal others rc=0
	internal=$(go list ./internal/...)
	others=$(go list ./... | grep -v "^$(go list -m)/internal/" || true)
	# shellcheck disable=SC2086
	go test -count=1 "${timeout[@]}" "${race[@]}" $internal || rc=1
	if [[ -n $others ]]; then
		# Artifacts the tests keep (test/webui's screenshots) go to
		# test-artifacts/_artifacts/.
		rm -rf test-artifacts && mkdir -p test-artifacts
		# shellcheck disable=SC2086
		go test -count=1 "${timeout[@]}" -artifacts -outputdir "$PWD/test-artifacts" $others || rc=1
	fi
	return $rc
}

# fuzz_targets prints "<package> <target> [<fuzztime>]" for every fuzz
# target, found in the test files go list reports, so a new target runs
# without editing this script. The fuzztime is that of a
# "//cairn:fuzztime <value>" line right above the target's func line: a
# target whose every input rebuilds megabytes runs a few inputs a second,
# and 5 s would fuzz it barely at all.
fuzz_targets() {
	local pkg dir files f
	while read -r pkg dir files; do
		for f in $files; do
			awk -v pkg="$pkg" '
				/^\/\/cairn:fuzztime / { ft = $2; next }
				match($0, /^func Fuzz[A-Za-z0-9_]*\([A-Za-z_][A-Za-z0-9_]* \*testing\.F\)/) {
					name = substr($0, 6); sub(/\(.*/, "", name)
					print pkg, name, ft
				}
				{ ft = "" }' "$dir/$f"
		done
	done < <(go list -f '{{.ImportPath}} {{.Dir}} {{join .TestGoFiles " "}} {{join .XTestGoFiles " "}}' ./...)
}

# run_fuzz fuzzes each target for CAIRN_FUZZTIME (go test -fuzz takes one
# package and one target per run). Their seed corpora already ran as tests;
# this looks for new failures for a bounded time. Minimizing an interesting
# input is capped so that it cannot eat a short run. An input that fails is
# written to the package's testdata/fuzz/<target>/ and printed: commit it
# (with the fix) to make it a seed.
# fuzz_one fuzzes one target. Go 1.26's fuzz coordinator can fail a run
# with a bare "context deadline exceeded" at the -fuzztime boundary when a
# worker is slow to stop on a busy machine (go.dev/issue/75804, fixed in Go
# 1.27): no input is written, nothing reproduces. Such a run is retried
# once; a run that writes a failing input fails at once.
fuzz_one() {
	local pkg=$1 target=$2 fuzztime=$3 out try
	out=$(mktemp)
	for try in 1 2; do
		if go test -run='^$' -fuzz="^$target\$" -fuzztime="$fuzztime" -fuzzminimizetime=5s "$pkg" </dev/null 2>&1 | tee "$out"; then
			rm -f "$out"
			return 0
		fi
		if grep -q 'Failing input written to' "$out" || ! tail -n 5 "$out" | grep -q 'context deadline exceeded'; then
			break
		fi
		log "fuzz $target: the coordinator's deadline race, no failing input (try $try)"
	done
	rm -f "$out"
	return 1
}

run_fuzz() {
	local fuzztime=${CAIRN_FUZZTIME:-5s} rc=0 n=0 pkg target own t
	local -a failed=()
	while read -r pkg target own; do
		n=$((n + 1))
		t=$fuzztime
		if [[ -z ${CAIRN_FUZZTIME:-} && -n $own ]]; then
			t=$own
		fi
		log "fuzz $target ($pkg) for $t"
		if ! fuzz_one "$pkg" "$target" "$t"; then
			failed+=("$pkg $target")
			rc=1
		fi
	done < <(fuzz_targets)
	log "fuzzed $n targets for $fuzztime each (or their own time); ${#failed[@]} failed"
	if ((rc != 0)); then
		printf '  failed: %s\n' "${failed[@]}" >&2
		git status --porcelain --untracked-files=all -- '**/testdata/fuzz/**' | while read -r _ f; do
			log "new failing input $f:"
			cat "$f" >&2
		done
	fi
	return $rc
}

main() {
	if [[ ${CI:-} == true ]]; then
		export CAIRN_REQUIRE_CLIENTS=1
	fi
	install_all
	step "tools ready"
	check_format
	step "gofmt and go vet clean"
	build
	step "built bin/cairn"
	start_servers
	step "servers started"
	local rc=0
	run_tests || rc=$?
	step "tests done"
	# A zero -fuzztime would fuzz forever: any zero spelling skips.
	if [[ ! ${CAIRN_FUZZTIME:-} =~ ^0+[a-z]*$ && (-z ${CAIRN_TEST_PKGS:-} || -n ${CAIRN_FUZZTIME:-}) ]]; then
		run_fuzz || rc=$?
		step "fuzzing done"
	fi
	if ((rc != 0)); then
		log "FAIL (exit $rc) after $(($(now) - T0))s"
		return "$rc"
	fi
	log "PASS after $(($(now) - T0))s"
}

main "$@"
