#!/usr/bin/env bash
# Runs a stock verbs tool (ibverbs-utils, perftest) over uroce and checks it.
#
#   run_pair.sh [options] -- COMMAND [ARGS...]
#
# With --port, COMMAND ARGS runs as the server, and once the server listens
# on that TCP port, COMMAND ARGS 127.0.0.1 runs as the client.  Without
# --port, COMMAND ARGS runs once, alone.  Every process runs under timeout.
# The check passes if every process exits with status 0 and its output
# matches each expected pattern.
#
#   --port P         server's TCP port (the tool's own -p P must be in ARGS)
#   --timeout S      seconds each process may run (default 60)
#   --expect RE      extended regex that the client's (or the single
#                    process's) output must match; repeatable
#   --expect-both RE the same, for the server's output too; repeatable
#
# The environment (LD_LIBRARY_PATH=<build>/lib) comes from ctest.
set -u

port=
limit=60
expect=()
expect_both=()
while [ $# -gt 0 ]; do
	case $1 in
	--port) port=$2; shift 2 ;;
	--timeout) limit=$2; shift 2 ;;
	--expect) expect+=("$2"); shift 2 ;;
	--expect-both) expect_both+=("$2"); shift 2 ;;
	--) shift; break ;;
	*) echo "run_pair.sh: unknown option $1" >&2; exit 2 ;;
	esac
done
if [ $# -eq 0 ]; then
	echo "run_pair.sh: no command" >&2
	exit 2
fi

dir=$(mktemp -d)
server_pid=
cleanup() {
	# The server outlives the test only if the client failed early.
	if [ -n "$server_pid" ]; then
		kill "$server_pid" 2>/dev/null
		wait "$server_pid" 2>/dev/null
	fi
	rm -rf "$dir"
}
trap cleanup EXIT

# listening <port>: whether a TCP socket listens on <port>, from the kernel's
# socket tables (connecting to find out would use up the server's one accept).
listening() {
	local hex
	hex=$(printf '%04X' "$1")
	awk -v p=":$hex" '$2 ~ p"$" && $4 == "0A" { found = 1 }
			  END { exit !found }' /proc/net/tcp /proc/net/tcp6
}

# check <role> <status> <output file> <patterns...>
failed=0
check() {
	local role=$1 status=$2 out=$3 re
	shift 3
	if [ "$status" -ne 0 ]; then
		echo "FAIL: $role exited with status $status" \
			"$( [ "$status" -eq 124 ] && echo "(timed out after ${limit}s)")"
		failed=1
	fi
	for re in "$@"; do
		if ! grep -Eq -- "$re" "$out"; then
			echo "FAIL: $role output does not match: $re"
			failed=1
		fi
	done
}

if [ -z "$port" ]; then
	timeout -k 5 "$limit" "$@" >"$dir/out" 2>&1
	status=$?
	check "$1" "$status" "$dir/out" "${expect[@]}" "${expect_both[@]}"
	if [ "$failed" -ne 0 ]; then
		echo "---- output of: $*"
		cat "$dir/out"
	fi
	exit "$failed"
fi

if listening "$port"; then
	echo "FAIL: TCP port $port is already in use; the test needs it" >&2
	exit 1
fi
timeout -k 5 "$limit" "$@" >"$dir/server" 2>&1 &
server_pid=$!

# Bounded wait (20 s) for the server to open its device and listen.
for ((i = 0; i < 200; i++)); do
	listening "$port" && break
	if ! kill -0 "$server_pid" 2>/dev/null; then
		break
	fi
	sleep 0.1
done
if ! listening "$port"; then
	echo "FAIL: server never listened on TCP port $port"
	kill "$server_pid" 2>/dev/null
	wait "$server_pid"
	server_pid=
	echo "---- server output: $*"
	cat "$dir/server"
	exit 1
fi

timeout -k 5 "$limit" "$@" 127.0.0.1 >"$dir/client" 2>&1
client_status=$?
if [ "$client_status" -ne 0 ]; then
	# A client that failed leaves the server waiting for it; stop it.
	kill "$server_pid" 2>/dev/null
fi
wait "$server_pid"
server_status=$?
server_pid=

check server "$server_status" "$dir/server" "${expect_both[@]}"
check client "$client_status" "$dir/client" "${expect[@]}" "${expect_both[@]}"
if [ "$failed" -ne 0 ]; then
	echo "---- server output: $*"
	cat "$dir/server"
	echo "---- client output: $* 127.0.0.1"
	cat "$dir/client"
fi
exit "$failed"
