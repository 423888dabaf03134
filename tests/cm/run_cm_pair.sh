#!/usr/bin/env bash
# Runs an unmodified rdma_cm program (rdmacm-utils, perftest -R, qperf -cm1,
# fio's rdma engine) over uroce as server and client on loopback, and
# checks it.
#
#   run_cm_pair.sh [options] --server SERVER ARGS... --client CLIENT ARGS...
#   run_cm_pair.sh [options] --single COMMAND ARGS...
#
# The server starts first.  Most of these servers listen only on an rdma_cm
# port, which no kernel table shows, so the client may come too early: a
# connect to an rdma_cm port nobody listens on is refused at once (uroce, as
# the Linux CM, answers the REQ with a REJ, reason 8: RDMA_CM_EVENT_REJECTED,
# or ECONNREFUSED from a synchronous rdma_connect).  So:
#   * with --cm-port P, the script first waits (at most 10 s) until a uroce
#     process holds P's service ID (uroce binds the abstract AF_UNIX name
#     @uroce-sid.4791.<service ID> for it; purely a shortcut);
#   * the client then runs, and is run again, up to --retry times 0.2 s
#     apart, while its output matches a --retry-on pattern (default: a
#     REJECTED event with status 8, or "Connection refused").
# With --tcp-port P the server is ready once it listens on TCP port P
# (perftest and qperf have a TCP control port); the client is still retried
# as above.
# Every process runs under timeout.  The check passes if both exit with the
# expected status (0 unless told) and their output matches each expected
# pattern and none of the refused ones.  Each client run again and each
# pair run anew is noted, with the line that called for it and the test's
# name ($UROCE_TEST_NAME), in the file $UROCE_TEST_RETRY_LOG names (both
# from ctest; scripts/test.sh sums the notes up), so that a race that comes
# more often than it used to shows in every run of the suite.
#
#   --timeout S        seconds each process may run (default 60)
#   --cm-port P        the server's rdma_cm port (see above)
#   --ps PS            its port space, tcp (default) or udp
#   --tcp-port P       the server's TCP control port
#   --retry N          attempts of the client (default 30)
#   --retry-on RE      extended regex of a client output that means "the
#                      server is not listening yet" (repeatable; replaces
#                      the default)
#   --restart N        run server and client anew, up to N rounds in all,
#   --restart-on RE    while the client's output matches RE (repeatable): a
#                      race the program loses and cannot recover from
#                      itself (see perftest below)
#   --persistent       the server never exits by itself (qperf): stop it
#                      with SIGTERM once the client is done; its status is
#                      not checked
#   --expect RE        the client's (or the single process's) output must
#                      match RE; repeatable
#   --expect-server RE the server's output must match RE; repeatable
#   --expect-both RE   both outputs must match RE; repeatable
#   --refuse RE        neither output may match RE; repeatable
#   --status N         the client's (single process's) expected exit status:
#                      a number, or "fail" for any nonzero status but
#                      124-127 (a timeout) and 129-192 (a signal)
#   --within S         the client (single process) must end within S seconds
#
# The environment (LD_LIBRARY_PATH=<build>/lib) comes from ctest.
set -u

