#!/usr/bin/env bash
# Runs rdma-core's own pyverbs test suite (Debian's python3-pyverbs),
# unmodified, against uroce0 through LD_LIBRARY_PATH=<build>/lib (from
# ctest).  Debian ships the suite gzipped under /usr/share/doc, so it is
# copied and unpacked into WORKDIR first.  Passes when unittest reports no
# failure and no error; prints the pass/skip counts and why tests skipped.
#
#   run_pyverbs.sh WORKDIR
set -u
src=/usr/share/doc/rdma-core/tests
work=$1/pyverbs-tests
if [ ! -f "$src/run_tests.py" ]; then
	echo "run_pyverbs.sh: $src is missing: apt-get install python3-pyverbs" >&2
	exit 1
fi
rm -rf "$work"
mkdir -p "$work"
cp -r "$src"/. "$work"/
find "$work" -name '*.gz' -exec gunzip -f {} +
# Debian's python3 (a pyenv one earlier in PATH has no pyverbs)
out=$work/output
# (a sanitized build's runtimes, UROCE_TEST_PRELOAD, into python only)
timeout 600 env ${UROCE_TEST_PRELOAD:+LD_PRELOAD=$UROCE_TEST_PRELOAD} \
	/usr/bin/python3 "$work/run_tests.py" --dev uroce0 -v >"$out" 2>&1
status=$?
ran=$(grep -a -oE '^Ran [0-9]+ tests' "$out" | grep -oE '[0-9]+')
skipped=$(grep -a -cE "\.\.\. skipped" "$out")
failed=$(grep -a -cE '^(FAIL|ERROR):' "$out")
echo "pyverbs: ${ran:-0} tests ran, $((${ran:-0} - skipped - failed)) passed," \
	"$skipped skipped, $failed failed or in error (exit status $status)"
echo "skipped, by reason:"
grep -a -oE "skipped ['\"].*['\"]$" "$out" | sed 's/[0-9]\+/N/g' | sort |
	uniq -c | sort -rn
if [ "$status" -ne 0 ] || [ "$failed" -ne 0 ] || [ -z "$ran" ]; then
	grep -a -A30 -E '^(FAIL|ERROR):' "$out" | head -200
	tail -n 20 "$out"
	exit 1
fi
