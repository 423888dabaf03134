#!/usr/bin/env bash
# Loss recovery on a loaded machine: Debian's perftest over uroce's UDP path
# (UROCE_SHM=0) between two processes of this host, with 0 and then HOGS
# busy loops competing for the CPUs.  Prints a markdown table of what both
# processes' uroce counted (UROCE_DEBUG=1 prints the counters as a process
# exits): loss probes (tail probes among them, and those found spurious),
# go-backs (retransmits), ACK timeouts, the duplicates receivers got, and
# the datagrams the kernel dropped for full socket buffers (/proc/net/snmp,
# the whole host).  On loopback only those drops lose anything: every
# other go-back is spurious.
#
#   bench/loaded.sh [build directory, default build]
set -uo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
build=$(realpath -m -- "${1:-$root/build}")
cd "$root"

HOGS=2
LIMIT=60		# seconds any one process may run
PORT=28900		# perftest's TCP port (bench/run.sh uses 28700 and up)
# tool, options: a stream of 64 KiB WRITEs, of 4 KiB SENDs, a ping-pong
RUNS=("ib_write_bw -s 65536 -n 20000" "ib_send_bw -s 4096 -n 100000"
      "ib_send_lat -s 64 -n 20000")
COUNTERS=(loss_probes tail_probes spurious_probes retransmits timeouts rx_duplicate)

[ -f "$build/CMakeCache.txt" ] ||
	cmake -S . -B "$build" -DCMAKE_BUILD_TYPE=RelWithDebInfo >&2 || exit 1
cmake --build "$build" -j "$(nproc)" --target ibverbs mlx5_stub efa_stub >&2 ||
	exit 1
export LD_LIBRARY_PATH="$build/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
export UROCE_SHM=0 UROCE_DEBUG=1

tmp=$(mktemp -d)
pids=()
cleanup() {
	[ ${#pids[@]} -eq 0 ] || kill "${pids[@]}" 2>/dev/null
	wait
	rm -rf "$tmp"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

# the kernel's UDP receive-buffer drops so far, IPv4 and IPv6
rcvbuf_errors() {
	awk '$1 == "Udp:" && !h { for (i = 2; i <= NF; i++) if ($i == "RcvbufErrors") c = i; h = 1; next }
	     $1 == "Udp:" { n += $c }
	     $1 == "Udp6RcvbufErrors" { n += $2 }
	     END { print n + 0 }' /proc/net/snmp /proc/net/snmp6
}

listening() {
	local hex
	hex=$(printf '%04X' "$1")
	awk -v p=":$hex" '$2 ~ p"$" && $4 == "0A" { found = 1 }
			  END { exit !found }' /proc/net/tcp /proc/net/tcp6
}

# sum <counter> <files...>: the counter's values in uroce's exit lines
sum() {
	local name=$1
	shift
	awk -v n="$name" '$1 == "uroce:" && $4 == n { s += $5 } END { print s + 0 }' "$@"
}

echo "| run | hogs | result | loss_probes | tail_probes | spurious_probes | retransmits | timeouts | rx_duplicate | kernel drops |"
echo "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|"
for run in "${RUNS[@]}"; do
	for hogs in 0 $HOGS; do
		hog_pids=()
		for ((h = 0; h < hogs; h++)); do
			timeout $LIMIT sh -c 'while :; do :; done' &
			hog_pids+=($!)
		done
		while listening $PORT; do PORT=$((PORT + 1)); done
		echo "  $run (hogs $hogs)" >&2
		drops0=$(rcvbuf_errors)
		# shellcheck disable=SC2086
		timeout -k 5 $LIMIT $run -x 0 -p $PORT >"$tmp/server" 2>&1 &
		pids=($!)
		for ((i = 0; i < 100; i++)); do
			listening $PORT && break
			sleep 0.05
		done
		# shellcheck disable=SC2086
		timeout -k 5 $LIMIT $run -x 0 -p $PORT 127.0.0.1 >"$tmp/client" 2>&1
		status=$?
		wait "${pids[0]}" || status=$((status ? status : $?))
		pids=()
		kill "${hog_pids[@]}" 2>/dev/null
		wait "${hog_pids[@]}" 2>/dev/null
		drops=$(($(rcvbuf_errors) - drops0))
		# the client's result row: BW average (MiB/s) or t_typical (us)
		size=$(awk '{ for (i = 1; i <= NF; i++) if ($i == "-s") print $(i + 1) }' <<<"$run")
		case $run in
		*_lat*) col=5 unit=us ;;
		*) col=4 unit=MiB/s ;;
		esac
		result=$(awk -v s="$size" -v c=$col '$1 == s && NF >= c { print $c " '"$unit"'" }' "$tmp/client")
		[ $status -eq 0 ] && [ -n "$result" ] || result="failed ($status)"
		row="| $run | $hogs | $result |"
		for c in "${COUNTERS[@]}"; do
			row+=" $(sum "$c" "$tmp/server" "$tmp/client") |"
		done
		echo "$row $drops |"
		PORT=$((PORT + 1))
	done
done
