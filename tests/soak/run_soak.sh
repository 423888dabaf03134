#!/usr/bin/env bash
# Soaks uroce: tests/soak/soak between two network namespaces joined by a
# veth pair (10.88.0.1 and 10.88.0.2, only inside namespaces this script
# makes and deletes), every packet over UDP, through each setting in turn:
#   lossless     nothing in the way: the baseline
#   nft_drop_1   nftables drops 1% of UDP port 4791 packets, both ways
#   nft_drop_5   ... 5%
#   reorder      nftables sends 3% of them through an HTB class paced to
#                100 Mbit/s while the rest pass at 10 Gbit/s, so they fall
#                behind later ones: reordering without ECN (this kernel has
#                no netem)
#   uroce_faults uroce's own injection on both ends: drop, duplication,
#                reordering, delay, corruption on receipt (the ICRC must
#                refuse it), and loss and corruption on sending.  Corruption
#                stays rare: an IPv4 receiver checks the ICRC for every IP
#                identification and DF at once (README, Packets), so about
#                one corrupted packet in 2^15 passes, and a wrong byte fails
#                the run.
# and prints each setting's goodput next to the lossless one.  Every byte is
# checked, every completion's order, and a QP without progress for 20 s is
# a hang; any of these fails the run.  Needs root (it makes namespaces).
#
#   run_soak.sh --build DIR [--bytes N[KMG]]
#
# --bytes is the total over all settings (default 1G), shared out by how
# fast each runs.
set -euo pipefail

build= bytes=1G
while [ $# -gt 0 ]; do
	case $1 in
	--build) build=$2; shift 2 ;;
	--bytes) bytes=$2; shift 2 ;;
	*) echo "usage: $0 --build DIR [--bytes N[KMG]]" >&2
	   exit 2 ;;
	esac
done
[ -n "$build" ] || { echo "$0: --build DIR is required" >&2; exit 2; }
if [ "$(id -u)" -ne 0 ]; then
	echo "$0: must run as root: it makes network namespaces and nftables rules" >&2
	exit 1
fi
for tool in ip nft tc; do
	command -v "$tool" >/dev/null ||
		{ echo "$0: $tool is missing (apt-get install iproute2 nftables)" >&2; exit 1; }
done

soak=$build/tests/soak/soak
total=$(/usr/bin/python3 -c '
import sys
v = sys.argv[1]; m = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}
print(int(float(v[:-1]) * m[v[-1]]) if v[-1] in m else int(v))' "$bytes")

ns_a=uroce-soak-$$-a ns_b=uroce-soak-$$-b
veth_a=usoak$$a veth_b=usoak$$b
cleanup() {
	ip netns del "$ns_a" 2>/dev/null || true
	ip netns del "$ns_b" 2>/dev/null || true
}
trap cleanup EXIT
ip netns add "$ns_a"
ip netns add "$ns_b"
ip link add "$veth_a" netns "$ns_a" type veth peer name "$veth_b" netns "$ns_b"
# jumbo frames: path MTU 4096 fits (uroce's port MTU is the link's less 80)
ip -n "$ns_a" link set "$veth_a" mtu 9000 up
ip -n "$ns_b" link set "$veth_b" mtu 9000 up
ip -n "$ns_a" link set lo up
ip -n "$ns_b" link set lo up
ip -n "$ns_a" addr add 10.88.0.1/24 dev "$veth_a"
ip -n "$ns_b" addr add 10.88.0.2/24 dev "$veth_b"

# A packet to 4791 either way passes the output hook of one of the two.
nft_rules() {	# <nft statement for a RoCEv2 packet>
	for ns in "$ns_a" "$ns_b"; do
		ip netns exec "$ns" nft -f - <<EOF
table inet soak
delete table inet soak
table inet soak {
	chain out {
		type filter hook output priority 0; policy accept;
		udp dport 4791 $1
	}
}
EOF
	done
}
nft_clear() {
	for ns in "$ns_a" "$ns_b"; do
		ip netns exec "$ns" nft delete table inet soak 2>/dev/null || true
	done
}
htb() {	# add | del
	local dev
	for ns in "$ns_a" "$ns_b"; do
		dev=$veth_a
		[ "$ns" = "$ns_b" ] && dev=$veth_b
		if [ "$1" = del ]; then
			ip netns exec "$ns" tc qdisc del dev "$dev" root 2>/dev/null || true
			continue
		fi
		ip netns exec "$ns" tc qdisc add dev "$dev" root handle 1: htb default 10
		ip netns exec "$ns" tc class add dev "$dev" parent 1: classid 1:10 htb rate 10gbit quantum 9000
		ip netns exec "$ns" tc class add dev "$dev" parent 1: classid 1:20 htb rate 100mbit ceil 100mbit quantum 9000
	done
}

