#!/usr/bin/env python3
"""Wire tests for uroce: capture RoCEv2 traffic and check it.

  wire_check.py --traffic BIN --lib DIR --work DIR loopback --family 4|6
  wire_check.py --traffic BIN --lib DIR --work DIR netns
  wire_check.py --traffic BIN --lib DIR --work DIR mpe --program RC_MPE
  wire_check.py --traffic BIN --lib DIR --work DIR mw --program RC_MW

loopback: runs wire_traffic (scenarios "all" and "loss") between two
processes over 127.0.0.1 or ::1 with UROCE_PCAP set for both, then checks
both captures: tshark decodes every frame as InfiniBand with no expert info
or malformed packet; every decoded header field equals what the requester
posted (per PSN, so retransmissions must repeat the original exactly), over
RC, UC and UD QPs (the DETH's Q_Key is the one the work request named, or
the sending QP's own for a named Q_Key with the high bit set); only RC
acknowledges or sends a packet twice; every opcode uroce emits appears;
every ICRC equals the one scapy (IPv4) and an independent zlib
implementation (both families) compute; the two processes' captures hold
the same datagrams.

netns: builds hostA -- router -- hostB out of three network namespaces and
two veth pairs, runs the "all" scenario over IPv4 and IPv6 across the router
(port MTU 1024, which the veths' 1500 bytes carry) while tcpdump records
both veths, and checks that the IP headers the kernel sent are the ones
uroce's ICRC assumed (and wrote in its own capture), that every ICRC
verifies after the hop (TTL decremented) and the checks above.
Needs root; without it the test fails.

mpe: runs rc_mpe's "ok" case (ATOMIC WRITE, FLUSH) with a capture per
process and checks those opcodes' headers byte by byte, their answers (an
empty READ RESPONSE ONLY at the request's PSN) and every ICRC.

mw: runs rc_mw with a capture per process: tshark decodes the SENDs with
Invalidate (opcode 0x17, IETH); the one naming a window is ACKed, the one
naming none NAKed as an invalid request.
"""
import argparse
import collections
import json
import os
import re
import shutil
import signal
import struct
import subprocess
import sys
import time
import zlib

MASK24 = 0xFFFFFF

# Opcodes (IBTA 9.2): a transport service in the high 3 bits, the
# operation in the low 5; OP holds the operations, which are also the RC
# opcodes (service 0x00).
SERVICE = dict(RC=0x00, UC=0x20, UD=0x60)
OP = dict(SEND_FIRST=0, SEND_MIDDLE=1, SEND_LAST=2, SEND_LAST_IMM=3,
          SEND_ONLY=4, SEND_ONLY_IMM=5, WRITE_FIRST=6, WRITE_MIDDLE=7,
          WRITE_LAST=8, WRITE_LAST_IMM=9, WRITE_ONLY=10, WRITE_ONLY_IMM=11,
          READ_REQ=12, READ_RESP_FIRST=13, READ_RESP_MIDDLE=14,
          READ_RESP_LAST=15, READ_RESP_ONLY=16, ACK=17, ATOMIC_ACK=18,
          CMP_SWAP=19, FETCH_ADD=20)
OPNAME = {v: k for k, v in OP.items()}
SERVICE_NAME = {v: k for k, v in SERVICE.items()}
# bytes of extension headers after the BTH, by operation
EXT = {OP['SEND_LAST_IMM']: 4, OP['SEND_ONLY_IMM']: 4, OP['WRITE_FIRST']: 16,
       OP['WRITE_LAST_IMM']: 4, OP['WRITE_ONLY']: 16,
       OP['WRITE_ONLY_IMM']: 20, OP['READ_REQ']: 16,
       OP['READ_RESP_FIRST']: 4, OP['READ_RESP_LAST']: 4,
       OP['READ_RESP_ONLY']: 4, OP['ACK']: 4, OP['ATOMIC_ACK']: 12,
       OP['CMP_SWAP']: 28, OP['FETCH_ADD']: 28}
DETH_LEN = 8             # and the DETH of every UD packet
QKEY_OWN_BIT = 0x80000000  # in a WR: "the sending QP's Q_Key" (IBTA 10.2.5)
AETH_ACK = 0x1F          # ACK, credits "unlimited"
AETH_RNR = 0x20
AETH_NAK_SEQ = 0x60
AETH_NAK_ACCESS = 0x62

# Payload heuristics tshark runs on InfiniBand payloads: they guess at
# protocols inside our test data (an 0x0800 at the start passes for IPv4)
# and report those guesses as malformed.  And those it runs on the private
# data of CM MADs: Wireshark's SDP dissector (packet-infiniband_sdp.c)
# claims the REP, RTU, DREQ and DREP of any connection whose service ID has
# bit 16 set (its SERVICE_ID_MASK 0x10000), which every service ID of
# rdma_cm's IB port space (0x013F << 16 | port) has, and decodes their
# private data as "SDP Hello": uroce's XRC connections (rdma_xserver -c x),
# for every port, and the kernel's alike, whose CM sends the same service
# ID.  Names that this tshark does not know are left out.
IB_HEURISTICS = ['eth_over_ib', 'rpcrdma_infiniband', 'iser_infiniband',
                 'lnet_ib', 'mellanox_eoib', 'sdp_infiniband',
                 'smb_direct_infiniband', 'smcr_infiniband', 'drbd_rdma',
                 'nvme_rdma', 'fc_infiniband', 'sdp_ib_private',
                 'iser_ib_private', 'nvme_rdma_cm_private',
                 'lnet_ib_cm_private']

FIELDS = ['frame.number', 'eth.type', 'ip.src', 'ip.dst', 'ip.id',
          'ip.flags.df', 'ip.len', 'ip.ttl', 'ipv6.src', 'ipv6.dst',
          'ipv6.plen', 'udp.srcport', 'udp.dstport', 'udp.length',
          'udp.checksum', 'infiniband.bth.opcode', 'infiniband.bth.se',
          'infiniband.bth.m', 'infiniband.bth.padcnt',
          'infiniband.bth.tver', 'infiniband.bth.p_key',
          'infiniband.bth.destqp', 'infiniband.bth.a',
          'infiniband.bth.psn', 'infiniband.reth.va',
          'infiniband.reth.r_key', 'infiniband.reth.dmalen',
          'infiniband.aeth.syndrome', 'infiniband.aeth.msn',
          'infiniband.deth.q_key', 'infiniband.deth.srcqp',
          'infiniband.immdt', 'infiniband.atomiceth.swapdt',
          'infiniband.atomiceth.cmpdt', 'infiniband.atomicacketh.origremdt',
          'infiniband.invariant.crc']

errors = []


def opname(opc):
    """RC opcodes by their operation's name, the others prefixed with the
    service: UC_SEND_FIRST."""
    service = SERVICE_NAME.get(opc & 0xE0, '0x%02x' % (opc & 0xE0))
    name = OPNAME.get(opc & 0x1F, '0x%02x' % (opc & 0x1F))
    return name if service == 'RC' else service + '_' + name


def ext_len(opc):
    return EXT.get(opc & 0x1F, 0) + (DETH_LEN if opc & 0xE0 == SERVICE['UD']
                                     else 0)


def fail(msg):
    errors.append(msg)
    if len(errors) <= 40:
        print('FAIL: ' + msg, file=sys.stderr)


def die(msg):
    print('FAIL: ' + msg, file=sys.stderr)
    sys.exit(1)


# ---- tshark ---------------------------------------------------------------

_heuristics = None


