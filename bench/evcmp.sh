#!/bin/bash
# Event-driven RPC settings compared in turn: bench/evrpc over uroce with
# UROCE_WAIT_POLL_US set to each value given, on both paths, and the same
# RPC over TCP, one run of each per round, and the medians of the rounds.
# A VM's speed drifts within minutes; only runs taken in turn compare.
#
#   bench/evcmp.sh [rounds] [poll-us...]     (default: 5 rounds, 0 and 50)
#
# Uses build/ (BUILD=<dir> for another; bench/run.sh builds evrpc there).
# Each round: 3,000 requests of 1 x 64 B and 1,000 of 8 x 64 KiB.
set -uo pipefail

root=$(cd "$(dirname "$0")/.." && pwd)
build=${BUILD:-$root/build}
evrpc=$build/bench/evrpc
rounds=${1:-5}
shift $(($# > 0 ? 1 : 0))
polls=("$@")
[ ${#polls[@]} -gt 0 ] || polls=(0 50)
[ -x "$evrpc" ] || { echo "no $evrpc: run bench/run.sh or build target evrpc" >&2; exit 1; }

# run <label> <evrpc args...>: one line, "<label> median_us=... p99_us=..."
run() {
	local label=$1
	shift
	echo "$label $("$evrpc" "$@" 2>&1 | grep -o 'median_us=.*')"
}

for ((r = 0; r < rounds; r++)); do
	for shm in 1 0; do
		for p in "${polls[@]}"; do
			export LD_LIBRARY_PATH=$build/lib UROCE_SHM=$shm UROCE_WAIT_POLL_US=$p
			run "shm=$shm,poll=$p,1x64" verbs -n 3000
			run "shm=$shm,poll=$p,8x64K" verbs -n 1000 -q 8 -s 65536
		done
	done
	unset LD_LIBRARY_PATH UROCE_SHM UROCE_WAIT_POLL_US
	run "tcp,1x64" tcp -n 3000
	run "tcp,8x64K" tcp -n 1000 -q 8 -s 65536
done | awk '
	{ k = $1; if (!(k in n)) order[++keys] = k
	  for (i = 2; i <= NF; i++) { split($i, f, "="); v[k, f[1], ++n[k, f[1]]] = f[2] }
	  n[k] = 1 }
	function med(k, f,   m, i, j, t, a) {
		m = n[k, f]; if (!m) return "-"
		for (i = 1; i <= m; i++) a[i] = v[k, f, i] + 0
		for (i = 2; i <= m; i++) for (j = i; j > 1 && a[j - 1] > a[j]; j--) { t = a[j]; a[j] = a[j - 1]; a[j - 1] = t }
		return a[int((m + 1) / 2)] }
	END {
		printf "%-22s %10s %10s %10s %12s\n", "setting", "median_us", "p99_us", "rps", "cpu_us/req"
		for (i = 1; i <= keys; i++) { k = order[i]
			printf "%-22s %10s %10s %10s %12s\n", k, med(k, "median_us"), med(k, "p99_us"), med(k, "rps"), med(k, "cpu_us_per_req") } }'
