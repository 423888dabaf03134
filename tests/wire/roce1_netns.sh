#!/usr/bin/env bash
# RoCE v1 (UROCE_ROCE_V1=1): the GID table lists a v1 twin after every v2
# GID, a process without CAP_NET_RAW says why it has none, and unmodified
# programs run over v1 between two network namespaces joined by a veth pair
# (real Ethernet headers; single-user mode, no uroced) and between two
# processes of one namespace served by a uroced of its own (over lo).  The
# capture on the veth must hold only well-formed frames: tshark decodes
# each as InfiniBand over Ethernet with no malformed or expert warning, and
# every ICRC checks out as Annex A16 computes it (roce1_icrc.py).
#
#   roce1_netns.sh UROCED
#
# Needs root (network namespaces, CAP_NET_RAW); CI runs it as root.
set -u

uroced=$1
here=$(dirname "$0")
. "$here/netns_pair.sh"
netns_require wire.roce1 ip tcpdump tshark setpriv ibv_devinfo \
	ibv_rc_pingpong ibv_ud_pingpong ib_write_bw ib_read_bw ib_send_bw \
	ib_send_lat rping ucmatose udaddy

a=uroce-v1a-$$
b=uroce-v1b-$$
work=$(mktemp -d)
dump=
svc=
cleanup() {
	[ -n "$dump" ] && kill "$dump" 2>/dev/null && wait "$dump" 2>/dev/null
	[ -n "$svc" ] && kill "$svc" 2>/dev/null && wait "$svc" 2>/dev/null
	ip netns del "$a" 2>/dev/null
	ip netns del "$b" 2>/dev/null
	rm -rf "$work"
}
trap cleanup EXIT

netns_pair "$a" "$b" 10.233.0 fd73 || exit 1

export UROCE_ROCE_V1=1
fail=0
bad() {
	echo "FAIL: $*"
	fail=1
}

# in NS CMD...: a stock program in a namespace (with the sanitizer
# runtimes a sanitized build's library needs)
ns_run() {
	local ns=$1
	shift
	ip netns exec "$ns" env \
		${UROCE_TEST_PRELOAD:+LD_PRELOAD="$UROCE_TEST_PRELOAD"} "$@"
}

# gid_index NS ADDRESS TYPE: the index of ADDRESS's GID of TYPE (v1, v2)
gid_index() {
	ns_run "$1" ibv_devinfo -v 2>/dev/null | /usr/bin/python3 -c '
import ipaddress, re, sys
want = ipaddress.ip_address(sys.argv[1])
if want.version == 4:
    want = ipaddress.IPv6Address("::ffff:" + str(want))
for line in sys.stdin:
    m = re.search(r"GID\[\s*(\d+)\]:\s+(\S+), RoCE (v\d)", line)
    if m and m.group(3) == sys.argv[2] and \
            ipaddress.IPv6Address(m.group(2)) == want:
        print(m.group(1))
        break' "$2" "$3"
}

# ---- the GID table --------------------------------------------------------
ns_run "$a" ibv_devinfo -v >"$work/gids" 2>&1
grep "GID\[" "$work/gids"
v1=$(grep -c "RoCE v1" "$work/gids")
v2=$(grep -c "RoCE v2" "$work/gids")
[ "$v1" -eq 4 ] && [ "$v2" -eq 4 ] ||
	bad "expected 4 RoCE v2 and 4 RoCE v1 GIDs (lo and va, IPv4 and IPv6)"
