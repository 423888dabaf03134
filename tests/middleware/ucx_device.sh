#!/usr/bin/env bash
# UCX sees uroce0: its rc_verbs and ud_verbs transports are listed on
# uroce0:1 by ucx_info -d.  UCX needs /dev/infiniband/uroce0 (made by
# scripts/setup.sh); without it, say so.
set -u
node=/dev/infiniband/uroce0
if [ ! -c "$node" ] || [ ! -r "$node" ] || [ ! -w "$node" ]; then
	echo "FAIL: $node is not a character device this user may open:" \
		"UCX ignores uroce0 without it; run: sudo scripts/setup.sh"
	exit 1
fi
out=$(timeout 60 env ${UROCE_TEST_PRELOAD:+LD_PRELOAD=$UROCE_TEST_PRELOAD} \
	ucx_info -d 2>&1)
status=$?
for tl in rc_verbs ud_verbs; do
	if ! printf '%s\n' "$out" |
		awk -v tl="$tl" '/Memory domain: uroce0$/ { md = 1 }
				 md && $0 ~ "Transport: " tl "$" { t = 1 }
				 t && /Device: uroce0:1$/ { found = 1; exit }
				 END { exit !found }'; then
		echo "FAIL: ucx_info -d lists no $tl on uroce0:1 (status $status)"
		printf '%s\n' "$out" | tail -n 40
		exit 1
	fi
done
echo "ucx_info: rc_verbs and ud_verbs on uroce0:1"
