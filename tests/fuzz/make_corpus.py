#!/usr/bin/python3
"""Builds the fuzzers' seed corpus (tests/fuzz/corpus/<harness>/) from real
captures: the Linux kernel's CM and RC traffic in tests/cm/linux-captures/,
and what uroce itself sends, as tests/wire captures it (UROCE_PCAP; give the
build directory's tests/wire/*.pcap, e.g. ipv4.all.requester.pcap,
ipv6.all.requester.pcap, ipv4.xrc.s2500.client.pcap).  Each RoCEv2 datagram
becomes an input in the harness's command format (see each harness's
comment), aimed at the QP or CM id that would take it; duplicates (same
opcode and length) are kept once, so the corpus stays small.

    tests/fuzz/make_corpus.py OUT_DIR UROCE_CAPTURE.pcap...
"""
import glob
import hashlib
import os
import struct
import sys

from scapy.all import IPv6, UDP, rdpcap

HERE = os.path.dirname(os.path.abspath(__file__))

# fuzz_receive: QP slots are kind * NSTATES + state (fuzz_receive.c)
K_RC, K_RC_SRQ, K_UC, K_UD, K_XRC_TGT, K_XRC_INI = range(6)
NSTATES = 5                     # RTS first
RF_ICRC, RF_QPN, RF_PSN, RF_IPV6 = 1, 2, 4, 8
RF_KEY, RF_XRCETH, RF_SERVICE = 0x20, 0x40, 0x80
POST_READ, POST_CMP_SWAP = 4, 5         # indexes of fuzz_receive's ops[]

# fuzz_mad: ids in set_up() order
ID_LISTENER, ID_REQ_SENT, ID_REQ_RCVD, ID_REP_SENT = 0, 1, 2, 3
ID_ESTABLISHED, ID_DREQ_SENT, ID_SIDR_SENT = 4, 5, 6
MF_ICRC, MF_FRAME, MF_HDR, MF_RECEIVER = 1, 2, 4, 8
MF_SENDER, MF_SID, MF_IPV6 = 0x10, 0x20, 0x40
MAD_TARGET = {          # CM attribute -> the id in the state it answers
    0x10: ID_LISTENER, 0x11: ID_REQ_SENT, 0x12: ID_REQ_SENT,
    0x13: ID_REQ_SENT, 0x14: ID_REP_SENT, 0x15: ID_ESTABLISHED,
    0x16: ID_DREQ_SENT, 0x17: ID_LISTENER, 0x18: ID_SIDR_SENT,
}


def datagrams(path):
    """(UDP payload, is IPv6) of every RoCEv2 frame in a capture."""
    for p in rdpcap(path):
        if UDP in p and p[UDP].dport == 4791:
            yield bytes(p[UDP].payload), IPv6 in p


def write(out, harness, data):
    d = os.path.join(out, harness)
    os.makedirs(d, exist_ok=True)
    name = hashlib.sha1(data).hexdigest()
    with open(os.path.join(d, name), 'wb') as f:
        f.write(data)


def receive_cmd(pkt, v6):
    """A packet command for fuzz_receive aimed at the QP that takes it."""
    op = pkt[0]
    service, low = op >> 5, op & 0x1F
    is_resp = low in (0x0D, 0x0E, 0x0F, 0x10, 0x11, 0x12)
    kind = {0: K_RC, 1: K_UC, 3: K_UD,
            5: K_XRC_INI if is_resp else K_XRC_TGT}.get(service, K_RC)
    data = bytearray(pkt)
    # RETH / AtomicETH: VA as an offset into a region, R_Key naming it
    hdr = 12 + (4 if service == 5 and not is_resp else 0)
    if low in (0x06, 0x0A, 0x0B, 0x0C, 0x13, 0x14) and len(data) >= hdr + 16:
        data[hdr:hdr + 12] = struct.pack('>QI', 0x40, 0)
    flags = RF_ICRC | RF_QPN | RF_PSN | RF_KEY | RF_XRCETH
    if v6:
        flags |= RF_IPV6
    if service == 5 and not is_resp:
        data[12:16] = b'\0\0\0\0'       # the target's own SRQ
    return bytes([0, kind * NSTATES, flags]) + struct.pack('>H', len(data)) \
        + bytes(data)