def tshark_base(pcap):
    """tshark with the payload heuristics off (those it knows; it checks
    the names only when it reads a file)."""
    global _heuristics
    if _heuristics is None:
        _heuristics = []
        for h in IB_HEURISTICS:
            r = subprocess.run(['tshark', '--disable-heuristic', h, '-r',
                                pcap, '-c', '1'], capture_output=True,
                               text=True, timeout=60)
            if r.returncode == 0 and 'No such' not in r.stderr:
                _heuristics += ['--disable-heuristic', h]
    return ['tshark', '-n'] + _heuristics


def tshark(pcap, args, timeout=120):
    r = subprocess.run(tshark_base(pcap) + ['-r', pcap] + args, capture_output=True, text=True,
                       timeout=timeout)
    if r.returncode != 0:
        die('tshark -r %s %s: %s' % (pcap, ' '.join(args), r.stderr.strip()))
    return r.stdout


def num(v):
    """A tshark field value: decimal, 0x hex, True/False, or '' (absent)."""
    if v == '':
        return None
    if v in ('True', 'False'):
        return int(v == 'True')
    return int(v, 0)


def decode(pcap):
    """One dict per frame, the fields named in FIELDS."""
    return decode_with(pcap, [])


def decode_with(pcap, raw_fields):
    """decode, plus fields kept as tshark prints them."""
    fields = FIELDS + raw_fields
    out = tshark(pcap, ['-T', 'fields', '-E', 'separator=\t',
                  '-E', 'occurrence=f'] +
                 sum((['-e', f] for f in fields), []))
    frames = []
    for line in out.splitlines():
        vals = line.split('\t')
        vals += [''] * (len(fields) - len(vals))
        f = dict(zip(fields, vals))
        for k in FIELDS:
            if k in ('ip.src', 'ip.dst', 'ipv6.src', 'ipv6.dst',
                     'infiniband.immdt'):
                continue
            f[k] = num(f[k])
        frames.append(f)
    return frames


# Expert info that says nothing of the packet: Wireshark's UDP dissector
# notes any datagram from or to a port in 33434-33534 as a possible
# traceroute probe (Chat level), and the ports the kernel picks for a
# process's QP1 socket (its ephemeral range, 32768-60999) include those.
IGNORED_EXPERT = ('Possible traceroute',)


def check_expert(pcap):
    """No frame of the capture has expert info (but IGNORED_EXPERT) or is
    malformed."""
    out = tshark(pcap, ['-Y', '_ws.expert || _ws.malformed', '-T', 'fields',
                        '-E', 'separator=/t', '-E', 'occurrence=a',
                        '-E', 'aggregator=|', '-e', 'frame.number',
                        '-e', '_ws.expert.message', '-e', '_ws.malformed'])
    bad = []
    for line in out.splitlines():
        number, messages, malformed = (line.split('\t') + ['', ''])[:3]
        kept = [m for m in messages.split('|')
                if m and not m.startswith(IGNORED_EXPERT)]
        if kept or malformed:
            bad.append(number)
    if bad:
        out = tshark(pcap, ['-Y', ' || '.join('frame.number == ' + n
                                              for n in bad[:10])])
        for line in out.splitlines()[:10]:
            fail('%s: tshark reports: %s' % (pcap, line.strip()))
    ib = tshark(pcap, ['-Y', '!infiniband.bth'])
    for line in ib.splitlines()[:10]:
        fail('%s: not decoded as InfiniBand: %s' % (pcap, line.strip()))


# ---- ICRC -----------------------------------------------------------------

def icrc_zlib(frame):
    """The ICRC of an Ethernet frame, from the IBTA A17 rules (plain zlib)."""
    etype = struct.unpack('!H', frame[12:14])[0]
    p = frame[14:]
    if etype == 0x0800:
        ihl = (p[0] & 15) * 4
        ip = bytearray(p[:ihl])
        ip[1] = 0xFF                    # TOS
        ip[8] = 0xFF                    # TTL
        ip[10:12] = b'\xff\xff'         # header checksum
    elif etype == 0x86DD:
        ihl = 40
        ip = bytearray(p[:40])
        ip[0] |= 0x0F                   # traffic class, flow label
        ip[1:4] = b'\xff\xff\xff'
        ip[7] = 0xFF                    # hop limit
    else:
        raise ValueError('ethertype 0x%04x' % etype)
    udp = bytearray(p[ihl:ihl + 8])
    udp[6:8] = b'\xff\xff'
    udp_len = struct.unpack('!H', udp[4:6])[0]
    bth = bytearray(p[ihl + 8:ihl + 20])
    bth[4] = 0xFF                       # FECN, BECN, resv6
    rest = p[ihl + 20:ihl + udp_len - 4]
    crc = zlib.crc32(b'\xff' * 8 + bytes(ip) + bytes(udp) + bytes(bth) +
                     rest)
    return struct.pack('<I', crc), p[ihl + udp_len - 4:ihl + udp_len]


def check_icrc(pcap):
    """Every ICRC equals zlib's and, for IPv4, scapy's; a corrupted copy of
    the first frame must fail both, so the checks are not vacuous."""
    from scapy.all import Ether, IP, UDP, raw, rdpcap
    from scapy.contrib.roce import BTH
    pkts = rdpcap(pcap)
    if not pkts:
        fail('%s: empty capture' % pcap)
        return []
    v4 = 0
    for i, p in enumerate(pkts):
        frame = raw(p)
        want, got = icrc_zlib(frame)
        if want != got:
            fail('%s frame %d: ICRC %s, computed %s' % (pcap, i + 1,
                                                       got.hex(), want.hex()))
        if IP in p:
            v4 += 1
            q = Ether(frame)
            q[BTH].icrc = None
            if raw(q)[-4:] != got:
                fail('%s frame %d: ICRC %s, scapy computes %s' %
                     (pcap, i + 1, got.hex(), raw(q)[-4:].hex()))
    bad = bytearray(raw(pkts[0]))
    bad[-6] ^= 0x10
    if icrc_zlib(bytes(bad))[0] == bytes(bad[-4:]):
        fail('ICRC self-test: a corrupted frame passes')
    if IP in pkts[0]:
        q = Ether(bytes(bad))
        q[BTH].icrc = None
        if raw(q)[-4:] == bytes(bad[-4:]):
            fail('ICRC self-test: scapy accepts a corrupted frame')
    print('%s: %d frames, ICRC ok (%d also by scapy)' % (pcap, len(pkts), v4))
    return [bytes(p[UDP].payload) for p in pkts]


# ---- what the requester posted, packet by packet --------------------------

def ceil_div(a, b):
    return (a + b - 1) // b


