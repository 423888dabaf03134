#!/usr/bin/env bash
# Prepares a fresh Debian 12 machine: installs what uroce needs to build and
# test (and the stock verbs tools to run over it), then builds into ./build.
# apt-get needs root:  sudo scripts/setup.sh
set -euo pipefail
cd "$(dirname "$0")/.."

if [ "$(id -u)" -ne 0 ]; then
	echo "setup.sh installs packages with apt-get; run it as root: sudo $0" >&2
	exit 1
fi
export DEBIAN_FRONTEND=noninteractive
# tshark asks whether non-root users may capture; answer before installing
echo "wireshark-common wireshark-common/install-setuid boolean false" |
	debconf-set-selections
apt-get update
apt-get install -y build-essential cmake pkg-config libibverbs-dev libisal-dev \
	libcmocka-dev ibverbs-utils perftest rdmacm-utils librdmacm-dev qperf fio \
	tshark tcpdump python3 python3-scapy iproute2 python3-pyverbs libfabric-bin \
	ucx-utils openmpi-bin libopenmpi-dev

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
