#!/usr/bin/env bash
# Prepares a fresh Debian 12 machine: installs what uroce needs to build and
# test (and the stock verbs tools to run over it), builds into ./build, and
# installs and starts the per-host service, uroced.  It needs root: run by
# a user, it runs itself again through sudo (and builds as that user).
set -euo pipefail

if [ "$(id -u)" -ne 0 ]; then
	if command -v sudo >/dev/null; then
		exec sudo -- "$0" "$@"
	fi
	echo "setup.sh installs packages with apt-get: run it as root" >&2
	exit 1
fi
cd "$(dirname "$0")/.."

export DEBIAN_FRONTEND=noninteractive
# tshark asks whether non-root users may capture; answer before installing
echo "wireshark-common wireshark-common/install-setuid boolean false" |
	debconf-set-selections
apt-get update
apt-get install -y build-essential clang cmake pkg-config libibverbs-dev libisal-dev \
	libcmocka-dev ibverbs-utils perftest rdmacm-utils librdmacm-dev qperf fio \
	tshark tcpdump python3 python3-scapy iproute2 python3-pyverbs libfabric-bin \
	ucx-utils openmpi-bin libopenmpi-dev nftables libjson-c-dev procps passwd

# UCX takes an RDMA device only if /dev/infiniband/<its dev_name> is a
# character device the user may read and write.  uroce0 has no kernel
# device node; /dev/null stands in (on a /dev that is a tmpfs, as in most
# containers, run this again after a restart).
mkdir -p /dev/infiniband
ln -sfn /dev/null /dev/infiniband/uroce0

# Build as the user who ran sudo, so that ./build stays theirs and
# scripts/demo.sh and scripts/test.sh can rebuild it without root.
as_user() {
	if [ -n "${SUDO_USER:-}" ] && [ "$SUDO_USER" != root ]; then
		sudo -u "$SUDO_USER" -- "$@"
	else
		"$@"
	fi
}
as_user cmake -S . -B build -DCMAKE_BUILD_TYPE=RelWithDebInfo
as_user cmake --build build -j "$(nproc)"

# The per-host service, uroced, owns UDP port 4791 for every user's uroce
# programs (README "Every user of a host").  It runs as a system user of its
# own, with no privilege but CAP_NET_RAW (for RoCE v1 alone), and proves
# itself to the programs by its directory, /run/uroce, which only root and
# that user may write.  Run this script again after a reboot where nothing
# starts it (no systemd).
install -m 0755 build/service/uroced /usr/local/sbin/uroced
id -u uroce >/dev/null 2>&1 ||
	useradd --system --no-create-home --home-dir /nonexistent \
		--shell /usr/sbin/nologin uroce
if [ -d /run/systemd/system ]; then
	cat >/etc/systemd/system/uroced.service <<'UNIT'
[Unit]
Description=uroce per-host service: the RoCEv2 UDP port for every user
After=network.target

[Service]
User=uroce
# RoCE v1 (Ethernet frames) for the processes that ask: uroced holds the
# host's one packet socket for ethertype 0x8915
AmbientCapabilities=CAP_NET_RAW
CapabilityBoundingSet=CAP_NET_RAW
RuntimeDirectory=uroce
RuntimeDirectoryMode=0755
ExecStart=/usr/local/sbin/uroced --dir /run/uroce
Restart=on-failure

[Install]
WantedBy=multi-user.target
UNIT
	systemctl daemon-reload
	systemctl enable uroced.service
	systemctl restart uroced.service
else
	pkill -x uroced && sleep 0.5 || true
	install -d -o uroce -m 0755 /run/uroce
	# CAP_NET_RAW for RoCE v1, where this host lets us give it
	caps=(--inh-caps=+net_raw --ambient-caps=+net_raw)
	setpriv --reuid=uroce --regid=uroce --init-groups "${caps[@]}" -- \
		true 2>/dev/null || caps=()
	setsid -f setpriv --reuid=uroce --regid=uroce --init-groups \
		"${caps[@]}" -- /usr/local/sbin/uroced --dir /run/uroce \
		>/run/uroce/uroced.log 2>&1 </dev/null
fi
for _ in $(seq 50); do
	ls /run/uroce/uroced.*.* >/dev/null 2>&1 && break
	sleep 0.1
done
if ls /run/uroce/uroced.*.* >/dev/null 2>&1; then
	echo "uroced serves UDP port 4791 for every user of this host"
else
	echo "warning: uroced did not start (see journalctl -u uroced or" \
		"/run/uroce/uroced.log); uroce programs run in single-user mode" >&2
fi