class Pair:
    """Expected packets of one QP pair, indexed by PSN offset.  For UD, the
    requester's QP and the QPs its SENDs went to."""

    def __init__(self, info):
        self.info = info
        self.service = info['type']
        self.mtu = info['mtu']
        self.dests = {info['resp_qpn']}     # QPNs the requests go to
        self.req = {}           # index -> expected request packet
        self.resp = {}          # index -> expected READ response / atomic ACK
        self.msgs = []          # (first index, last index) per executed msg
        self.rnr = None         # index of the SEND that met no receive
        self.access_err = None  # index of the request NAKed for access
        self.next = 0

    def idx(self, psn):
        return (psn - self.info['psn']) & MASK24

    def add(self, wr):
        op, n, i = wr['op'], wr['len'], self.next
        if self.service == 'UD':
            npk = 1
            if n > self.mtu:
                fail('UD %s of %d bytes, beyond the MTU %d' % (op, n,
                                                               self.mtu))
            imm = op == 'SEND_IMM'
            qkey = wr['remote_qkey']
            if qkey & QKEY_OWN_BIT:
                qkey = self.info['qkey']
            e = dict(opcode=SERVICE['UD'] | OP['SEND_ONLY' +
                                                ('_IMM' if imm else '')],
                     plen=n, pad=-n & 3, ackreq=0, last=True,
                     destqp=wr['dest_qpn'], qkey=qkey,
                     srcqp=self.info['req_qpn'])
            if imm:
                e['imm'] = '%08x' % wr['imm']
            self.req[i] = e
            self.dests.add(wr['dest_qpn'])
        elif op in ('SEND', 'SEND_IMM', 'WRITE', 'WRITE_IMM'):
            npk = max(1, ceil_div(n, self.mtu))
            base = 'SEND' if op.startswith('SEND') else 'WRITE'
            imm = op.endswith('IMM')
            for k in range(npk):
                first, last = k == 0, k == npk - 1
                plen = n - self.mtu * k if last else self.mtu
                kind = ('ONLY' if first and last else 'FIRST' if first
                        else 'LAST' if last else 'MIDDLE')
                name = base + '_' + kind + ('_IMM' if imm and last else '')
                # only RC asks for ACKs
                e = dict(opcode=SERVICE[self.service] | OP[name], plen=plen,
                         pad=-plen & 3, last=last,
                         ackreq=int(self.service == 'RC' and
                                    (last or (k + 1) % 32 == 0)))
                if base == 'WRITE' and first:
                    e.update(va=wr['va'], rkey=wr['rkey'], dmalen=n)
                if imm and last:
                    e['imm'] = '%08x' % wr['imm']
                self.req[i + k] = e
        elif op == 'READ':
            npk = max(1, ceil_div(n, self.mtu))
            self.req[i] = dict(opcode=OP['READ_REQ'], plen=0, pad=0,
                               ackreq=1, last=True, va=wr['va'],
                               rkey=wr['rkey'], dmalen=n)
            for k in range(npk):
                first, last = k == 0, k == npk - 1
                plen = n - self.mtu * k if last else self.mtu
                kind = ('ONLY' if first and last else 'FIRST' if first
                        else 'LAST' if last else 'MIDDLE')
                e = dict(opcode=OP['READ_RESP_' + kind], plen=plen,
                         pad=-plen & 3)
                if kind != 'MIDDLE':
                    e.update(syndrome=AETH_ACK, msn=len(self.msgs) + 1)
                self.resp[i + k] = e
        else:
            npk = 1
            # AtomicETH: VA, R_Key, swap or add data, compare data
            # (unused by FETCH_ADD, not checked)
            if op == 'CMP_SWAP':
                data = dict(compare=wr['compare_add'], swap=wr['swap'])
            else:
                data = dict(swap=wr['compare_add'])
            self.req[i] = dict(opcode=OP[op], plen=0, pad=0, ackreq=1,
                               last=True, va=wr['va'], rkey=wr['rkey'],
                               **data)
            self.resp[i] = dict(opcode=OP['ATOMIC_ACK'], plen=0, pad=0,
                                syndrome=AETH_ACK, msn=len(self.msgs) + 1,
                                orig=wr['orig'])
        if wr['rnr']:
            self.rnr = i
        if wr['status'] == 'success':
            self.msgs.append((i, i + npk - 1))
        elif self.access_err is None:
            self.access_err = i
        self.next = i + npk

    def msn_through(self, i):
        """Messages complete once every PSN up to index i has arrived."""
        return sum(1 for _, last in self.msgs if last <= i)


def check_frames(pcap, frames, pairs, seen):
    """Each frame against the expectations of the pair it belongs to."""
    by_qpn = {}
    for p in pairs.values():
        for qpn, direction in [(d, 'req') for d in p.dests] + \
                [(p.info['req_qpn'], 'resp')]:
            if qpn in by_qpn:
                # a QPN used twice would leave its frames ambiguous
                fail('%s: QPN 0x%x belongs to pairs %s and %s' %
                     (pcap, qpn, by_qpn[qpn][0].info['pair'],
                      p.info['pair']))
            by_qpn[qpn] = (p, direction)
    first_tx = set()
    for f in frames:
        where = '%s frame %d' % (pcap, f['frame.number'])
        opc = f['infiniband.bth.opcode']
        if opc is None:
            continue                    # reported by check_expert
        qpn = f['infiniband.bth.destqp']
        if qpn not in by_qpn:
            fail('%s: DestQP 0x%x belongs to no QP of the test' % (where, qpn))
            continue
        pair, direction = by_qpn[qpn]
        i = pair.idx(f['infiniband.bth.psn'])
        ext = ext_len(opc)
        pad = f['infiniband.bth.padcnt']
        plen = f['udp.length'] - 8 - 12 - ext - pad - 4
        got = dict(opcode=opc, plen=plen, pad=pad)
        common = dict(se=f['infiniband.bth.se'], m=f['infiniband.bth.m'],
                      tver=f['infiniband.bth.tver'],
                      pkey=f['infiniband.bth.p_key'])
        if common != dict(se=0, m=1, tver=0, pkey=0xFFFF):
            fail('%s: BTH SE/MigReq/TVer/P_Key %s' % (where, common))
        if f['udp.dstport'] != 4791 or not 0xC000 <= f['udp.srcport'] <= 0xFFFF:
            fail('%s: UDP ports %s -> %s' % (where, f['udp.srcport'],
                                             f['udp.dstport']))
        seen.add(opc)
        if opc == OP['ACK']:
            if pair.service != 'RC':
                fail('%s: ACK for %s pair %s' % (where, pair.service,
                                                pair.info['pair']))
                continue
            check_ack(where, pair, i, f, seen)
            continue
        table = pair.req if direction == 'req' else pair.resp
        e = table.get(i)
        if e is None:
            fail('%s: %s PSN %d (index %d) was never posted' %
                 (where, opname(opc), f['infiniband.bth.psn'], i))
            continue
        if direction == 'req':
            got['ackreq'] = f['infiniband.bth.a']
            if (qpn, i) in first_tx and pair.service != 'RC':
                fail('%s: %s PSN %d sent twice; only RC retransmits' %
                     (where, opname(opc), f['infiniband.bth.psn']))
            if (qpn, i) in first_tx and not e['last']:
                # a rewind restarts the count of packets between AckReqs
                got['ackreq'] = e['ackreq']
            first_tx.add((qpn, i))
        if 'va' in e:
            got.update(va=f['infiniband.reth.va'],
                       rkey=f['infiniband.reth.r_key'])
            if 'dmalen' in e:
                got['dmalen'] = f['infiniband.reth.dmalen']
        if 'destqp' in e:
            got['destqp'] = qpn
        if 'qkey' in e:
            got.update(qkey=f['infiniband.deth.q_key'],
                       srcqp=f['infiniband.deth.srcqp'])
        if 'imm' in e:
            got['imm'] = f['infiniband.immdt'].replace(':', '')
        if 'swap' in e:
            got['swap'] = f['infiniband.atomiceth.swapdt']
        if 'compare' in e:
            got['compare'] = f['infiniband.atomiceth.cmpdt']
        if 'syndrome' in e:
            got.update(syndrome=f['infiniband.aeth.syndrome'],
                       msn=f['infiniband.aeth.msn'])
        if 'orig' in e:
            got['orig'] = f['infiniband.atomicacketh.origremdt']
        want = {k: v for k, v in e.items() if k != 'last'}
        if got != want:
            diff = {k: (got.get(k), v) for k, v in want.items()
                    if got.get(k) != v}
            fail('%s: %s index %d: (decoded, posted) differ: %s' %
                 (where, opname(opc), i, diff))


