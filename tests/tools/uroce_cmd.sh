#!/usr/bin/env bash
# The `uroce` command against a running ib_write_bw pair: stat (text, JSON,
# -w), capture on and off (the file decodes as RoCE and stops growing), and
# fault injection on and off.  Who may do it is multiuser.uroce_cmd's
# business (it needs other uids).
#
#   uroce_cmd.sh UROCE_BINARY PORT
set -euo pipefail

uroce=$1 port=$2
here=$(cd "$(dirname "$0")" && pwd)
# A sanitized build's runtimes (UROCE_TEST_PRELOAD, from ctest) go only
# into ib_write_bw, which loads its instrumented libraries (pgrep and
# tshark can hang with them preloaded).
preload=${UROCE_TEST_PRELOAD:+LD_PRELOAD=$UROCE_TEST_PRELOAD}
tmp=$(mktemp -d)
cleanup() {
	kill $(jobs -p) 2>/dev/null || true
	wait 2>/dev/null || true
	rm -rf "$tmp"
}
trap cleanup EXIT
fail() {
	echo "FAIL: $*" >&2
	for f in "$tmp"/server.log "$tmp"/client.log; do
		[ -f "$f" ] && { echo "--- $f"; tail -n 60 "$f"; } >&2
	done
	exit 1
}

timeout 60 env $preload ib_write_bw -x 0 -p "$port" -D 8 \
	>"$tmp/server.log" 2>&1 &
sleep 0.5
timeout 60 env $preload ib_write_bw -x 0 -p "$port" -D 8 127.0.0.1 \
	>"$tmp/client.log" 2>&1 &
client_timeout=$!

# both ends up, each with its RC QP ready towards the other
for _ in $(seq 100); do
	"$uroce" stat --json >"$tmp/stat.json"
	/usr/bin/python3 "$here/uroce_cmd_pair.py" "$tmp/stat.json" && break
	sleep 0.1
done
/usr/bin/python3 "$here/uroce_cmd_pair.py" "$tmp/stat.json" ||
	fail "uroce stat --json did not show the pair"
writer=$(pgrep -P "$client_timeout" ib_write_bw) || fail "no client"
reader=$(/usr/bin/python3 "$here/uroce_cmd_pair.py" "$tmp/stat.json" \
	--other "$writer")

"$uroce" stat "$writer" >"$tmp/stat.txt"
grep -Eq "^pid $writer  ib_write_bw  uid [0-9]+  port " "$tmp/stat.txt" ||
	fail "no process line"
grep -Eq "^  0x[0-9a-f]+ +RC +RTS +127\.0\.0\.1 " "$tmp/stat.txt" ||
	fail "no QP line"
[ "$("$uroce" stat -w -n 3 -i 0.1 "$writer" | grep -c "^pid $writer ")" -eq 3 ] ||
	fail "stat -w -n 3 did not refresh three times"

"$uroce" capture "$writer" "$tmp/cap-%p.pcap" || fail "capture refused"
sleep 0.5
"$uroce" stat "$writer" | grep -q "capture $tmp/cap-$writer.pcap" ||
	fail "stat does not show the capture"
"$uroce" capture "$writer" stop || fail "capture stop refused"
size=$(stat -c %s "$tmp/cap-$writer.pcap")
sleep 0.3
[ "$(stat -c %s "$tmp/cap-$writer.pcap")" -eq "$size" ] ||
	fail "the capture grew after it was stopped"
frames=$(tshark -r "$tmp/cap-$writer.pcap" -Y infiniband.bth 2>/dev/null |
	wc -l)
[ "$frames" -gt 10 ] || fail "the capture holds $frames RoCE frames"

"$uroce" faults "$reader" drop=0.01,seed=5 || fail "faults refused"
"$uroce" stat "$reader" | grep -q "faults drop=0.01,seed=5" ||
	fail "stat does not show the faults"
if "$uroce" faults "$reader" bogus=1 2>"$tmp/err"; then
	fail "a bad SPEC was taken"
fi
grep -q "unknown key" "$tmp/err" || fail "no reason for the bad SPEC"
"$uroce" faults "$reader" off || fail "faults off refused"
if "$uroce" stat 999999999 2>"$tmp/err"; then
	fail "a missing process answered"
fi
grep -q "process 999999999" "$tmp/err" || fail "no message for a missing pid"

wait "$client_timeout" || fail "the client failed"
grep -Eq "^ 65536 " "$tmp/client.log" || fail "the transfer did not finish"
echo "PASS: uroce stat/capture/faults ($frames frames captured)"