limit=60
cm_port=
ps=tcp
tcp_port=
retries=30
retry_on=()
persistent=0
restarts=1
restart_on=()
expect=()
expect_server=()
expect_both=()
refuse=()
want_status=0
within=
mode=
server=()
client=()
while [ $# -gt 0 ]; do
	case $1 in
	--timeout) limit=$2; shift 2 ;;
	--cm-port) cm_port=$2; shift 2 ;;
	--ps) ps=$2; shift 2 ;;
	--tcp-port) tcp_port=$2; shift 2 ;;
	--retry) retries=$2; shift 2 ;;
	--retry-on) retry_on+=("$2"); shift 2 ;;
	--persistent) persistent=1; shift ;;
	--restart) restarts=$2; shift 2 ;;
	--restart-on) restart_on+=("$2"); shift 2 ;;
	--expect) expect+=("$2"); shift 2 ;;
	--expect-server) expect_server+=("$2"); shift 2 ;;
	--expect-both) expect_both+=("$2"); shift 2 ;;
	--refuse) refuse+=("$2"); shift 2 ;;
	--status) want_status=$2; shift 2 ;;
	--within) within=$2; shift 2 ;;
	--single) mode=single; shift; client=("$@"); break ;;
	--server)
		mode=pair
		shift
		while [ $# -gt 0 ] && [ "$1" != --client ]; do
			server+=("$1")
			shift
		done
		[ $# -gt 0 ] && shift
		client=("$@")
		break
		;;
	*) echo "run_cm_pair.sh: unknown option $1" >&2; exit 2 ;;
	esac
done
if [ -z "$mode" ] || [ ${#client[@]} -eq 0 ] ||
   { [ "$mode" = pair ] && [ ${#server[@]} -eq 0 ]; }; then
	echo "run_cm_pair.sh: need --server ... --client ... or --single ..." >&2
	exit 2
fi
if [ ${#retry_on[@]} -eq 0 ]; then
	retry_on=('REJECTED.*(error|status)[:=]? *8([^0-9]|$)'
		  'Connection refused')
fi

# Line-buffered output: a server that is stopped (or hangs) still shows
# what it printed.
if command -v stdbuf >/dev/null; then
	linebuf=(stdbuf -oL -eL)
else
	linebuf=()
fi

# A sanitized build's runtimes (UROCE_TEST_PRELOAD, from ctest) go into the
# programs under test only, not into a script (bash crashes under
# ThreadSanitizer's): a script preloads them into its programs itself.
# preload_for <command>: $preload, the prefix that preloads them, if any
preload_for() {
	preload=()
	if [ -n "${UROCE_TEST_PRELOAD:-}" ] &&
	   [ "$(head -c 2 "$(command -v "$1")" 2>/dev/null)" != '#!' ]; then
		preload=(env "LD_PRELOAD=$UROCE_TEST_PRELOAD")
	fi
}

dir=$(mktemp -d)
server_pid=
cleanup() {
	if [ -n "$server_pid" ]; then
		kill "$server_pid" 2>/dev/null
		wait "$server_pid" 2>/dev/null
	fi
	rm -rf "$dir"
}
trap cleanup EXIT

# tcp_listening <port>: a TCP socket listens on it (from the kernel's tables:
# connecting would use up a server's one accept)
tcp_listening() {
	local hex
	hex=$(printf '%04X' "$1")
	awk -v p=":$hex" '$2 ~ p"$" && $4 == "0A" { found = 1 }
			  END { exit !found }' /proc/net/tcp /proc/net/tcp6
}

# cm_claimed <port>: a uroce process holds the service ID of the port
cm_claimed() {
	local space sid
	case $ps in
	tcp) space=0106 ;;
	udp) space=0111 ;;
	*) space=$ps ;;
	esac
	sid=$(printf '00000000%s%04x' "$space" "$1")
	grep -q "@uroce-sid\.[0-9]*\.$sid\$" /proc/net/unix
}

# note_retry <what> <output file> <patterns...>: one line in the retry log:
# the test, what was run again, and the first output line that asked for it
note_retry() {
	local what=$1 out=$2 re line=
	shift 2
	[ -n "${UROCE_TEST_RETRY_LOG:-}" ] || return 0
	for re in "$@"; do
		line=$(grep -E -m 1 -- "$re" "$out") && break
	done
	printf '%s\t%s\t%s\n' "${UROCE_TEST_NAME:-${client[0]}}" "$what" "$line" \
		>>"$UROCE_TEST_RETRY_LOG"
}

# any_match <file> <patterns...>
any_match() {
	local out=$1 re
	shift
	for re in "$@"; do
		grep -Eq -- "$re" "$out" && return 0
	done
	return 1
}

failed=0
# check <role> <status> <want status> <output file> <patterns...>
check() {
	local role=$1 status=$2 want=$3 out=$4 re
	shift 4
	if [ "$want" = fail ]; then
		# 124-127: timeout or not run; 129-192: killed by a signal
		# (a crash); 255 is exit(-1), a clean failure
		if [ "$status" -eq 0 ] ||
		   { [ "$status" -ge 124 ] && [ "$status" -le 127 ]; } ||
		   { [ "$status" -gt 128 ] && [ "$status" -le 192 ]; }; then
			echo "FAIL: $role exited with status $status, want a" \
				"clean failure"
			failed=1
		fi
	elif [ "$status" -ne "$want" ]; then
		echo "FAIL: $role exited with status $status, want $want" \
			"$( [ "$status" -eq 124 ] && echo "(timed out after ${limit}s)")"
		failed=1
	fi
	for re in "$@"; do
		if ! grep -Eq -- "$re" "$out"; then
			echo "FAIL: $role output does not match: $re"
			failed=1
		fi
	done
	for re in "${refuse[@]}"; do
		if grep -Eq -- "$re" "$out"; then
			echo "FAIL: $role output matches: $re"
			grep -E -m 3 -- "$re" "$out" | sed 's/^/    /'
			failed=1
		fi
	done
}

# run_timed <output file> <command...>: status in $status, seconds in $secs
run_timed() {
	local out=$1 t0=$EPOCHREALTIME
	shift
	preload_for "$1"
	timeout -k 5 "$limit" "${preload[@]}" "${linebuf[@]}" "$@" >"$out" 2>&1
	status=$?
	secs=$(awk -v a="$t0" -v b="$EPOCHREALTIME" 'BEGIN { printf "%.1f", b - a }')
}

check_within() {
	if [ -n "$within" ] &&
	   awk -v s="$secs" -v w="$within" 'BEGIN { exit !(s > w) }'; then
		echo "FAIL: $1 took ${secs}s, more than ${within}s"
		failed=1
	fi
}

if [ "$mode" = single ]; then
	run_timed "$dir/out" "${client[@]}"
	check "${client[0]}" "$status" "$want_status" "$dir/out" \
		"${expect[@]}" "${expect_both[@]}"
	check_within "${client[0]}"
	if [ "$failed" -ne 0 ]; then
		echo "---- output (status $status, ${secs}s) of: ${client[*]}"
		cat "$dir/out"
	fi
	exit "$failed"
fi

if [ -n "$tcp_port" ] && tcp_listening "$tcp_port"; then
	echo "FAIL: TCP port $tcp_port is already in use; the test needs it"
	exit 1
fi
if [ -n "$cm_port" ] && cm_claimed "$cm_port"; then
	echo "FAIL: rdma_cm port $cm_port ($ps) is already held; the test" \
		"needs it"
	exit 1
fi
for ((round = 1; ; round++)); do
	preload_for "${server[0]}"
	timeout -k 5 "$limit" "${preload[@]}" "${linebuf[@]}" "${server[@]}" \
		>"$dir/server" 2>&1 &
	server_pid=$!

	# Bounded wait (10 s, or 20 s for a TCP port) for the server to get ready.
	ready=1
	if [ -n "$tcp_port" ]; then
		ready=0
		for ((i = 0; i < 200; i++)); do
			tcp_listening "$tcp_port" && { ready=1; break; }
			kill -0 "$server_pid" 2>/dev/null || break
			sleep 0.1
		done
	elif [ -n "$cm_port" ]; then
		ready=0
		for ((i = 0; i < 100; i++)); do
			cm_claimed "$cm_port" && { ready=1; break; }
			kill -0 "$server_pid" 2>/dev/null || break
			sleep 0.1
		done
		# claimed at rdma_bind_addr: give the server the moment to
		# rdma_listen too (a REJ would still be retried)
		[ "$ready" -eq 1 ] && sleep 0.5
	fi
	if ! kill -0 "$server_pid" 2>/dev/null; then
		wait "$server_pid"
		echo "FAIL: the server exited (status $?) before any client came"
		server_pid=
		echo "---- server output: ${server[*]}"
		cat "$dir/server"
		exit 1
	fi
	if [ "$ready" -eq 0 ]; then
		if [ -n "$tcp_port" ]; then
			echo "FAIL: server never listened on TCP port $tcp_port"
			echo "---- server output: ${server[*]}"
			cat "$dir/server"
			exit 1
		fi
		# not fatal: the client's retries still cover it
		echo "NOTE: no uroce process claimed rdma_cm port $cm_port in 10 s"
	fi

	attempt=0
	while :; do
		attempt=$((attempt + 1))
		run_timed "$dir/client" "${client[@]}"
		# (some clients, such as cmtime, exit 0 after a refusal: the output
		# decides)
		any_match "$dir/client" "${retry_on[@]}" || break
		[ "$attempt" -ge "$retries" ] && break
		kill -0 "$server_pid" 2>/dev/null || break
		cp "$dir/client" "$dir/client.refused"
		note_retry "client run again" "$dir/client" "${retry_on[@]}"
		sleep 0.2
	done
	client_status=$status
	if [ "$attempt" -gt 1 ]; then
		echo "NOTE: the client ran $attempt times (refused while the server" \
			"was not listening yet)"
	fi
	server_status=0
	if [ "$client_status" -ne 0 ] || [ "$persistent" -eq 1 ]; then
		# A client that failed leaves the server waiting for it; stop it.
		kill "$server_pid" 2>/dev/null
	fi
	wait "$server_pid"
	server_status=$?
	server_pid=
	if [ "$persistent" -eq 1 ]; then
		# stopped by us (SIGTERM: 143) or by itself; anything else is a crash
		case $server_status in
		0 | 143) server_status=0 ;;
		esac
	fi
	# the pair lost a race the program cannot recover from: run it anew
	if [ "$round" -lt "$restarts" ] && [ ${#restart_on[@]} -gt 0 ] &&
	   any_match "$dir/client" "${restart_on[@]}"; then
		echo "NOTE: round $round: the client lost its race with the" \
			"server (matched --restart-on); both run again"
		note_retry "pair run anew" "$dir/client" "${restart_on[@]}"
		sed 's/^/    | /' "$dir/client" | head -20
		sleep 0.5
		continue
	fi
	break
done

check server "$server_status" 0 "$dir/server" "${expect_server[@]}" \
	"${expect_both[@]}"
check client "$client_status" "$want_status" "$dir/client" "${expect[@]}" \
	"${expect_both[@]}"
check_within client
if [ "$failed" -ne 0 ]; then
	echo "---- server output (status $server_status): ${server[*]}"
	cat "$dir/server"
	if [ -f "$dir/client.refused" ]; then
		echo "---- the last refused client attempt:"
		cat "$dir/client.refused"
	fi
	echo "---- client output (status $client_status, ${secs}s," \
		"attempt $attempt): ${client[*]}"
	cat "$dir/client"
fi
exit "$failed"
