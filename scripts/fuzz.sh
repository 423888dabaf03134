#!/usr/bin/env bash
# Fuzzes uroce: scripts/fuzz.sh SECONDS [HARNESS...]
#
# Builds the libFuzzer harnesses of tests/fuzz (clang, ASan + UBSan) in
# $FUZZ_BUILD (default build-fuzz/) if needed, and runs each one (default:
# all) for SECONDS, as many at once as there are CPUs ($FUZZ_JOBS to
# change).  Each starts from the committed corpus and regression inputs and
# from what earlier runs found, kept in $FUZZ_WORK (default
# /tmp/uroce-fuzz): corpus/<harness>/, logs in logs/, crashing inputs in
# crashes/.  Prints per harness the executions, the coverage (libFuzzer's
# cov: edges and ft: features) and the crashes; the exit status is non-zero
# if there was any.
set -euo pipefail
cd "$(dirname "$0")/.."

all=(fuzz_receive fuzz_mad fuzz_config fuzz_pcap)
if [ $# -lt 1 ] || ! [[ $1 =~ ^[0-9]+$ ]]; then
	echo "usage: $0 SECONDS [${all[*]}]" >&2
	exit 2
fi
seconds=$1
shift
harnesses=("$@")
[ ${#harnesses[@]} -gt 0 ] || harnesses=("${all[@]}")
build=${FUZZ_BUILD:-build-fuzz}
work=${FUZZ_WORK:-/tmp/uroce-fuzz}
jobs=${FUZZ_JOBS:-$(nproc)}

CC=clang cmake -S . -B "$build" -DCMAKE_BUILD_TYPE=RelWithDebInfo \
	-DUROCE_FUZZ=ON >/dev/null
cmake --build "$build" -j "$(nproc)" --target fuzz >/dev/null
mkdir -p "$work/logs" "$work/crashes"
touch "$work/started"

run() {
	local h=$1 dirs=()

	mkdir -p "$work/corpus/$h"
	for d in tests/fuzz/corpus/$h tests/fuzz/regressions/$h; do
		[ -d "$d" ] && dirs+=("$d")
	done
	"$build/tests/fuzz/$h" -max_total_time="$seconds" -print_final_stats=1 \
		-timeout=10 -rss_limit_mb=4096 -max_len=16384 \
		-artifact_prefix="$work/crashes/$h-" \
		"$work/corpus/$h" "${dirs[@]}" >"$work/logs/$h.log" 2>&1 || true
}

echo "fuzzing ${harnesses[*]} for ${seconds}s each, $jobs at a time"
running=0
for h in "${harnesses[@]}"; do
	if [ "$running" -ge "$jobs" ]; then
		wait -n
		running=$((running - 1))
	fi
	run "$h" &
	running=$((running + 1))
done
wait

status=0
total=0
printf '%-14s %14s %8s %8s %8s\n' harness executions cov ft crashes
for h in "${harnesses[@]}"; do
	log=$work/logs/$h.log
	execs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log" | tail -1)
	cov=$(grep -o 'cov: [0-9]* ft: [0-9]*' "$log" | tail -1 || true)
	crashes=$(find "$work/crashes" -name "$h-*" -newer "$work/started" |
		wc -l)
	# a run that ended in a sanitizer report or a failed check
	if grep -qE '^==[0-9]+==ERROR|check failed|runtime error' "$log" &&
		[ "$crashes" -eq 0 ]; then
		crashes=1
	fi
	[ "$crashes" -eq 0 ] || status=1
	total=$((total + ${execs:-0}))
	printf '%-14s %14s %8s %8s %8s\n' "$h" "${execs:-?}" \
		"$(echo "$cov" | awk '{print $2}')" \
		"$(echo "$cov" | awk '{print $4}')" "$crashes"
done
printf '%-14s %14s\n' total "$total"
echo "logs: $work/logs  crashing inputs: $work/crashes"
exit "$status"
