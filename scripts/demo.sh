#!/usr/bin/env bash
# Builds uroce if needed and runs tools/uroce_demo over it: an RC server and
# client in two processes on loopback, latency then bandwidth.
# Arguments go to uroce_demo: -n round trips, -t seconds per bandwidth run,
# -m path MTU.
set -euo pipefail
cd "$(dirname "$0")/.."

[ -f build/CMakeCache.txt ] || cmake -S . -B build -DCMAKE_BUILD_TYPE=RelWithDebInfo
cmake --build build -j "$(nproc)"
# The demo links against the system libibverbs; this makes it load uroce's.
LD_LIBRARY_PATH="$PWD/build/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" \
	exec build/tools/uroce_demo "$@"