def check_ack(where, pair, i, f, seen):
    syn, msn = f['infiniband.aeth.syndrome'], f['infiniband.aeth.msn']
    seen.add(('syndrome', syn if syn & 0x60 != AETH_RNR else AETH_RNR))
    if syn == AETH_ACK:
        want_msn = pair.msn_through(i)
        if i >= pair.next:
            fail('%s: ACK of index %d, beyond the last PSN sent' % (where, i))
    elif syn & 0xE0 == AETH_RNR:
        want_msn = pair.msn_through(i - 1)
        if syn != AETH_RNR | pair.info['min_rnr_timer'] or i != pair.rnr:
            fail('%s: RNR NAK 0x%x at index %d; want 0x%x at %s' %
                 (where, syn, i, AETH_RNR | pair.info['min_rnr_timer'],
                  pair.rnr))
    elif syn == AETH_NAK_SEQ:
        want_msn = pair.msn_through(i - 1)
    elif syn == AETH_NAK_ACCESS:
        want_msn = pair.msn_through(i - 1)
        if i != pair.access_err:
            fail('%s: access NAK at index %d, want %s' %
                 (where, i, pair.access_err))
    else:
        fail('%s: unexpected AETH syndrome 0x%x' % (where, syn))
        return
    if msn != want_msn:
        fail('%s: AETH 0x%x index %d: MSN %d, want %d' %
             (where, syn, i, msn, want_msn))


def check_ip(pcap, frames, family, kernel=False):
    """The outer headers uroce's ICRC assumes (IPv4: small ID, DF)."""
    for f in frames:
        where = '%s frame %d' % (pcap, f['frame.number'])
        if family == 4:
            if f['eth.type'] != 0x0800:
                fail('%s: not IPv4' % where)
                continue
            # ID 0, or k for segment k of a UDP GSO send (at most 64);
            # check_icrc proves it is the ID the ICRC was computed over
            if f['ip.id'] >= 64 or (f['ip.flags.df'], f['ip.len']) != \
                    (1, f['udp.length'] + 20):
                fail('%s: IPv4 ID %s DF %s length %s (UDP %s)' %
                     (where, f['ip.id'], f['ip.flags.df'], f['ip.len'],
                      f['udp.length']))
        else:
            if f['eth.type'] != 0x86DD:
                fail('%s: not IPv6' % where)
                continue
            if f['ipv6.plen'] != f['udp.length']:
                fail('%s: IPv6 payload length %s, UDP %s' %
                     (where, f['ipv6.plen'], f['udp.length']))


# ---- running the traffic ---------------------------------------------------

def start(cmd, env, out):
    return subprocess.Popen(cmd, env=env, stdout=out, stderr=subprocess.PIPE,
                            text=True)


def run_pair(a, tag, scenario, req_env, resp_env, req_prefix=(),
             resp_prefix=()):
    """Runs responder and requester; returns (posted records, pcaps)."""
    sock = os.path.join(a.work, tag + '.sock')
    pcaps = {r: os.path.join(a.work, '%s.%s.pcap' % (tag, r))
             for r in ('requester', 'responder')}
    procs = {}
    for role, extra, prefix in (('responder', resp_env, resp_prefix),
                                ('requester', req_env, req_prefix)):
        env = dict(os.environ)
        env.update(extra)
        env['UROCE_PCAP'] = pcaps[role]
        env['LD_LIBRARY_PATH'] = a.lib
        if os.path.exists(pcaps[role]):
            os.unlink(pcaps[role])
        procs[role] = start(list(prefix) + [a.traffic, role, sock, scenario],
                            env, subprocess.PIPE)
    ok = True
    outs = {}
    for role, p in procs.items():
        try:
            outs[role] = p.communicate(timeout=90)
        except subprocess.TimeoutExpired:
            p.kill()
            outs[role] = p.communicate()
        if p.returncode != 0:
            ok = False
            print('%s %s exited %s:\n%s' % (tag, role, p.returncode,
                                            outs[role][1]), file=sys.stderr)
        elif outs[role][1].strip():
            # uroce reports missing capture frames on stderr
            fail('%s %s stderr: %s' % (tag, role, outs[role][1].strip()))
    if not ok:
        die('%s: traffic failed' % tag)
    posted = [json.loads(line) for line in outs['requester'][0].splitlines()]
    return posted, pcaps


def check_run(tag, posted, pcaps, family, want_ops, want_syndromes,
              same_datagrams=True):
    pairs = pairs_of(posted)
    payloads = {}
    for role, pcap in pcaps.items():
        if not os.path.exists(pcap):
            fail('%s: no capture %s' % (tag, pcap))
            continue
        check_expert(pcap)
        frames = decode(pcap)
        seen = set()
        check_frames(pcap, frames, pairs, seen)
        check_ip(pcap, frames, family)
        missing = [opname(o) for o in want_ops if o not in seen]
        missing += ['AETH 0x%x' % s for s in want_syndromes
                    if ('syndrome', s) not in seen]
        if missing:
            fail('%s: never seen: %s' % (pcap, ', '.join(missing)))
        payloads[role] = sorted(check_icrc(pcap))
        print('%s: %d frames decoded and checked' % (pcap, len(frames)))
    if same_datagrams and len(payloads) == 2 and \
            payloads['requester'] != payloads['responder']:
        fail('%s: the two captures hold different datagrams (%d vs %d)' %
             (tag, len(payloads['requester']), len(payloads['responder'])))
    return payloads


# every RC opcode; UC's SENDs and WRITEs; UD's SEND only (+IMM)
ALL_OPS = ([v for k, v in OP.items()] +
           [SERVICE['UC'] | OP[k] for k in OP
            if k.startswith(('SEND_', 'WRITE_'))] +
           [SERVICE['UD'] | OP[k] for k in ('SEND_ONLY', 'SEND_ONLY_IMM')])
ALL_SYNDROMES = [AETH_ACK, AETH_RNR, AETH_NAK_ACCESS]
LOSS_OPS = [OP[k] for k in ('WRITE_FIRST', 'WRITE_MIDDLE', 'WRITE_LAST',
                            'SEND_FIRST', 'SEND_MIDDLE', 'SEND_LAST',
                            'READ_REQ', 'READ_RESP_FIRST',
                            'READ_RESP_MIDDLE', 'READ_RESP_LAST', 'ACK')]
LOSS_FAULTS = 'drop=0.1,seed=11'


def loopback(a):
    addr = '127.0.0.1' if a.family == 4 else '::1'
    env = {'UROCE_ADDRS': addr}
    tag = 'ipv%d' % a.family
    posted, pcaps = run_pair(a, tag + '.all', 'all', env, env)
    check_run(tag + '.all', posted, pcaps, a.family, ALL_OPS, ALL_SYNDROMES)
    posted, pcaps = run_pair(a, tag + '.loss', 'loss', env,
                             dict(env, UROCE_FAULTS=LOSS_FAULTS))
    check_run(tag + '.loss', posted, pcaps, a.family, LOSS_OPS,
              [AETH_ACK, AETH_NAK_SEQ])


# ---- FLUSH and ATOMIC WRITE (rc_mpe) -----------------------------------------

# This tshark (4.0) does not know the memory placement extensions' opcodes:
# it decodes their BTH only, and the rest is checked here byte by byte
# against the layout Soft-RoCE sends (BTH, FETH, RETH for FLUSH; BTH, RETH,
# 8 bytes for ATOMIC WRITE; both answered by an empty READ RESPONSE ONLY).
FLUSH, ATOMIC_WRITE = 0x1C, 0x1D