def receive_corpus(out, captures):
    seen = set()
    for path in captures:
        for pkt, v6 in datagrams(path):
            if len(pkt) < 16 or pkt[0] == 0x64 and pkt[4:8] == b'\0\0\0\1':
                continue                # too short, or a MAD
            key = (pkt[0], len(pkt) > 64, v6)
            if key in seen:
                continue
            seen.add(key)
            cmd = receive_cmd(pkt, v6)
            low = pkt[0] & 0x1F
            if low in (0x0D, 0x0F, 0x10):       # READ response: a READ first
                cmd = bytes([2, K_RC * NSTATES, POST_READ, 0, 16]) + cmd
            elif low == 0x12:                   # atomic ACK: an atomic first
                cmd = bytes([2, K_RC * NSTATES, POST_CMP_SWAP, 0, 8]) + cmd
            write(out, 'fuzz_receive', cmd)
    # the QP states and kinds the captures do not reach
    write(out, 'fuzz_receive', bytes(
        b for s in range(6 * NSTATES) for b in (3, s)))
    # what the captures lack: FLUSH and ATOMIC WRITE (memory placement
    # extensions), a SEND with Invalidate of the type 2 window, a WRITE
    # through the type 1 window (key indexes 3 and 4 in fuzz_receive)
    bth = lambda op: bytes([op, 0x40, 0xFF, 0xFF]) + bytes(4) + bytes(4)
    reth = lambda off, key, n: struct.pack('>QII', off, key, n)
    flags = RF_ICRC | RF_QPN | RF_PSN | RF_KEY
    for pkt in (bth(0x1C) + struct.pack('>I', 0x01) + reth(0x40, 0, 64),
                bth(0x1D) + reth(0x40, 0, 8) + bytes(range(8)),
                bth(0x17) + struct.pack('>I', 4) + bytes(16),
                bth(0x0A) + reth(0x10, 3, 16) + bytes(16)):
        pkt += bytes(4)                 # the ICRC, which the harness fixes
        write(out, 'fuzz_receive', bytes([0, K_RC * NSTATES, flags])
              + struct.pack('>H', len(pkt)) + pkt)


def mad_corpus(out):
    seen = set()
    for path in sorted(glob.glob(os.path.join(
            HERE, '..', 'cm', 'linux-captures', '*.pcap'))):
        for pkt, v6 in datagrams(path):
            if len(pkt) != 280 or pkt[4:8] != b'\0\0\0\1':
                continue
            mad = pkt[20:276]
            attr = struct.unpack('>H', mad[16:18])[0]
            key = (attr, mad[3], mad[24:32] != bytes(8))
            if key in seen:
                continue
            seen.add(key)
            ipv6 = MF_IPV6 if v6 else 0
            raw = MF_ICRC | MF_FRAME | ipv6
            # as captured, and aimed at the id in the state that takes it
            write(out, 'fuzz_mad', bytes([0, raw, 0]) + mad)
            aimed = raw | MF_RECEIVER | MF_SENDER | MF_SID
            write(out, 'fuzz_mad', bytes(
                [0, aimed, MAD_TARGET.get(attr, 0)]) + mad)


def pcap_corpus(out, captures):
    n = 0
    for path in captures[:2]:
        for pkt, v6 in datagrams(path):
            if n == 8:
                return
            n += 1
            alen = 16 if v6 else 4
            addr = lambda last: bytes(alen - 1) + bytes([last])
            for tx in (0, 1):
                head = bytes([tx | (2 if v6 else 0)]) + addr(1) + addr(2) \
                    + struct.pack('>HHBHH', 0xC123, 4791, 2, 7, len(pkt))
                write(out, 'fuzz_pcap',
                      head + pkt + (bytes([3 * n]) if tx else b''))


def config_corpus(out):
    files = [
        b'# uroce\nport = 4791\nmtu = 1024\naddrs = 127.0.0.1, ::1\n'
        b'window = 128\nrate = 25\n',
        b'faults = drop=0.02,dup=0.01,reorder=0.01,seed=7\ndebug = 1\n'
        b'pcap = /tmp/x-%p.pcap\nengine = spin\nshm = 0\n',
        b'port=0x12b7\nmtu=4096\nrate=0.5\nwindow = 8388607\n',
    ]
    for f in files:
        write(out, 'fuzz_config', f)
    env = [b'4791', b'2048', b'::1,127.0.0.1', b'64', b'100',
           b'drop=0.5,seed=3', b'0', b'/tmp/c.pcap', b'sleep', b'1']
    write(out, 'fuzz_config', b'\0' + b'\0'.join(env))
    write(out, 'fuzz_config', files[0] + b'\0' + b'\0'.join(env[:3]))


def main():
    if len(sys.argv) < 3:
        sys.exit(__doc__)
    out, captures = sys.argv[1], sys.argv[2:]
    linux = sorted(glob.glob(os.path.join(
        HERE, '..', 'cm', 'linux-captures', '*.pcap')))
    receive_corpus(out, captures + linux)
    mad_corpus(out)
    pcap_corpus(out, captures)
    config_corpus(out)


if __name__ == '__main__':
    main()
