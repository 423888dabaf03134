#!/usr/bin/env bash
# UD multicast between two network namespaces joined by a veth pair (real
# Ethernet headers), IPv4 and IPv6: mckey receives in one (two QPs) and sends
# from the other, with no uroced in either (single-user mode).  The capture
# on the link must show the joins (IGMP / MLD reports for the group) and
# the datagrams as RoCE v2 to the group's multicast MAC with DestQP
# 0xFFFFFF, and tshark must find nothing malformed and no expert warning.
#
#   mcast_netns.sh RUN_MCKEY_SH
#
# Needs root (it creates network namespaces); CI runs it as root.
set -u

run_mckey=$1
. "$(dirname "$0")/netns_pair.sh"
netns_require wire.mcast ip tcpdump tshark

a=uroce-mca-$$
b=uroce-mcb-$$
work=$(mktemp -d)
dump=
cleanup() {
	[ -n "$dump" ] && kill "$dump" 2>/dev/null && wait "$dump" 2>/dev/null
	ip netns del "$a" 2>/dev/null
	ip netns del "$b" 2>/dev/null
	rm -rf "$work"
}
trap cleanup EXIT

netns_pair "$a" "$b" 10.231.0 fd71 || exit 1

# on the receiving side: what crossed the link
ip netns exec "$b" tcpdump -i vb --immediate-mode -w "$work/link.pcap" -U \
	>/dev/null 2>&1 &
dump=$!
sleep 1	# tcpdump has no ready signal; it starts well within this

fail=0
run() {
	"$run_mckey" --timeout 20 -m "$1" --recv-in "$b" --recv-bind "$2" \
		--send-in "$a" --send-bind "$3" \
		--recv-args "-c 2 -C 20 -S 1000" --send-args "-C 20 -S 1000" ||
		fail=1
}
run 239.255.72.1 10.231.0.2 10.231.0.1
run ff0e::72:1 fd71::2 fd71::1
sleep 0.5
kill "$dump" && wait "$dump" 2>/dev/null
dump=

check() {	# what, display filter, least count
	local n
	n=$(tshark -r "$work/link.pcap" -Y "$2" 2>/dev/null | wc -l)
	echo "$1: $n frames"
	if [ "$n" -lt "$3" ]; then
		echo "FAIL: expected at least $3"
		fail=1
	fi
}
check "IGMP report for 239.255.72.1" 'igmp.maddr == 239.255.72.1' 1
check "MLD report for ff0e::72:1" 'icmpv6.mldr.mar.multicast_address == ff0e::72:1' 1
check "RoCE v2 to 239.255.72.1" \
	'infiniband.bth.destqp == 0xffffff && ip.dst == 239.255.72.1 && eth.dst == 01:00:5e:7f:48:01' 20
check "RoCE v2 to ff0e::72:1" \
	'infiniband.bth.destqp == 0xffffff && ipv6.dst == ff0e::72:1 && eth.dst == 33:33:00:72:00:01' 20
bad=$(tshark -r "$work/link.pcap" -Y '_ws.malformed || _ws.expert.severity >= warning' \
	2>/dev/null | grep -c .)
echo "malformed or warned: $bad frames"
[ "$bad" -eq 0 ] || {
	tshark -r "$work/link.pcap" -Y '_ws.malformed || _ws.expert.severity >= warning' 2>/dev/null | head
	fail=1
}
[ "$fail" -eq 0 ] && echo PASS || echo FAIL
exit "$fail"
