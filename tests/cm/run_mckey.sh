#!/usr/bin/env bash
# Runs rdmacm-utils' mckey over uroce: receiving processes join a group
# and wait for datagrams, then one sending process joins and sends.
#
#   run_mckey.sh [--receivers N] [--timeout S] -m GROUP -b ADDR
#                [--recv-args "ARGS"] [--send-args "ARGS"]
#                [--recv-in NETNS --recv-bind ADDR --send-in NETNS
#                 --send-bind ADDR]
#
# --recv-in/--send-in run the receivers/the sender in a network namespace
# (ip netns exec), bound to --recv-bind/--send-bind instead of -b.
#
# mckey's receivers only join a group (no rdma_cm port shows them ready), so
# the sender starts once every receiver printed "receiving data transfers".
# The check passes when every process exits with status 0 after "data
# transfers complete".  The environment comes from ctest.
set -u

receivers=1
limit=30
group=
bind=
recv_args=
send_args=
recv_in=()
send_in=()
recv_bind=
send_bind=
while [ $# -gt 0 ]; do
	case $1 in
	--receivers) receivers=$2; shift 2 ;;
	--timeout) limit=$2; shift 2 ;;
	-m) group=$2; shift 2 ;;
	-b) bind=$2; shift 2 ;;
	--recv-args) recv_args=$2; shift 2 ;;
	--send-args) send_args=$2; shift 2 ;;
	--recv-in) recv_in=(ip netns exec "$2"); shift 2 ;;
	--send-in) send_in=(ip netns exec "$2"); shift 2 ;;
	--recv-bind) recv_bind=$2; shift 2 ;;
	--send-bind) send_bind=$2; shift 2 ;;
	*) echo "run_mckey.sh: unknown option $1" >&2; exit 2 ;;
	esac
done
recv_bind=${recv_bind:-$bind}
send_bind=${send_bind:-$bind}
if [ -z "$group" ] || [ -z "$recv_bind" ] || [ -z "$send_bind" ]; then
	echo "run_mckey.sh: -m GROUP and -b ADDR are required" >&2
	exit 2
fi

# The receivers' output line-buffered (stdbuf's library), behind a
# sanitized build's runtimes (UROCE_TEST_PRELOAD, from ctest), which must
# come first: stdbuf itself would put its library ahead of them.
stdbuf_lib=
for d in /usr/libexec/coreutils /usr/lib/coreutils; do
	[ -e "$d/libstdbuf.so" ] && stdbuf_lib=$d/libstdbuf.so && break
done
if [ -z "$stdbuf_lib" ]; then
	echo "run_mckey.sh: coreutils' libstdbuf.so not found" >&2
	exit 2
fi
sanitizers=${UROCE_TEST_PRELOAD:+$UROCE_TEST_PRELOAD:}

work=$(mktemp -d)
pids=()
cleanup() {
	for p in "${pids[@]}"; do
		kill "$p" 2>/dev/null
	done
	rm -rf "$work"
}
trap cleanup EXIT

# shellcheck disable=SC2086 # the argument strings are word lists
for i in $(seq "$receivers"); do
	"${recv_in[@]}" timeout "$limit" env _STDBUF_O=L \
		LD_PRELOAD="$sanitizers$stdbuf_lib" \
		mckey -m "$group" -b "$recv_bind" $recv_args \
		>"$work/recv$i" 2>&1 &
	pids+=($!)
done
ready=0
for _ in $(seq 100); do
	ready=0
	for i in $(seq "$receivers"); do
		grep -q "receiving data transfers" "$work/recv$i" &&
			ready=$((ready + 1))
	done
	[ "$ready" -eq "$receivers" ] && break
	sleep 0.1
done
fail=0
# report WHO STATUS FILE: prints the output; a failure unless the process
# ended well after its transfers
report() {
	echo "--- $1 (status $2)"
	cat "$3"
	if [ "$2" -ne 0 ] || ! grep -q "data transfers complete" "$3"; then
		fail=1
	fi
}
if [ "$ready" -ne "$receivers" ]; then
	echo "FAIL: $((receivers - ready)) receiver(s) never joined"
	fail=1
else
	# shellcheck disable=SC2086
	"${send_in[@]}" timeout "$limit" \
		env ${UROCE_TEST_PRELOAD:+LD_PRELOAD=$UROCE_TEST_PRELOAD} \
		mckey -m "$group" -b "$send_bind" -s $send_args \
		>"$work/send" 2>&1
	report sender $? "$work/send"
fi
for i in $(seq "$receivers"); do
	wait "${pids[$((i - 1))]}"
	report "receiver $i" $? "$work/recv$i"
done
pids=()
[ "$fail" -eq 0 ] && echo PASS || echo FAIL
exit "$fail"