def mpe(a):
    from scapy.all import UDP, rdpcap
    for pcap in captures_of(a, 'mpe', a.program, ['ok']):
        check_expert(pcap)
        check_icrc(pcap)
        frames = decode(pcap)
        raws = [bytes(p[UDP].payload) for p in rdpcap(pcap)]
        requests, answers, seen = {}, {}, set()
        for f, ib in zip(frames, raws):
            where = '%s frame %d' % (pcap, f['frame.number'])
            opc, psn = f['infiniband.bth.opcode'], f['infiniband.bth.psn']
            if opc in (FLUSH, ATOMIC_WRITE):
                want_len = 12 + (4 + 16 if opc == FLUSH else 16 + 8) + 4
                if len(ib) != want_len or f['infiniband.bth.a'] != 1 or \
                        f['infiniband.bth.padcnt'] != 0:
                    fail('%s: opcode 0x%02x: %d bytes, AckReq %s, pad %s' %
                         (where, opc, len(ib), f['infiniband.bth.a'],
                          f['infiniband.bth.padcnt']))
                    continue
                if opc == FLUSH:
                    feth = struct.unpack('!I', ib[12:16])[0]
                    plt, sel = feth & 0xF, (feth >> 4) & 3
                    if feth >> 6 or plt not in (1, 2, 3) or sel > 1:
                        fail('%s: FETH 0x%08x' % (where, feth))
                    seen.add(('FLUSH', plt, sel))
                    va, rkey, dmalen = struct.unpack('!QII', ib[16:32])
                    if sel == 0 and dmalen == 0:
                        fail('%s: range FLUSH of 0 bytes' % where)
                else:
                    va, rkey, dmalen = struct.unpack('!QII', ib[12:28])
                    if dmalen != 8 or va & 7:
                        fail('%s: ATOMIC WRITE VA 0x%x length %d' %
                             (where, va, dmalen))
                    seen.add(('ATOMIC_WRITE',))
                requests[psn] = opc
            elif opc == OP['READ_RESP_ONLY'] and len(ib) == 12 + 4 + 4:
                answers[psn] = f['infiniband.aeth.syndrome']
        for psn, opc in requests.items():
            if answers.get(psn) != AETH_ACK:
                fail('%s: opcode 0x%02x PSN %d: answer %s, want an empty '
                     'READ RESPONSE ONLY with AETH 0x%x' %
                     (pcap, opc, psn, answers.get(psn), AETH_ACK))
        want = {('ATOMIC_WRITE',), ('FLUSH', 1, 0), ('FLUSH', 3, 1)}
        if not want <= seen:
            fail('%s: never seen: %s' % (pcap, sorted(want - seen)))
        print('%s: %d FLUSH / ATOMIC WRITE requests checked' %
              (pcap, len(requests)))


def captures_of(a, name, program, args=()):
    """Runs a two-process test program with a capture per process."""
    work = os.path.join(a.work, name)
    shutil.rmtree(work, ignore_errors=True)
    os.makedirs(work)
    env = dict(os.environ, LD_LIBRARY_PATH=a.lib,
               UROCE_PCAP=os.path.join(work, name + '.%p.pcap'))
    r = subprocess.run([program] + list(args), env=env, capture_output=True,
                       text=True, timeout=90)
    if r.returncode != 0:
        die('%s: %s%s' % (program, r.stdout, r.stderr))
    pcaps = sorted(os.path.join(work, f) for f in os.listdir(work))
    if len(pcaps) != 2:
        die('want a capture per process, got %s' % pcaps)
    return pcaps


SEND_ONLY_INV = 0x17
AETH_NAK_INV_REQ = 0x61


def mw(a):
    """rc_mw's SENDs with Invalidate: tshark decodes their IETH; the one
    naming a window is ACKed, the one naming none NAKed (invalid request)."""
    for pcap in captures_of(a, 'mw', a.program):
        check_expert(pcap)
        check_icrc(pcap)
        frames = decode_with(pcap, ['infiniband.ieth'])
        # every round reuses the PSNs on new QPs: a SEND's answer is the
        # first ACK with its PSN that follows it; a retransmission (a slow
        # build can time out) is the same SEND again
        sends, answers, waiting = {}, {}, {}
        for f in frames:
            opc, psn = f['infiniband.bth.opcode'], f['infiniband.bth.psn']
            if opc == SEND_ONLY_INV:
                key = (f['infiniband.bth.destqp'], psn)
                sends.setdefault(key, f)
                waiting[psn] = key
            elif opc == OP['ACK'] and psn in waiting:
                answers[waiting.pop(psn)] = f['infiniband.aeth.syndrome']
        got = []
        for n, f in sends.items():
            plen = f['udp.length'] - 8 - 12 - 4 - 4 - f['infiniband.bth.padcnt']
            if plen != 16 or not re.fullmatch(r'[0-9a-f]{8}',
                                              f['infiniband.ieth'] or ''):
                fail('%s frame %d: SEND Only with Invalidate: payload %d, '
                     'IETH %r' % (pcap, f['frame.number'], plen,
                                  f['infiniband.ieth']))
            got.append(answers.get(n))
        if sorted(got, key=str) != sorted([AETH_ACK, AETH_NAK_INV_REQ],
                                          key=str):
            fail('%s: SEND with Invalidate answers %s, want one ACK 0x%x '
                 'and one NAK 0x%x' % (pcap, got, AETH_ACK, AETH_NAK_INV_REQ))
        print('%s: %d SEND with Invalidate checked' % (pcap, len(sends)))


# ---- XRC, from an unmodified ibv_xsrq_pingpong ------------------------------

XRC = 0xA0
XRC_ADDR = re.compile(r'(local|remote): LID \w+, QPN RECV (\w+) SEND (\w+), '
                      r'PSN \w+, SRQN (\w+)')


def tcp_listening(port):
    """Whether a TCP socket listens on port (from the kernel's tables, as
    connecting would use up the server's accept)."""
    for table in ('/proc/net/tcp', '/proc/net/tcp6'):
        with open(table) as f:
            for line in f.readlines()[1:]:
                cols = line.split()
                if cols[1].endswith(':%04X' % port) and cols[3] == '0A':
                    return True
    return False


def free_tcp_port():
    import socket
    with socket.socket() as s:
        s.bind(('127.0.0.1', 0))
        return s.getsockname()[1]


def xsrq_pair(a, tag, args, env):
    """Runs ibv_xsrq_pingpong as server and client with captures; returns
    {role: (pcap, {'local'/'remote': (recv qpn, send qpn, srqn)})}."""
    port = free_tcp_port()
    out = {}
    procs = {}
    for role in ('server', 'client'):
        e = dict(os.environ, **env)
        e['LD_LIBRARY_PATH'] = a.lib
        pcap = os.path.join(a.work, '%s.%s.pcap' % (tag, role))
        if os.path.exists(pcap):
            os.unlink(pcap)
        e['UROCE_PCAP'] = pcap
        if a.preload:
            e['LD_PRELOAD'] = a.preload
            e['ASAN_OPTIONS'] = 'detect_leaks=0'    # the tool's own leaks
        cmd = [a.tool, '-g', '0', '-p', str(port)] + args
        if role == 'client':
            cmd.append('127.0.0.1')
        procs[role] = (subprocess.Popen(cmd, env=e, stdout=subprocess.PIPE,
                                        stderr=subprocess.STDOUT, text=True),
                       pcap)
        if role == 'server':
            end = time.time() + 20
            while not tcp_listening(port) and time.time() < end:
                time.sleep(0.05)
    for role, (p, pcap) in procs.items():
        try:
            text = p.communicate(timeout=60)[0]
        except subprocess.TimeoutExpired:
            p.kill()
            text = p.communicate()[0]
        if p.returncode != 0 or 'success' not in text:
            die('%s %s failed (%s):\n%s' % (tag, role, p.returncode, text))
        addrs = {m.group(1): tuple(int(m.group(i), 16) for i in (2, 3, 4))
                 for m in XRC_ADDR.finditer(text)}
        if set(addrs) != {'local', 'remote'}:
            die('%s %s: no addresses in its output:\n%s' % (tag, role, text))
        out[role] = (pcap, addrs)
    return out


