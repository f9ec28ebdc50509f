# shellcheck shell=bash
# scripts/services/lib.sh — what every service script needs: whether a PID
# still runs, stopping exactly that PID, recording it in the caller's
# SERVER_PIDS, a free loopback port, and starting a server on free ports until
# it answers. Each service script sources it, so that one sourced by hand
# works too; scripts/test.sh sources it as well.

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

# svc_start_on_free_port NAME PIDVAR NPORTS LOG SECONDS START READY — start a
# server on NPORTS distinct free loopback ports and wait until it answers.
#   START PORT...  runs the server in the foreground; it must exec it last, so
#                  that the PID recorded is the server's own (stopped by that
#                  PID, never by name). Its output goes to LOG.
#   READY PORT...  succeeds once the server answers (its stderr dropped).
# The PID is put in the variable named PIDVAR as soon as the server starts (so
# that stop_NAME stops it even when startup is cut short) and recorded as
# SERVER_PIDS[NAME]. A port found free can be taken before the server binds
# it: when the server exits saying "address already in use", it starts again
# on other ports, three tries in all. On success the ports are in the array
# SVC_PORTS, in START's order. Fails, showing the end of LOG, when the server
# exits otherwise or gives no answer within SECONDS; a server that still runs
# is left to the caller's stop_NAME, its PID in PIDVAR.
svc_start_on_free_port() {
	# Prefixed names: START and READY see the caller's locals (bash scopes
	# dynamically), which these must not hide.
	local _svc_name=$1 _svc_pidvar=$2 _svc_nports=$3 _svc_log=$4 _svc_secs=$5
	local _svc_start=$6 _svc_ready=$7 _svc_try _svc_i _svc_port _svc_pid
	for ((_svc_try = 0; _svc_try < 3; _svc_try++)); do
		SVC_PORTS=()
		for ((_svc_i = 0; _svc_i < _svc_nports; _svc_i++)); do
			_svc_port=$(svc_free_port) || return 1
			# Two picks may coincide: then pick again (as one try).
			[[ " ${SVC_PORTS[*]} " != *" $_svc_port "* ]] || continue 2
			SVC_PORTS+=("$_svc_port")
		done
		"$_svc_start" "${SVC_PORTS[@]}" >"$_svc_log" 2>&1 &
		_svc_pid=$!
		printf -v "$_svc_pidvar" '%s' "$_svc_pid"
		svc_record "$_svc_name" "$_svc_pid"
		for ((_svc_i = 0; _svc_i < _svc_secs * 10; _svc_i++)); do
			if "$_svc_ready" "${SVC_PORTS[@]}" 2>/dev/null; then
				return 0
			fi
			svc_alive "$_svc_pid" || break
			sleep 0.1
		done
		if svc_alive "$_svc_pid"; then
			printf '==> %s: no answer on 127.0.0.1:%s after %d s; log:\n' \
				"$_svc_name" "${SVC_PORTS[*]}" "$_svc_secs" >&2
			tail -n 50 "$_svc_log" >&2
			return 1
		fi
		wait "$_svc_pid" 2>/dev/null || true
		printf -v "$_svc_pidvar" '%s' ''
		if ! grep -qi 'address already in use' "$_svc_log"; then
			printf '==> %s: exited during startup; log:\n' "$_svc_name" >&2
			tail -n 50 "$_svc_log" >&2
			return 1
		fi
	done
	printf '==> %s: no start on free ports in 3 tries; log:\n' "$_svc_name" >&2
	tail -n 50 "$_svc_log" >&2 2>/dev/null || true
	return 1
}
