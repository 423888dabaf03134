# Sourced by the wire tests that join two network namespaces: what they
# need, and the namespaces.
#
# netns_pair A B NET4 NET6: namespaces A and B joined by a veth pair (va in
# A, vb in B: real Ethernet headers), with NET4.1/24 and NET6::1/64 on va,
# NET4.2/24 and NET6::2/64 on vb, everything up.
netns_pair() {
	local a=$1 b=$2 net4=$3 net6=$4

	ip netns add "$a" && ip netns add "$b" &&
		ip link add va netns "$a" type veth peer name vb netns "$b" ||
		return 1
	ip -n "$a" addr add "$net4.1/24" dev va
	ip -n "$b" addr add "$net4.2/24" dev vb
	ip -n "$a" addr add "$net6::1/64" dev va nodad
	ip -n "$b" addr add "$net6::2/64" dev vb nodad
	for ns in "$a" "$b"; do
		ip -n "$ns" link set lo up
	done
	ip -n "$a" link set va up
	ip -n "$b" link set vb up
}

# netns_require TEST TOOL...: exits failing unless running as root (network
# namespaces) with every TOOL installed.
netns_require() {
	local test=$1 tool

	shift
	if [ "$(id -u)" -ne 0 ]; then
		echo "FAIL: $test must run as root (it creates network" \
			"namespaces); CI runs it as root"
		exit 1
	fi
	for tool in "$@"; do
		if ! command -v "$tool" >/dev/null; then
			echo "FAIL: $tool is not installed"
			exit 1
		fi
	done
}