def check_xrc_capture(pcap, addrs, seen):
    """Every frame is XRC; a request goes to a target QP with the XRCETH
    naming that side's SRQ, an ACK to an initiator QP."""
    (l_recv, l_send, l_srqn), (r_recv, r_send, r_srqn) = \
        addrs['local'], addrs['remote']
    check_expert(pcap)
    frames = decode(pcap)
    payloads = check_icrc(pcap)
    if len(payloads) != len(frames):
        die('%s: scapy and tshark see different frames' % pcap)
    for f, pl in zip(frames, payloads):
        opc, dqp = f['infiniband.bth.opcode'], f['infiniband.bth.destqp']
        where = '%s frame %d' % (pcap, f['frame.number'])
        seen.add(opc)
        if opc & 0xE0 != XRC:
            fail('%s: opcode 0x%02x is not XRC' % (where, opc))
        elif opc & 0x1F == OP['ACK']:
            if dqp not in (l_send, r_send):
                fail('%s: ACK to QP 0x%x, not an initiator' % (where, dqp))
        else:
            srqn = struct.unpack('!I', pl[12:16])[0] & MASK24
            want = {l_recv: l_srqn, r_recv: r_srqn}.get(dqp)
            if want is None:
                fail('%s: request to QP 0x%x, not a target' % (where, dqp))
            elif srqn != want:
                fail('%s: XRCETH names SRQ %d, want %d' % (where, srqn, want))
    print('%s: %d XRC frames checked' % (pcap, len(frames)))
    return sorted(payloads)


def xrc(a):
    addr = '127.0.0.1' if a.family == 4 else '::1'
    env = {'UROCE_ADDRS': addr}
    want = {XRC | OP[k] for k in ('SEND_FIRST', 'SEND_MIDDLE', 'SEND_LAST',
                                  'SEND_ONLY', 'ACK')}
    seen = set()
    # 2500 bytes at path MTU 1024: FIRST, MIDDLE, LAST; 1 byte: ONLY
    for size in (2500, 1):
        tag = 'ipv%d.xrc.s%d' % (a.family, size)
        runs = xsrq_pair(a, tag, ['-m', '1024', '-s', str(size), '-n', '4'],
                         env)
        payloads = [check_xrc_capture(pcap, addrs, seen)
                    for pcap, addrs in runs.values()]
        if payloads[0] != payloads[1]:
            fail('%s: the two captures hold different datagrams' % tag)
    missing = ['0x%02x' % o for o in sorted(want - seen)]
    if missing:
        fail('XRC opcodes never seen: ' + ', '.join(missing))


# ---- network namespaces ---------------------------------------------------

def sh(*cmd, check=True):
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=30)
    if check and r.returncode != 0:
        raise RuntimeError('%s: %s' % (' '.join(cmd), r.stderr.strip()))
    return r


class Netns:
    """hostA (a0) -- (r0) router (r1) -- (b0) hostB, private addresses."""

    def __init__(self):
        tag = 'uwire%d' % os.getpid()
        self.a, self.r, self.b = tag + 'a', tag + 'r', tag + 'b'

    def up(self):
        for ns in (self.a, self.r, self.b):
            sh('ip', 'netns', 'add', ns)
        sh('ip', 'link', 'add', 'a0', 'netns', self.a, 'type', 'veth',
           'peer', 'name', 'r0', 'netns', self.r)
        sh('ip', 'link', 'add', 'b0', 'netns', self.b, 'type', 'veth',
           'peer', 'name', 'r1', 'netns', self.r)
        cfg = [(self.a, 'a0', '10.77.1.2/24', 'fd77:1::2/64', '10.77.1.1',
                'fd77:1::1'),
               (self.b, 'b0', '10.77.2.2/24', 'fd77:2::2/64', '10.77.2.1',
                'fd77:2::1'),
               (self.r, 'r0', '10.77.1.1/24', 'fd77:1::1/64', None, None),
               (self.r, 'r1', '10.77.2.1/24', 'fd77:2::1/64', None, None)]
        for ns, dev, v4, v6, gw4, gw6 in cfg:
            x = ('ip', 'netns', 'exec', ns)
            if gw4:
                # The hosts' veths take no GSO, like NICs without UDP
                # segmentation offload: the kernel cuts uroce's GSO runs
                # in software, so the wire shows the real segments and
                # their IDs (0, 1, ...), which the ICRC must have assumed.
                sh(*x, 'ip', 'link', 'set', dev, 'gso_max_segs', '1')
            sh(*x, 'ip', 'addr', 'add', v4, 'dev', dev)
            sh(*x, 'ip', '-6', 'addr', 'add', v6, 'dev', dev, 'nodad')
            sh(*x, 'ip', 'link', 'set', dev, 'up')
            sh(*x, 'ip', 'link', 'set', 'lo', 'up')
            if gw4:
                sh(*x, 'ip', 'route', 'add', 'default', 'via', gw4)
                sh(*x, 'ip', '-6', 'route', 'add', 'default', 'via', gw6)
        x = ('ip', 'netns', 'exec', self.r)
        sh(*x, 'sysctl', '-q', '-w', 'net.ipv4.ip_forward=1')
        sh(*x, 'sysctl', '-q', '-w', 'net.ipv6.conf.all.forwarding=1')
        # Permanent neighbours: a datagram sent while ARP or neighbour
        # discovery is still resolving waits in a small queue that a
        # burst of GSO runs overflows, and the wire then lacks a packet
        # that uroce handed to the kernel.
        links = [(self.a, 'a0', '10.77.1.2', 'fd77:1::2',
                  self.r, 'r0', '10.77.1.1', 'fd77:1::1'),
                 (self.b, 'b0', '10.77.2.2', 'fd77:2::2',
                  self.r, 'r1', '10.77.2.1', 'fd77:2::1')]
        for ns1, dev1, v4a, v6a, ns2, dev2, v4b, v6b in links:
            mac1, mac2 = self.mac(ns1, dev1), self.mac(ns2, dev2)
            for ns, dev, addrs, mac in ((ns1, dev1, (v4b, v6b), mac2),
                                        (ns2, dev2, (v4a, v6a), mac1)):
                for addr in addrs:
                    sh('ip', 'netns', 'exec', ns, 'ip', 'neigh', 'replace',
                       addr, 'lladdr', mac, 'dev', dev, 'nud', 'permanent')

    @staticmethod
    def mac(ns, dev):
        out = subprocess.run(['ip', 'netns', 'exec', ns, 'cat',
                              '/sys/class/net/%s/address' % dev],
                             capture_output=True, text=True, check=True)
        return out.stdout.strip()

    def down(self):
        for ns in (self.a, self.r, self.b):
            sh('ip', 'netns', 'del', ns, check=False)


