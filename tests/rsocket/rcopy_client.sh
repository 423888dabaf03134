#!/usr/bin/env bash
# rcopy's client for run_cm_pair.sh: copies a random file of SIZE bytes to
# the rcopy server on 127.0.0.1 and checks that the copy is the same.
#
#   rcopy_client.sh WORKDIR SIZE PORT
set -eu
dir=$1 size=$2 port=$3
mkdir -p "$dir"
src=$dir/rcopy.$port.src dst=$dir/rcopy.$port.dst
rm -f "$dst"
head -c "$size" /dev/urandom >"$src"
env ${UROCE_TEST_PRELOAD:+LD_PRELOAD=$UROCE_TEST_PRELOAD} \
	rcopy "$src" "127.0.0.1:$dst" -p "$port"
cmp "$src" "$dst"
echo "rcopy_client: $size bytes copied intact"
