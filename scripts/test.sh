#!/usr/bin/env bash
# Builds uroce twice, plain (build/) and with AddressSanitizer +
# UndefinedBehaviorSanitizer (build-asan/), and runs the whole ctest suite in
# each.  Both builds are tested even if the first fails; the exit status is
# non-zero if either did.
set -euo pipefail
cd "$(dirname "$0")/.."

# build_and_test <dir> [cmake options...]
build_and_test() {
	local dir=$1
	shift
	echo "=== $dir: configure, build, test"
	cmake -S . -B "$dir" -DCMAKE_BUILD_TYPE=RelWithDebInfo "$@" &&
		cmake --build "$dir" -j "$(nproc)" &&
		(cd "$dir" && ctest --output-on-failure)
}

status=0
build_and_test build -DUROCE_SANITIZE=OFF || status=1
build_and_test build-asan -DUROCE_SANITIZE=ON || status=1
if [ "$status" -eq 0 ]; then
	echo "=== all tests passed in build/ and build-asan/"
else
	echo "=== FAILED (see above)" >&2
fi
exit "$status"
