#!/usr/bin/env bash
# Several users on one host (README "Every user of a host").  Runs as root,
# which it needs to start processes under other uids (setpriv); every
# process is unprivileged.  Each case has its own UDP port and a service
# directory of its own, so the cases may run in parallel and never meet a
# service the host runs.
#
#   run_multiuser.sh --build DIR --port PORT CASE
#
# CASE:
#   no_service  a second user, with nobody owning the port for everyone,
#               fails to open the device with EADDRINUSE and one line that
#               names the holder and the fix
#   service     with uroced, two users' programs reach each other over RC,
#               UD, rdma_cm and many QPs; the same-host path stays within a
#               user; one user's segment is closed to the others
#   uroce_cmd   `uroce stat|capture|faults` work for a process's owner and
#               root, and for nobody else
#   hostile     a third user can bind neither the port nor another
#               process's source ports, cannot pose as the service, and gets
#               nothing of a pair's traffic by asking the service for its
#               sockets first (it loses them to the victim)
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
build= port= case=
while [ $# -gt 0 ]; do
	case $1 in
	--build) build=$2; shift 2 ;;
	--port) port=$2; shift 2 ;;
	*) case=$1; shift ;;
	esac
done
[ -n "$build" ] && [ -n "$port" ] && [ -n "$case" ] || {
	echo "usage: $0 --build DIR --port PORT CASE" >&2
	exit 2
}
if [ "$(id -u)" -ne 0 ]; then
	echo "multiuser tests must run as root (they start processes as" \
		"other users); CI runs them as root" >&2
	exit 1
fi

# uids no account uses, the service's and three users', each case its own
# (derived from its port), so that ending a case ends every process it
# started and none of another case
base=$((64000 + port % 100 * 4))
SVC=$base A=$((base + 1)) B=$((base + 2)) C=$((base + 3))
LIMIT=60		# seconds any one process may take

# The build may sit where other users cannot read (/root): they get copies.
tmp=$(mktemp -d /tmp/uroce-multiuser.XXXXXX)
chmod 755 "$tmp"
cleanup() {
	for uid in $SVC $A $B $C; do pkill -KILL -u "$uid" || true; done
	wait 2>/dev/null || true
	[ -n "${KEEP:-}" ] || rm -rf "$tmp"
	rm -f /dev/shm/uroce.*."$port".*
}
trap cleanup EXIT
cp -a "$build/lib" "$tmp/lib"
cp "$build/service/uroced" "$tmp/uroced"
cp "$build/tools/uroce" "$tmp/uroce"
chmod -R a+rX "$tmp"
export LD_LIBRARY_PATH=$tmp/lib UROCE_PORT=$port UROCE_SERVICE=$tmp/svc
# A sanitized build's runtimes (UROCE_TEST_PRELOAD, from ctest) go only
# into the stock verbs programs (asv), which load its instrumented
# libraries; bash, pkill, python and the like run as they are.
sanitizers=${UROCE_TEST_PRELOAD:-}
unset UROCE_SHM UROCE_PCAP UROCE_FAULTS UROCE_CONFIG