# name, share of the bytes (percent), UROCE_FAULTS, setup, teardown
settings=(
	"lossless 30 - : :"
	"nft_drop_1 20 - nft_rules_drop1 nft_clear"
	"nft_drop_5 10 - nft_rules_drop5 nft_clear"
	"reorder 15 - reorder_on reorder_off"
	"uroce_faults 25 drop=0.005,dup=0.005,reorder=0.005,delay=0.01,corrupt=0.002,tx_drop=0.005,tx_corrupt=0.002,seed=11 : :"
)
nft_rules_drop1() { nft_rules 'numgen random mod 100 < 1 drop'; }
nft_rules_drop5() { nft_rules 'numgen random mod 100 < 5 drop'; }
reorder_on() {
	htb add
	nft_rules 'meta priority set numgen random mod 100 map { 0-2 : 1:20, 3-99 : 1:10 }'
}
reorder_off() { nft_clear; htb del; }

export LD_LIBRARY_PATH=$build/lib UROCE_SHM=0 UROCE_SERVICE=none
export UROCE_CONFIG= UROCE_FAULTS= UROCE_MTU= UROCE_WINDOW= UROCE_PCAP=

results=()
status=0
for s in "${settings[@]}"; do
	read -r name share faults setup teardown <<<"$s"
	n=$((total * share / 100))
	args=(--name "$name" --bytes "$n" --netns "/run/netns/$ns_a,/run/netns/$ns_b"
	      --addrs 10.88.0.1,10.88.0.2 --hang-s 20 --deadline-s 600)
	[ "$faults" != - ] && args+=(--faults "$faults")
	echo "=== $name: $n bytes"
	$setup
	out=$("$soak" "${args[@]}" 2> >(grep -v '^uroce: \(GID\|slot\|same-host\)' >&2)) ||
		status=1
	$teardown
	echo "$out"
	line=$(grep '^SOAK ' <<<"$out" || true)
	[ -n "$line" ] && results+=("$line")
	[ "$status" -eq 0 ] || break
done

echo
echo "| setting | bytes | seconds | goodput MB/s | / lossless | retransmits | timeouts | ICRC refused | malformed | errors | hangs |"
echo "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"
base=
for line in "${results[@]}"; do
	/usr/bin/python3 - "$line" "${base:-0}" <<'EOF'
import sys
f = sys.argv[1].split()
kv = dict(x.split("=", 1) for x in f[2:])
base = float(sys.argv[2]) or float(kv["goodput_MBps"])
print(f"| {f[1]} | {kv['bytes']} | {kv['seconds']} | {kv['goodput_MBps']} | "
      f"{float(kv['goodput_MBps']) / base:.2f} | {kv['retransmits']} | "
      f"{kv['timeouts']} | {kv['rx_bad_icrc']} | {kv['rx_malformed']} | "
      f"{kv['errors']} | {kv['hangs']} |")
EOF
	[ -z "$base" ] && base=$(sed 's/.*goodput_MBps=\([0-9.]*\).*/\1/' <<<"$line")
done
total_moved=0
for line in "${results[@]}"; do
	total_moved=$((total_moved + $(sed 's/.* bytes=\([0-9]*\).*/\1/' <<<"$line")))
done
echo
echo "moved $total_moved bytes over ${#results[@]} of ${#settings[@]} settings"
if [ "$status" -ne 0 ] || [ "${#results[@]}" -ne "${#settings[@]}" ]; then
	echo "FAIL soak" >&2
	exit 1
fi
echo "PASS soak"
