#!/usr/bin/env bash
# Builds uroce twice, plain (build/) and with AddressSanitizer +
# UndefinedBehaviorSanitizer (build-asan/), and runs the whole ctest suite in
# each; then builds the libFuzzer harnesses with clang (build-fuzz/) and
# runs their ctest entries (label fuzz: the committed inputs, and a bounded
# time of fuzzing each), and builds with ThreadSanitizer (build-tsan/) to
# run the suite again where the engine thread meets the application's and
# the connection manager's, but for the middleware (UCX crashes in its own
# code under TSan's runtime, and pyverbs' suite outlasts any budget) and
# the 1000-QP ib_send_bw, whose retry budget TSan's slowdown exhausts;
# both run in the other two builds.  Every build is tested even if an
# earlier one fails; the exit status is non-zero if any did.
set -euo pipefail
cd "$(dirname "$0")/.."

# retry_summary <dir>: the programs the suite ran again because they lost
# a race of their own (tests/CMakeLists.txt), counted per test; the log is
# emptied for the next run
retry_summary() {
	local log=$1/Testing/retries.log
	if [ -s "$log" ]; then
		echo "=== $1: runs repeated after a lost race (count, test, what," \
			"first such line):"
		sort "$log" | uniq -c | sort -rn | sed 's/^/    /'
	else
		echo "=== $1: no test needed a repeated run"
	fi
	rm -f "$log"
}

# build_and_test <dir> [cmake options...]
build_and_test() {
	local dir=$1 status
	shift
	echo "=== $dir: configure, build, test"
	rm -f "$dir/Testing/retries.log"
	cmake -S . -B "$dir" -DCMAKE_BUILD_TYPE=RelWithDebInfo "$@" &&
		cmake --build "$dir" -j "$(nproc)" &&
		(cd "$dir" && ctest --output-on-failure)
	status=$?
	retry_summary "$dir"
	return "$status"
}

status=0
build_and_test build -DUROCE_SANITIZE=OFF || status=1
build_and_test build-asan -DUROCE_SANITIZE=ON || status=1
echo "=== build-fuzz: configure, build, fuzz"
CC=clang cmake -S . -B build-fuzz -DCMAKE_BUILD_TYPE=RelWithDebInfo \
	-DUROCE_FUZZ=ON &&
	cmake --build build-fuzz -j "$(nproc)" --target fuzz &&
	(cd build-fuzz && ctest -L fuzz -j "$(nproc)" --output-on-failure) ||
	status=1
echo "=== build-tsan: configure, build, test (not the middleware)"
rm -f build-tsan/Testing/retries.log
cmake -S . -B build-tsan -DCMAKE_BUILD_TYPE=RelWithDebInfo -DUROCE_TSAN=ON &&
	cmake --build build-tsan -j "$(nproc)" &&
	(cd build-tsan && ctest -LE middleware \
		-E '^tools\.ib_send_bw\.1000qps$' --output-on-failure) ||
	status=1
retry_summary build-tsan
if [ "$status" -eq 0 ]; then
	echo "=== all tests passed in build/, build-asan/, build-fuzz/ and build-tsan/"
else
	echo "=== FAILED (see above)" >&2
fi
exit "$status"