fail() {
	echo "FAIL: $*" >&2
	for f in "$tmp"/*.log; do
		[ -f "$f" ] && { echo "--- $f"; tail -n 30 "$f"; } >&2
	done
	exit 1
}

# as UID CMD...: runs CMD as that uid with no groups, bounded in time
as() {
	local uid=$1
	shift
	timeout "$LIMIT" setpriv --reuid="$uid" --regid="$uid" --clear-groups \
		-- "$@"
}

# asv UID CMD...: the same for a stock verbs program
asv() {
	local uid=$1
	shift
	as "$uid" env ${sanitizers:+LD_PRELOAD="$sanitizers"} "$@"
}

start_service() {
	mkdir -p "$tmp/svc"
	chown "$SVC" "$tmp/svc"
	chmod 755 "$tmp/svc"
	as "$SVC" env UROCE_DEBUG=1 "$tmp/uroced" >"$tmp/service.log" 2>&1 &
	for _ in $(seq 100); do
		grep -q "^uroced: serving" "$tmp/service.log" && return 0
		sleep 0.05
	done
	fail "uroced did not start"
}

# pair NAME SERVER_UID CLIENT_UID EXPECT CMD...: CMD as server, then as
# client against 127.0.0.1; both must succeed and print EXPECT.  CMD runs
# by asv, or by $PAIR_RUN (as, for a shell that preloads the runtimes
# into its program itself).
pair() {
	local name=$1 suid=$2 cuid=$3 expect=$4 run=${PAIR_RUN:-asv}
	shift 4
	"$run" "$suid" env UROCE_DEBUG=1 "$@" >"$tmp/$name.server.log" 2>&1 &
	local spid=$!
	sleep 0.3
	local tries=0
	until "$run" "$cuid" env UROCE_DEBUG=1 "$@" 127.0.0.1 \
		>"$tmp/$name.client.log" 2>&1; do
		# the server may not listen yet
		tries=$((tries + 1))
		[ "$tries" -lt 5 ] || fail "$name: client failed"
		sleep 0.5
	done
	wait "$spid" || fail "$name: server failed"
	grep -Eq "$expect" "$tmp/$name.client.log" ||
		fail "$name: client printed no \"$expect\""
	grep -Eq "$expect" "$tmp/$name.server.log" ||
		fail "$name: server printed no \"$expect\""
}

case $case in
no_service)
	# A holds the port in single-user mode (no service in its directory)
	asv "$A" ibv_rc_pingpong -g 0 -p 19501 >"$tmp/holder.log" 2>&1 &
	sleep 0.5
	if asv "$B" ibv_devinfo >"$tmp/second.log" 2>&1; then
		fail "a second user opened the device while another held the port"
	fi
	grep -q "UDP port $port is held by uid $A's programs" "$tmp/second.log" ||
		fail "no line naming the port's holder"
	grep -q "start the per-host service uroced" "$tmp/second.log" ||
		fail "no line naming the fix"
	[ "$(grep -c '^uroce:' "$tmp/second.log")" -eq 1 ] ||
		fail "more than one line from uroce"
	cat "$tmp/second.log"
	;;
service)
	start_service
	pair rc "$A" "$B" "^1000 iters in " ibv_rc_pingpong -g 0 -p 19511
	pair ud "$A" "$B" "^1000 iters in " ibv_ud_pingpong -g 0 -p 19512
	PAIR_RUN=as pair cm "$A" "$B" "ping data: rdma-ping-19: " sh -c \
		'exec env ${1:+LD_PRELOAD="$1"} rping ${2:+-c -a "$2"} \
			${2:--s -a 127.0.0.1} -p 19513 -v -V -C 20' \
		rping "$sanitizers"
	pair qps "$A" "$B" "^ 65536 +16000 " ib_write_bw -x 0 -q 8 -n 2000 \
		-p 19514
	# across users the same-host path is refused (another user's
	# segment is not ours to open); within one user it is taken
	grep -Eq "samehost_(ops|ring_tx)" "$tmp/rc.client.log" &&
		fail "the same-host path crossed users"
	pair same "$A" "$A" "^1000 iters in " ibv_rc_pingpong -g 0 -p 19515
	grep -q "samehost_ring_tx" "$tmp/same.client.log" ||
		fail "the same-host path was not taken within one user"
	# every process got its own slot from the service
	grep -h "served by uroced" "$tmp"/*.client.log "$tmp"/*.server.log |
		sed 's/.*slot //' | sort | uniq -d | grep -q . &&
		fail "two processes were given one slot"
	# a user's same-host segment is closed to the others
	asv "$A" env UROCE_DEBUG=1 ibv_rc_pingpong -g 0 -p 19516 \
		>"$tmp/seg.log" 2>&1 &
	for _ in $(seq 100); do
		seg=$(ls /dev/shm/uroce.*."$port"."$A".* 2>/dev/null | head -n 1 || true)
		[ -n "$seg" ] && break
		sleep 0.05
	done
	[ -n "$seg" ] || fail "no same-host segment appeared"
	as "$B" /usr/bin/python3 -c "open('$seg', 'rb')" 2>/dev/null &&
		fail "another user opened $seg"
	;;
hostile)
	start_service
	# B, the victim's server, waits for its client with its QPs created
	asv "$B" env UROCE_DEBUG=1 ib_write_bw -x 0 -q 4 -n 2000 -p 19521 \
		>"$tmp/victim.server.log" 2>&1 &
	for _ in $(seq 100); do
		slot_b=$(sed -n 's/.*served by uroced.*slot //p' \
			"$tmp/victim.server.log")
		[ -n "$slot_b" ] && break
		sleep 0.05
	done
	[ -n "$slot_b" ] || fail "the victim's server did not start"
	sock=$(ls "$tmp"/svc/uroced.*)

	# C cannot hold the port, in any way the kernel offers
	as "$C" /usr/bin/python3 - "$port" "$slot_b" <<'EOF' ||
import socket, sys
port, slot = int(sys.argv[1]), int(sys.argv[2])
for addr, p in (('0.0.0.0', port), ('127.0.0.1', port),
                ('127.0.0.1', 0xC000 | slot << 4)):
    for opt in (None, socket.SO_REUSEADDR, socket.SO_REUSEPORT):
        s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        if opt:
            s.setsockopt(socket.SOL_SOCKET, opt, 1)
        try:
            s.bind((addr, p))
        except OSError:
            continue
        sys.exit(f'{addr}:{p} bound with option {opt}')
EOF
		fail "another user bound the service's port or a source port"

	# C cannot pose as the service: it can neither put a socket of its own
	# in the service's directory nor move the service's away, and a
	# directory anybody may write to (as /tmp) is refused by the processes
	as "$C" /usr/bin/python3 -c "
import os, socket, sys
real = '$sock'
s = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
for attempt in (lambda: os.unlink(real), lambda: os.rename(real, real + '.x'),
                lambda: s.bind(os.path.dirname(real) + '/fake')):
    try:
        attempt()
    except PermissionError:
        continue
    sys.exit('changed the service directory')" ||
		fail "another user changed the service's directory"
	mkdir -m 1777 "$tmp/open"
	fake=$tmp/open/$(basename "$sock")
	as "$C" /usr/bin/python3 -c "
import os, socket, time
s = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
s.bind('$fake'); os.chmod('$fake', 0o666); s.listen(); time.sleep($LIMIT)" &
	for _ in $(seq 100); do
		[ -S "$fake" ] && break
		sleep 0.05
	done
	if asv "$A" env UROCE_SERVICE="$tmp/open" ibv_devinfo \
		>"$tmp/open.log" 2>&1; then
		fail "a process trusted a service in a directory anybody writes"
	fi
	grep -q "not using .*writable by others" "$tmp/open.log" ||
		fail "no line saying why the service was refused"

	# C asks for every socket a client of B will need, before the client
	# starts; the victim's client takes its pair back from C
	coproc HOSTILE { as "$C" /usr/bin/python3 "$here/svc_client.py" \
		"$sock" "$port" "$slot_b" 2>&1; }
	read -r -t "$LIMIT" ready granted <&"${HOSTILE[0]}" ||
		fail "the hostile client did not start"
	[ "$ready" = ready ] || fail "hostile client: $ready $granted"
	[ "$granted" -eq 16 ] || fail "the service granted $granted of 16"
	asv "$A" env UROCE_DEBUG=1 ib_write_bw -x 0 -q 4 -n 2000 -p 19521 \
		127.0.0.1 >"$tmp/victim.client.log" 2>&1 ||
		fail "the victim's transfer failed"
	grep -Eq "^ 65536 +8000 " "$tmp/victim.client.log" ||
		fail "the victim's transfer printed no result"
	echo check >&"${HOSTILE[1]}"
	read -r -t "$LIMIT" what received <&"${HOSTILE[0]}" ||
		fail "the hostile client did not report"
	[ "$what $received" = "received 0" ] ||
		fail "the hostile user received $received of the victim's datagrams"
	echo "hostile user granted $granted sockets, received $received datagrams"
	;;
uroce_cmd)
	# single-user mode: A's process alone, waiting for a client
	asv "$A" env UROCE_SERVICE=none ibv_rc_pingpong -g 0 -p 19531 \
		>"$tmp/owner.log" 2>&1 &
	for _ in $(seq 100); do
		pid=$(pgrep -u "$A" -x ibv_rc_pingpong || true)
		[ -n "$pid" ] && grep -q "@uroce-ctl.$pid" /proc/net/unix && break
		sleep 0.05
	done
	[ -n "$pid" ] || fail "the owner's process did not start"
	as "$A" "$tmp/uroce" stat "$pid" >"$tmp/own.log" 2>&1 ||
		fail "the owner could not see its process"
	"$tmp/uroce" stat "$pid" >"$tmp/root.log" 2>&1 ||
		fail "root could not see the process"
	for cmd in "stat $pid" "capture $pid $tmp/x.pcap" \
		"faults $pid drop=1"; do
		# shellcheck disable=SC2086
		if as "$B" "$tmp/uroce" $cmd >"$tmp/other.log" 2>&1; then
			fail "another user ran uroce $cmd"
		fi
		grep -q "permission denied" "$tmp/other.log" ||
			fail "uroce $cmd: no reason given"
	done
	[ ! -e "$tmp/x.pcap" ] || fail "another user started a capture"
	as "$B" "$tmp/uroce" stat >"$tmp/list.log" 2>&1
	grep -q "no uroce process that you may see" "$tmp/list.log" ||
		fail "another user's listing showed the process"
	;;
*)
	echo "unknown case $case" >&2
	exit 2
	;;
esac
echo "PASS: multiuser.$case"