grep -q "GID\[  0\].*RoCE v2" "$work/gids" || bad "GID 0 must stay RoCE v2"
[ "$(grep "GID\[" "$work/gids" | sed -n 5p | grep -c "RoCE v1")" -eq 1 ] ||
	bad "the v1 GIDs must follow the v2 ones"
UROCE_ROCE_V1=0 ns_run "$a" ibv_devinfo -v 2>&1 | grep -q "GID\[.*RoCE v1" &&
	bad "UROCE_ROCE_V1=0 must list no RoCE v1 GID"

# without CAP_NET_RAW: no v1 GIDs, and one line saying why
ns_run "$a" setpriv --bounding-set=-net_raw --inh-caps=-net_raw \
	ibv_devinfo -v >"$work/nocap" 2>&1
grep -q "no RoCE v1 GIDs: .*CAP_NET_RAW" "$work/nocap" ||
	bad "a process without CAP_NET_RAW must say why it has no v1 GIDs"
grep "CAP_NET_RAW" "$work/nocap"
grep -q "GID\[.*RoCE v1" "$work/nocap" &&
	bad "a process without CAP_NET_RAW listed RoCE v1 GIDs"
grep -q "GID\[  0\].*RoCE v2" "$work/nocap" ||
	bad "a process without CAP_NET_RAW must keep its RoCE v2 GIDs"

# ---- between the namespaces ------------------------------------------------
ip netns exec "$b" tcpdump -i vb -B 32768 --immediate-mode -U \
	-w "$work/link.pcap" >/dev/null 2>&1 &
dump=$!
sleep 1	# tcpdump has no ready signal; it starts well within this

# pair WHAT SERVER_ADDR CLIENT_ARGS...: a stock program as server in b and
# client in a; both must succeed
pair() {
	local what=$1 to=$2 was=$fail
	fail=0
	shift 2
	UROCE_SERVICE=none ns_run "$b" timeout 30 "$@" >"$work/server" 2>&1 &
	local server=$!
	sleep 0.5
	if ! UROCE_SERVICE=none ns_run "$a" timeout 30 "$@" "$to" \
		>"$work/client" 2>&1; then
		bad "$what: client failed"
		cat "$work/client"
	fi
	if ! wait "$server"; then
		bad "$what: server failed"
		cat "$work/server"
	fi
	[ $fail -eq 0 ] && echo "$what: ok"
	fail=$((fail | was))
}

# The programs meet over IPv4 (their servers listen on IPv4 alone); the
# GID index says which addresses the RDMA traffic carries.
for fam in 4 6; do
	if [ $fam = 4 ]; then self=10.233.0.1 peer=10.233.0.2; else
		self=fd73::1 peer=fd73::2; fi
	ga=$(gid_index "$a" $self v1)
	gb=$(gid_index "$b" $peer v1)
	if [ -z "$ga" ] || [ -z "$gb" ] || [ "$ga" != "$gb" ]; then
		bad "no RoCE v1 GID for $self / $peer"
		continue
	fi
	to=10.233.0.2
	pair "ibv_rc_pingpong IPv$fam" $to ibv_rc_pingpong -g "$ga" -n 100
	pair "ibv_ud_pingpong IPv$fam" $to ibv_ud_pingpong -g "$ga" -n 100
	if [ $fam = 4 ]; then
		for t in ib_write_bw ib_read_bw ib_send_bw; do
			pair "$t" $to $t -x "$ga" -n 200 -s 8192 -F
		done
		pair "ib_send_lat" $to ib_send_lat -x "$ga" -n 200 -s 64 -F
		pair "ib_send_bw UD" $to ib_send_bw -x "$ga" -c UD -n 200 \
			-s 1024 -F
	fi
done

# cm_pair WHAT NS_SERVER NS_CLIENT SERVER_CMD... -- CLIENT_CMD...: rdma_cm
# programs over RoCE v1 (UROCE_RDMA_CM_ROCE=v1); both must succeed
cm_pair() {
	local what=$1 ns_s=$2 ns_c=$3 was=$fail server_cmd=()
	fail=0
	shift 3
	while [ "$1" != -- ]; do server_cmd+=("$1"); shift; done
	shift
	UROCE_SERVICE=${CM_SERVICE:-none} UROCE_RDMA_CM_ROCE=v1 \
		UROCE_DEBUG=1 ns_run "$ns_s" "${CM_PREFIX[@]}" timeout 30 \
		"${server_cmd[@]}" >"$work/server" 2>&1 &
	local server=$!
	sleep 0.5
	UROCE_SERVICE=${CM_SERVICE:-none} UROCE_RDMA_CM_ROCE=v1 \
		UROCE_DEBUG=1 ns_run "$ns_c" "${CM_PREFIX[@]}" timeout 30 \
		"$@" >"$work/client" 2>&1 || bad "$what: client failed"
	wait "$server" || bad "$what: server failed"
	grep -q "roce1_tx" "$work/client" && grep -q "roce1_tx" "$work/server" ||
		bad "$what: no RoCE v1 frames counted"
	[ $fail -eq 0 ] || cat "$work/client" "$work/server"
	[ $fail -eq 0 ] && echo "$what over v1: ok"
	fail=$((fail | was))
}
CM_PREFIX=()
cm_pair "rping" "$b" "$a" rping -s -a 10.233.0.2 -V -S 1000 -C 5 -- \
	rping -c -a 10.233.0.2 -V -S 1000 -C 5
cm_pair "rping IPv6" "$b" "$a" rping -s -a fd73::2 -V -S 100 -C 5 -- \
	rping -c -a fd73::2 -V -S 100 -C 5
cm_pair "ucmatose" "$b" "$a" ucmatose -b 10.233.0.2 -c 2 -C 10 -- \
	ucmatose -s 10.233.0.2 -c 2 -C 10
cm_pair "udaddy" "$b" "$a" udaddy -b 10.233.0.2 -C 10 -- \
	udaddy -s 10.233.0.2 -C 10

sleep 0.5
kill "$dump" && wait "$dump" 2>/dev/null
dump=

frames=$(tshark -r "$work/link.pcap" -Y "eth.type == 0x8915" 2>/dev/null |
	wc -l)
ib=$(tshark -r "$work/link.pcap" -Y "eth.type == 0x8915 && infiniband.bth" \
	2>/dev/null | wc -l)
warn=$(tshark -r "$work/link.pcap" \
	-Y "eth.type == 0x8915 && (_ws.malformed || _ws.expert)" 2>/dev/null |
	wc -l)
echo "RoCE v1 frames: $frames, decoded as InfiniBand: $ib, with warnings: $warn"
[ "$frames" -ge 1000 ] || bad "expected at least 1000 RoCE v1 frames"
[ "$ib" -eq "$frames" ] || bad "every RoCE v1 frame must decode as InfiniBand"
[ "$warn" -eq 0 ] || bad "tshark found malformed frames or expert warnings"
ops=$(tshark -r "$work/link.pcap" -Y "eth.type == 0x8915" \
	-T fields -e infiniband.bth.opcode 2>/dev/null | sort -un | tr '\n' ' ')
echo "opcodes: $ops"
# SEND (first, last, only), WRITE (first, last), READ (request, response
# first and last), ACK, UD SEND
for op in 0 2 4 6 8 12 13 15 17 100; do
	case " $ops " in *" $op "*) ;; *) bad "no frame of opcode $op" ;; esac