def tcpdump(ns, dev, path):
    # a 32 MiB ring (-B, KiB): tcpdump, scheduled late on a busy machine,
    # drops what its default 2 MiB cannot hold ("dropped by kernel")
    p = subprocess.Popen(['ip', 'netns', 'exec', ns, 'tcpdump', '-i', dev,
                          '--immediate-mode', '-U', '-n', '-s', '0',
                          '-B', '32768', '-w', path,
                          'udp port 4791'], stdout=subprocess.DEVNULL,
                         stderr=subprocess.PIPE, text=True)
    # tcpdump says "listening on" once the capture runs
    line = p.stderr.readline()
    if 'listening' not in line:
        p.kill()
        die('tcpdump in %s on %s: %s' % (ns, dev, line.strip()))
    return p


def pcap_frames(path):
    """Whole records in a pcap file that tcpdump may still be writing."""
    with open(path, 'rb') as f:
        data = f.read()
    if len(data) < 24:
        return 0
    # the magic number, microsecond or nanosecond, tells the byte order
    order = '<' if struct.unpack('<I', data[:4])[0] in (0xA1B2C3D4,
                                                        0xA1B23C4D) else '>'
    n, at = 0, 24
    while at + 16 <= len(data):
        at += 16 + struct.unpack_from(order + 'I', data, at + 8)[0]
        if at <= len(data):
            n += 1
    return n


def wait_frames(paths, n, timeout=10):
    """Stopped, tcpdump drops the frames it has not read yet, and on a busy
    machine it can lag far behind: wait until every file holds n frames.
    Past the deadline the checks report what is missing."""
    end = time.monotonic() + timeout
    while time.monotonic() < end and any(pcap_frames(p) < n for p in paths):
        time.sleep(0.1)


def stop(p):
    """Stops tcpdump; returns its closing report ("N packets dropped by
    kernel" and the like), one line, and that count (None: not reported)."""
    p.send_signal(signal.SIGINT)
    try:
        err = p.communicate(timeout=10)[1]
    except subprocess.TimeoutExpired:
        p.kill()
        err = p.communicate()[1]
    m = re.search(r'(\d+) packets? dropped by kernel', err or '')
    return ('; '.join(l.strip() for l in (err or '').splitlines()
                      if 'packets' in l), int(m.group(1)) if m else None)


def udp_headers(pcap, src):
    """UDP payload -> (IP and UDP header fields, TTL, flow label) of each
    frame from address src."""
    from scapy.all import IP, IPv6, UDP, rdpcap, raw
    out = {}
    for p in rdpcap(pcap):
        if IP in p:
            ip = p[IP]
            key = ('4', ip.src, ip.dst, ip.id, int(ip.flags), ip.len,
                   ip.tos, ip.proto)
            ttl = ip.ttl
        else:
            ip = p[IPv6]
            key = ('6', ip.src, ip.dst, ip.tc, ip.plen, ip.nh)
            ttl = ip.hlim
        if ip.src != src:
            continue
        u = p[UDP]
        key += (u.sport, u.dport, u.len)
        # The UDP checksum is left out: veth leaves it to an offload that
        # never happens, so tcpdump sees only the pseudo-header sum (the
        # ICRC masks the field anyway).
        out.setdefault(bytes(u.payload), []).append(
            (key, ttl, ip.fl if IPv6 in p else None))
    return out


def compare_with_kernel(tag, uroce_pcap, wire_pcap, src, hops):
    """uroce's record of what it sent from src must match what the kernel
    put on the wire, field for field but the TTL, which the router
    decrements.  (Past the router the IPv4 header checksum changes too; it
    is left out, as the ICRC masks it.)"""
    ours, wire = udp_headers(uroce_pcap, src), udp_headers(wire_pcap, src)
    n = 0
    if not wire:
        fail('%s: no datagram from %s in %s' % (tag, src, wire_pcap))
    for payload, recs in wire.items():
        if payload not in ours:
            fail('%s: %s holds a datagram uroce did not capture' %
                 (tag, wire_pcap))
            continue
        for key, ttl, fl in recs:
            mine = [k for k, _, _ in ours[payload]]
            if key not in mine:
                fail('%s: kernel sent %s, uroce recorded %s' %
                     (tag, key, mine))
            mine_ttl = ours[payload][0][1]
            if ttl != mine_ttl - hops:
                fail('%s: TTL %d on the wire, uroce %d, hops %d' %
                     (tag, ttl, mine_ttl, hops))
            if fl:
                n += 1
    if n:
        print('%s: the kernel set an IPv6 flow label on %d frames (uroce '
              'records 0; the ICRC masks it)' % (tag, n))


def kernel_counters(n):
    """Every counter of the kernel's that a datagram between the hosts can
    be lost in: the veths' packets and drops (ip -s link), each
    namespace's IP and UDP discards (/proc/net/snmp, snmp6) and the
    per-CPU backlog's drops (softnet_stat, host-wide)."""
    c = collections.Counter()
    for ns, devs in ((n.a, ('a0',)), (n.r, ('r0', 'r1')), (n.b, ('b0',))):
        out = sh('ip', 'netns', 'exec', ns, 'ip', '-s', '-j', 'link',
                 'show').stdout
        for link in json.loads(out):
            if link['ifname'] in devs:
                for d in ('rx', 'tx'):
                    for k in ('packets', 'dropped', 'errors'):
                        c['%s.%s_%s' % (link['ifname'], d, k)] = \
                            link['stats64'][d][k]
        for f in ('snmp', 'snmp6'):
            text = sh('ip', 'netns', 'exec', ns, 'cat',
                      '/proc/net/' + f).stdout
            rows = text.split('\n')
            pairs = []
            if f == 'snmp':
                # "Ip: Forwarding ..." then "Ip: 1 ...", per protocol
                for h, v in zip(rows[0::2], rows[1::2]):
                    proto = h.split(':')[0]
                    pairs += [(proto + k, x) for k, x in
                              zip(h.split()[1:], v.split()[1:])]
            else:
                pairs = [r.split() for r in rows if r.strip()]
            for k, v in pairs:
                if re.search(r'Discard|Drop|Err|NoRoutes|Fail', k) and \
                        v.lstrip('-').isdigit():
                    c['%s.%s' % (ns[-1], k)] = int(v)
    with open('/proc/net/softnet_stat') as f:
        c['softnet.dropped'] = sum(int(l.split()[1], 16) for l in f)
    return c


def datagrams_from(pcap, src):
    """The UDP payloads of the frames from address src, with their count."""
    return collections.Counter({p: len(r) for p, r in
                                udp_headers(pcap, src).items()})


