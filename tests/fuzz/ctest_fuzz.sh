#!/usr/bin/env bash
# ctest's fuzz entries: ctest_fuzz.sh replay|run HARNESS SECONDS CRASH_DIR
#   replay: every input of tests/fuzz/corpus/<name> and regressions/<name>
#           once;
#   run:    fuzz for SECONDS from them (new inputs go to a scratch corpus;
#           a crash is kept in CRASH_DIR).
set -euo pipefail
mode=$1 bin=$2 seconds=$3 crashes=$4
name=$(basename "$bin")
src=$(cd "$(dirname "$0")" && pwd)
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
mkdir -p "$crashes"
dirs=()
for d in "$src/corpus/$name" "$src/regressions/$name"; do
	[ -d "$d" ] && dirs+=("$d")
done
# libFuzzer writes new inputs into its first directory: the scratch one.
common=(-timeout=10 -rss_limit_mb=4096 -max_len=16384
	-artifact_prefix="$crashes/$name-" "$work" "${dirs[@]}")
case $mode in
replay) exec "$bin" -runs=0 "${common[@]}" ;;
run) exec "$bin" -max_total_time="$seconds" -print_final_stats=1 \
	"${common[@]}" ;;
*) echo "usage: $0 replay|run HARNESS SECONDS CRASH_DIR" >&2; exit 2 ;;
esac