done
# the CM's MADs: REQ, REP, RTU, DREQ, DREP, SIDR_REQ and SIDR_REP
mads=$(tshark -r "$work/link.pcap" -Y "eth.type == 0x8915 && infiniband.mad" \
	-T fields -e infiniband.mad.attributeid 2>/dev/null | sort -u |
	tr '\n' ' ')
echo "CM MADs: $mads"
for attr in 0x0010 0x0013 0x0014 0x0015 0x0016 0x0017 0x0018; do
	case " $mads " in *" $attr "*) ;; *) bad "no MAD of attribute $attr" ;;
	esac
done
/usr/bin/python3 "$here/roce1_icrc.py" "$work/link.pcap" ||
	bad "ICRC check of the capture"

# ---- two processes of one namespace, served by a uroced ------------------
# Without CAP_NET_RAW themselves, processes send and receive RoCE v1
# through a uroced that has it; with it, and a uroced without, they hold
# packet sockets of their own.
nocap=(setpriv --bounding-set=-net_raw --inh-caps=-net_raw)
mkdir -m 0755 "$work/svc"
start_uroced() {	# [PREFIX...]: uroced in a, with or without the cap
	: >"$work/uroced.log"
	ip netns exec "$a" env -u UROCE_ROCE_V1 UROCE_SERVICE="$work/svc" \
		"$@" "$uroced" >"$work/uroced.log" 2>&1 &
	svc=$!
	for _ in $(seq 100); do
		grep -q "^uroced: serving" "$work/uroced.log" && break
		sleep 0.05
	done
	grep -q "^uroced: serving" "$work/uroced.log" ||
		bad "uroced did not start"
	grep "RoCE v1" "$work/uroced.log"
}
stop_uroced() {
	kill "$svc" && wait "$svc" 2>/dev/null
	svc=
}

