# shellcheck shell=bash
# scripts/services/lib.sh — what every service script needs: whether a PID
# still runs, stopping exactly that PID, recording it in the caller's
# SERVER_PIDS, and a free loopback port. Each service script sources it, so
# that one sourced by hand works too; scripts/test.sh sources it as well.

# svc_alive PID — true while PID runs; an exited child that was not yet
# waited for is a zombie, which kill -0 would still report as alive.
svc_alive() {
	local st
	st=$(ps -o stat= -p "$1" 2>/dev/null) && [[ $st != Z* ]]
}

# svc_stop PID — SIGTERM, SIGKILL after 10 s, then reap it. Never by name:
# other test runs may have servers of the same name.
svc_stop() {
	local pid=$1 i
	[[ -n $pid ]] || return 0
	kill -TERM "$pid" 2>/dev/null || true
	for ((i = 0; i < 100; i++)); do
		svc_alive "$pid" || break
		sleep 0.1
	done
	if svc_alive "$pid"; then
		kill -KILL "$pid" 2>/dev/null || true
	fi
	wait "$pid" 2>/dev/null || true
}

# svc_record NAME [PID] — SERVER_PIDS[NAME]=PID, or with no PID forget NAME,
# when the caller keeps that array (scripts/test.sh does; a shell that
# sourced a service script by hand need not).
svc_record() {
	declare -p SERVER_PIDS 2>/dev/null | grep -q '^declare -A' || return 0
	if [[ -n ${2:-} ]]; then
		SERVER_PIDS[$1]=$2
	else
		unset "SERVER_PIDS[$1]"
	fi
}

# svc_free_port — print a loopback TCP port on which nothing listens now.
svc_free_port() {
	local port i
	for ((i = 0; i < 100; i++)); do
		port=$((20000 + RANDOM % 40000))
		if ! (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null; then
			echo "$port"
			return 0
		fi
	done
	printf '==> no free loopback port found\n' >&2
	return 1
}

# svc_listening PORT — something accepts connections on the loopback PORT.
svc_listening() {
	(exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null
}

# svc_await NAME PID LOG SECONDS CMD [ARG...] — wait until CMD succeeds
# (its stderr dropped: it fails until the server is up). Fails, showing the
# end of LOG, when PID exits first or SECONDS pass.
svc_await() {
	local name=$1 pid=$2 log=$3 secs=$4 i
	shift 4
	for ((i = 0; i < secs * 10; i++)); do
		if ! svc_alive "$pid"; then
			printf '==> %s: exited during startup; log:\n' "$name" >&2
			tail -n 50 "$log" >&2
			return 1
		fi
		if "$@" 2>/dev/null; then
			return 0
		fi
		sleep 0.1
	done
	printf '==> %s: no answer after %d s; log:\n' "$name" "$secs" >&2
	tail -n 50 "$log" >&2
	return 1
}