def same_as_wire(tag, pcaps, addrs, wires, reports, counters):
    """Every datagram a host's uroce sent (its own capture) crosses both of
    the router's interfaces and reaches the other host's uroce (the other
    capture), or the kernel lost it on the way.  Counted per direction and
    copy (a retransmission repeats a packet byte for byte):
    * a tap holding a datagram more often than its sender sent it, or a
      host receiving one more often: the captures disagree with the wire;
    * a copy sent but not received (lost) must have been counted by the
      kernel (a drop counter below grew) and either resent or followed by
      more of the transfer, which the traffic program checked complete;
      uroce's capture holds only what the kernel took (sendmmsg returned
      it), so a loss is the network's, as on any Ethernet;
    * a copy received but missing on a tap was missed by that tcpdump
      (its ring overflowed: "dropped by kernel"); one missing on both taps
      though received needs a drop reported by both.
    counters: the kernel's, before and after the run."""
    before, after = counters
    grew = {k: after[k] - before[k] for k in after if after[k] != before[k]}
    drops = sum(v for k, v in grew.items()
                if not k.endswith(('_packets',)) and v > 0)
    # and what went into the router but not out (its firewall, a queue)
    for into, out in (('r0.rx_packets', 'r1.tx_packets'),
                      ('r1.rx_packets', 'r0.tx_packets')):
        drops += max(0, grew.get(into, 0) - grew.get(out, 0))
    lost_total = 0
    # the router's interfaces a direction crosses: in at one, out at the
    # other; their packet counters prove a datagram crossed
    crossing = {addrs[0]: ('r0.rx_packets', 'r1.tx_packets'),
                addrs[1]: ('r1.rx_packets', 'r0.tx_packets')}
    for (src, sender, receiver) in ((addrs[0], 'requester', 'responder'),
                                    (addrs[1], 'responder', 'requester')):
        sent = datagrams_from(pcaps[sender], src)
        received = datagrams_from(pcaps[receiver], src)
        on_tap = [datagrams_from(w, src) for w in wires]
        for what, c in (('the receiver', received),
                        (os.path.basename(wires[0]), on_tap[0]),
                        (os.path.basename(wires[1]), on_tap[1])):
            extra = c - sent
            if extra:
                fail('%s: %s holds %d datagrams from %s that its uroce '
                     'did not capture sending' % (tag, what,
                                                  sum(extra.values()), src))
        lost = sent - received
        lost_total += sum(lost.values())
        unreached = [d for d in lost if not received[d]]
        if unreached:
            print('%s: %d datagrams from %s lost every copy (the transfer '
                  'completed without them: ACKs a later one covers, or '
                  'packets a retransmission from earlier replaced)' %
                  (tag, len(unreached), src))
        for i, (w, c) in enumerate(zip(wires, on_tap)):
            other = on_tap[1 - i]
            missed = received - c
            both = missed - (received - other)
            if missed:
                print('%s: %s lacks %d of %d datagrams from %s that %s '
                      'received (tcpdump: %s)' %
                      (tag, os.path.basename(w), sum(missed.values()),
                       sum(received.values()), src, receiver,
                       reports[i][0]))
            if not both or i:
                continue
            crossed = min(grew.get(k, 0) for k in crossing[src])
            if crossed >= sum(received.values()):
                print('%s: %d datagrams from %s are on neither tap, but %s '
                      'received them and the router counted every one '
                      'through (%s +%d): both tcpdumps missed them' %
                      (tag, sum(both.values()), src, receiver,
                       ' and '.join(crossing[src]), crossed))
            else:
                fail('%s: %d datagrams from %s reached %s on neither side '
                     'of the router, which counted %d of %d through '
                     '(tcpdump: %s / %s)' % (tag, sum(both.values()), src,
                                            receiver, crossed,
                                            sum(received.values()),
                                            reports[0][0], reports[1][0]))
    if lost_total:
        print('%s: %d datagram copies sent were not received; the '
              'kernel\'s counters that grew: %s' %
              (tag, lost_total, ', '.join('%s +%d' % kv for kv in
                                          sorted(grew.items())) or 'none'))
        if drops < lost_total:
            fail('%s: %d datagram copies lost, but the kernel counted %d '
                 'drops: uroce\'s capture holds datagrams that never left '
                 'it' % (tag, lost_total, drops))


def netns(a):
    if os.geteuid() != 0:
        die('wire.netns must run as root (it creates network namespaces); '
            'CI runs it as root')
    for tool in ('ip', 'tcpdump', 'tshark'):
        if not shutil.which(tool):
            die('%s is not installed' % tool)
    n = Netns()
    try:
        n.up()
        for fam, (ra, rb) in ((4, ('10.77.1.2', '10.77.2.2')),
                              (6, ('fd77:1::2', 'fd77:2::2'))):
            tag = 'netns.ipv%d' % fam
            wa = os.path.join(a.work, tag + '.wire-a.pcap')
            wb = os.path.join(a.work, tag + '.wire-b.pcap')
            dumps = [tcpdump(n.r, 'r0', wa), tcpdump(n.r, 'r1', wb)]
            # The veths carry 1500-byte IP packets: uroce's port MTU
            # (GID 0 is the veth's address) is 1024, as a RoCE NIC
            # derives it from its link.
            env = {}
            before = kernel_counters(n)
            try:
                posted, pcaps = run_pair(
                    a, tag, 'all', dict(env, UROCE_ADDRS=ra),
                    dict(env, UROCE_ADDRS=rb),
                    req_prefix=('ip', 'netns', 'exec', n.a),
                    resp_prefix=('ip', 'netns', 'exec', n.b))
                wait_frames([wa, wb], pcap_frames(pcaps['requester']))
            finally:
                reports = [stop(d) for d in dumps]
            after = kernel_counters(n)
            # a real network may lose a copy; same_as_wire accounts
            check_run(tag, posted, pcaps, fam, ALL_OPS, ALL_SYNDROMES,
                      same_datagrams=False)
            for wire in (wa, wb):
                frames = decode(wire)
                check_expert(wire)
                check_frames(wire, frames, pairs_of(posted), set())
                check_ip(wire, frames, fam)
                check_icrc(wire)
            same_as_wire(tag, pcaps, (ra, rb), (wa, wb), reports,
                         (before, after))
            # hostA's packets cross r0 before the hop and r1 after it;
            # hostB's the other way round
            compare_with_kernel(tag, pcaps['requester'], wa, ra, 0)
            compare_with_kernel(tag, pcaps['requester'], wb, ra, 1)
            compare_with_kernel(tag, pcaps['responder'], wb, rb, 0)
            compare_with_kernel(tag, pcaps['responder'], wa, rb, 1)
    finally:
        n.down()


def pairs_of(posted):
    pairs = {}
    for r in posted:
        if r['kind'] == 'pair':
            pairs[r['pair']] = Pair(r)
        else:
            pairs[r['pair']].add(r)
    return pairs


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument('--traffic', required=True)
    ap.add_argument('--lib', required=True)
    ap.add_argument('--work', required=True)
    sub = ap.add_subparsers(dest='mode', required=True)
    lo = sub.add_parser('loopback')
    lo.add_argument('--family', type=int, choices=(4, 6), required=True)
    sub.add_parser('netns')
    x = sub.add_parser('xrc')
    x.add_argument('--family', type=int, choices=(4, 6), required=True)
    x.add_argument('--tool', default='ibv_xsrq_pingpong')
    x.add_argument('--preload', help='LD_PRELOAD for the tool only')
    m = sub.add_parser('mpe')
    m.add_argument('--program', required=True, help='rc_mpe')
    m = sub.add_parser('mw')
    m.add_argument('--program', required=True, help='rc_mw')
    a = ap.parse_args()
    # Only the traffic runs over uroce (run_pair sets it): tcpdump and
    # tshark link libibverbs too, and must not pick up uroce's.
    os.environ.pop('LD_LIBRARY_PATH', None)
    os.makedirs(a.work, exist_ok=True)
    if not shutil.which('tshark'):
        die('tshark is not installed (apt-get install tshark)')
    if a.mode == 'loopback':
        loopback(a)
    elif a.mode == 'xrc':
        xrc(a)
    elif a.mode == 'mpe':
        mpe(a)
    elif a.mode == 'mw':
        mw(a)
    else:
        netns(a)
    if errors:
        print('FAIL: %d problems' % len(errors), file=sys.stderr)
        sys.exit(1)
    print('PASS')


if __name__ == '__main__':
    main()