# on1 WHAT CLIENT_PREFIX CMD...: server and client in a, to 127.0.0.1,
# over the wire (UROCE_SHM=0) and counted: each side must have sent RoCE v1
# frames
on1() {
	local what=$1 was=$fail prefix=()
	fail=0
	[ "$2" = nocap ] && prefix=("${nocap[@]}")
	shift 2
	UROCE_SERVICE="$work/svc" UROCE_SHM=0 UROCE_DEBUG=1 \
		ns_run "$a" "${prefix[@]}" timeout 30 "$@" \
		>"$work/server" 2>&1 &
	local server=$!
	sleep 0.5
	UROCE_SERVICE="$work/svc" UROCE_SHM=0 UROCE_DEBUG=1 \
		ns_run "$a" "${prefix[@]}" timeout 30 "$@" 127.0.0.1 \
		>"$work/client" 2>&1 || bad "$what: client failed"
	wait "$server" || bad "$what: server failed"
	if ! grep -q "roce1_tx" "$work/client" ||
		! grep -q "roce1_tx" "$work/server"; then
		bad "$what: no RoCE v1 frames counted"
		cat "$work/client" "$work/server"
	fi
	grep -q "served by uroced" "$work/client" ||
		bad "$what: the client was not served by uroced"
	[ $fail -eq 0 ] && echo "$what (one host): ok"
	fail=$((fail | was))
}

lo=$(gid_index "$a" 127.0.0.1 v1)
va=$(gid_index "$a" 10.233.0.1 v1)
start_uroced
grep -q "carrying RoCE v1" "$work/uroced.log" ||
	bad "uroced with CAP_NET_RAW must carry RoCE v1"
on1 "ibv_rc_pingpong through uroced" nocap ibv_rc_pingpong -g "$lo" -n 100
on1 "ibv_ud_pingpong through uroced" nocap ibv_ud_pingpong -g "$lo" -n 100
# the host's own address on va: looped back over lo, as an RNIC would
on1 "ibv_rc_pingpong to the host's own va address through uroced" nocap \
	ibv_rc_pingpong -g "$va" -n 100
on1 "ib_write_bw through uroced" nocap ib_write_bw -x "$lo" -n 200 -s 8192 -F
CM_PREFIX=("${nocap[@]}")
CM_SERVICE="$work/svc" cm_pair "rping through uroced" "$a" "$a" \
	rping -s -a 127.0.0.1 -V -S 1000 -C 5 -- \
	rping -c -a 127.0.0.1 -V -S 1000 -C 5
CM_PREFIX=()
stop_uroced

start_uroced "${nocap[@]}"
grep -q "not carrying RoCE v1: .*CAP_NET_RAW" "$work/uroced.log" ||
	bad "uroced without CAP_NET_RAW must say why it carries no RoCE v1"
UROCE_SERVICE="$work/svc" ns_run "$a" "${nocap[@]}" ibv_devinfo -v \
	>"$work/nocap" 2>&1
grep -q "neither this process nor uroced has" "$work/nocap" ||
	bad "a served process without v1 must say that neither side has the cap"
on1 "ibv_rc_pingpong, own packet sockets" cap ibv_rc_pingpong -g "$lo" -n 100
on1 "ibv_ud_pingpong, own packet sockets" cap ibv_ud_pingpong -g "$lo" -n 100
stop_uroced

[ $fail -eq 0 ] && echo "PASS"
exit $fail
