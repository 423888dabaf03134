#!/usr/bin/env python3
"""CM wire check: the IB CM MADs uroce's rdma_cm puts on the wire.

  cm_check.py reference [--sender IP] PCAP...
  cm_check.py --lib DIR --work DIR run --family 4|6 [--preload LIB]

run: runs unmodified rdmacm-utils between two uroce processes over
127.0.0.1 or ::1 with UROCE_PCAP set for each (rping -v -C 3, ucmatose -C 2,
rdma_xserver/rdma_xclient -c x over IPv4 for XRC, udaddy -C 2), then a connect to a port nobody listens on (rping, which must
be refused with REJ reason 8) and a SIDR_REQ nobody answers but the CM
(udaddy, SIDR_REP status 1).  Every capture is then checked:

* tshark decodes every frame as InfiniBand with no expert info and no
  malformed packet, and its decoding of each CM MAD it dissects (REQ, REP,
  RTU, REJ, DREQ, DREP) agrees with ours;
* every ICRC verifies (zlib for both families, scapy for IPv4: the
  implementation of wire_check.py);
* every CM MAD is framed as the Linux kernel frames it: a UD SEND_ONLY
  (BTH opcode 0x64) to DestQP 1 with P_Key 0xFFFF, DETH Q_Key 0x80010000 and
  SrcQP 1, and a 256-byte MAD with base version 1, class 0x07, class version
  2, method Send (0x03), status 0 and attribute modifier 0;
* every field has the value the Linux kernel puts there (see
  /work/shared/research/cm-captures/README.md, "Observed values"): service
  IDs of the TCP and UDP port spaces, the 36-byte CMA header of REQ and
  SIDR_REQ, the REQ's path (LIDs 0xFFFF, GIDs equal to the IP addresses,
  hop limit 64, flow label (src_port*31+dst_port)&0xFFFFF, no alternate
  path), its timeouts and retries, Q_Keys and EECNs, the REP's target ACK
  delay and RNR retry count (the one the accepting application asked for,
  as the kernel's CM sends it), and the comm IDs, QPNs and TIDs that tie
  RTU, DREQ, DREP, REJ, MRA and SIDR_REP to the messages they answer;
* the two processes' captures hold the same CM datagrams.

Values Linux happens to use that no peer depends on (the local ACK timeout
19, target ACK delay 15, MRA service timeout 24, IP TTL 64, packet rate 0)
are printed as NOTE lines when uroce differs; they do not fail the check.

reference: the same field checks on the reference captures of the Linux
kernel (cm-captures/*.pcap).  Only the frames from --sender (10.77.0.2, the
kernel) are held to the field checks; the peer's hand-built frames are
decoded for the relations (a REP names its REQ) and must pass tshark and
the ICRC check like every other frame.
"""
import argparse
import ipaddress
import os
import re
import signal
import socket
import struct
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import wire_check as wc  # noqa: E402  (tshark, ICRC: our own code)

fail = wc.fail
notes = []


def note(msg):
    if msg not in notes:
        notes.append(msg)
        print('NOTE: ' + msg)


# ---- constants (IBTA vol. 1 ch. 12, Linux include/rdma/ib_cm.h) -----------

GSI_QPN = 1
GSI_QKEY = 0x80010000
UD_SEND_ONLY = 0x64
MAD_LEN = 256
CM_CLASS = 0x07
CM_CLASS_VERSION = 2
METHOD_SEND = 0x03
METHOD_GET_RESP = 0x81
ATTR = {0x0001: 'ClassPortInfo', 0x0010: 'REQ', 0x0011: 'MRA',
        0x0012: 'REJ', 0x0013: 'REP', 0x0014: 'RTU', 0x0015: 'DREQ',
        0x0016: 'DREP', 0x0017: 'SIDR_REQ', 0x0018: 'SIDR_REP',
        0x0019: 'LAP', 0x001A: 'APR'}
ATTR_ID = {v: k for k, v in ATTR.items()}
PS_TCP = 0x0106
PS_UDP = 0x0111
PS_IB = 0x013F
TRANSPORT_XRC = 3                        # with extended transport type 1
SID_PREFIX = 0x0000000001000000         # IBTA A11 RDMA IP CM service
RDMA_UDP_QKEY = 0x01234567
CM_RESPONSE_TIMEOUT = 20                # cma.c CMA_CM_RESPONSE_TIMEOUT
MAX_CM_RETRIES = 15                     # cma.c CMA_MAX_CM_RETRIES
HOP_LIMIT = 64
REJ_TIMEOUT = 4
REJ_INVALID_SID = 8
REJ_STALE_CONN = 10
REJ_CONSUMER = 28
# the values of the Linux captures that are the kernel's or rxe's choice
LINUX_LOCAL_ACK_TIMEOUT = 19
LINUX_TARGET_ACK_DELAY = 15
# (what the kernel's cma_accept_ib sends, min(7, the rdma_conn_param's
# rnr_retry_count), for the applications of the reference captures, which
# ask for 7; for an application that asks less, see check_rep)
LINUX_REP_RNR_RETRY = 7
LINUX_MRA_TIMEOUT = 24
LINUX_TTL = 64


# ---- pcap and packet decoding ---------------------------------------------

def pcap_records(path):
    """(timestamp, frame bytes) of every record; both byte orders, micro-
    and nanosecond timestamps; Ethernet only."""
    with open(path, 'rb') as f:
        data = f.read()
    if len(data) < 24:
        return []
    magic_le = struct.unpack('<I', data[:4])[0]
    if magic_le in (0xA1B2C3D4, 0xA1B23C4D):
        order = '<'
        nsec = magic_le == 0xA1B23C4D
    else:
        order = '>'
        nsec = struct.unpack('>I', data[:4])[0] == 0xA1B23C4D
    linktype = struct.unpack(order + 'I', data[20:24])[0]
    if linktype != 1:
        wc.die('%s: link type %d, not Ethernet' % (path, linktype))
    out, at = [], 24
    while at + 16 <= len(data):
        sec, frac, incl, _ = struct.unpack(order + 'IIII', data[at:at + 16])
        out.append((sec + frac / (1e9 if nsec else 1e6),
                    data[at + 16:at + 16 + incl]))
        at += 16 + incl
    return out


def u24(b, o):
    return int.from_bytes(b[o:o + 3], 'big')


def be16(b, o):
    return struct.unpack_from('!H', b, o)[0]


def be32(b, o):
    return struct.unpack_from('!I', b, o)[0]


def be64(b, o):
    return struct.unpack_from('!Q', b, o)[0]


def gid_of(addr):
    """The GID of an IP address: IPv4-mapped for IPv4."""
    a = ipaddress.ip_address(addr)
    if a.version == 4:
        return b'\0' * 10 + b'\xff\xff' + a.packed
    return a.packed


def gid_str(b):
    a = ipaddress.IPv6Address(bytes(b))
    return str(a.ipv4_mapped) if a.ipv4_mapped else str(a)


class Frame:
    """One RoCEv2 frame: the IP and UDP header fields, the BTH, and for a
    UD packet the DETH and payload."""

    def __init__(self, pcap, number, ts, raw):
        self.pcap, self.number, self.ts, self.raw = pcap, number, ts, raw
        self.where = '%s frame %d' % (os.path.basename(pcap), number)
        etype = be16(raw, 12)
        p = raw[14:]
        if etype == 0x0800:
            ihl = (p[0] & 15) * 4
            self.family = 4
            self.src = socket.inet_ntop(socket.AF_INET, p[12:16])
            self.dst = socket.inet_ntop(socket.AF_INET, p[16:20])
            self.ttl = p[8]
            self.tos = p[1]
        elif etype == 0x86DD:
            ihl = 40
            self.family = 6
            self.src = socket.inet_ntop(socket.AF_INET6, p[8:24])
            self.dst = socket.inet_ntop(socket.AF_INET6, p[24:40])
            self.ttl = p[7]
            self.tos = ((p[0] & 15) << 4) | (p[1] >> 4)
        else:
            raise ValueError('ethertype 0x%04x' % etype)
        self.sport, self.dport, self.ulen = struct.unpack_from('!HHH', p, ihl)
        self.udp_payload = bytes(p[ihl + 8:ihl + self.ulen])
        ib = self.udp_payload[:-4]      # without the ICRC
        self.opcode = ib[0]
        self.se, self.m = ib[1] >> 7, (ib[1] >> 6) & 1
        self.pad, self.tver = (ib[1] >> 4) & 3, ib[1] & 15
        self.pkey = be16(ib, 2)
        self.destqp = u24(ib, 5)
        self.ackreq = ib[8] >> 7
        self.psn = u24(ib, 9)
        self.qkey = self.srcqp = None
        self.mad = None
        if self.opcode in (0x64, 0x65):
            self.qkey = be32(ib, 12)
            self.srcqp = u24(ib, 17)
            payload = ib[20:] if self.opcode == 0x64 else ib[24:]
            # a MAD: to QP1, or anything of class CM
            if self.destqp == GSI_QPN or (len(payload) >= 24 and
                                          payload[1] == CM_CLASS and
                                          payload[0] == 1):
                self.mad = payload


class Mad:
    """A CM MAD: its header, and the fields of its attribute by IBTA
    offset from the start of the CM payload (MAD byte 24)."""

    def __init__(self, frame):
        m = frame.mad
        self.frame = frame
        self.where = frame.where
        self.raw = m
        self.base, self.cls, self.clsver, self.method = m[0], m[1], m[2], m[3]
        self.status, self.clsspec = be16(m, 4), be16(m, 6)
        self.tid = be64(m, 8)
        self.attr = be16(m, 16)
        self.reserved = be16(m, 18)
        self.attrmod = be32(m, 20)
        self.name = ATTR.get(self.attr, '0x%04x' % self.attr)
        p = self.p = m[24:] if len(m) >= 24 else b''
        if len(p) < 232:
            return
        a = self.name
        if a in ('MRA', 'REJ', 'REP', 'RTU', 'DREQ', 'DREP'):
            self.local_id, self.remote_id = be32(p, 0), be32(p, 4)
        if a == 'REQ':
            self.local_id = be32(p, 0)
            self.sid = be64(p, 8)
            self.guid = be64(p, 16)
            self.l_qkey = be32(p, 28)
            self.qpn = u24(p, 32)
            self.resp_res = p[35]
            self.l_eecn = u24(p, 36)
            self.init_depth = p[39]
            self.r_eecn = u24(p, 40)
            self.r_cm_timeout = p[43] >> 3
            self.transport = (p[43] >> 1) & 3
            self.e2e = p[43] & 1
            self.psn = u24(p, 44)
            self.l_cm_timeout = p[47] >> 3
            self.retry = p[47] & 7
            self.pkey = be16(p, 48)
            self.mtu = p[50] >> 4
            self.rdc = (p[50] >> 3) & 1
            self.rnr_retry = p[50] & 7
            self.max_cm_retries = p[51] >> 4
            self.srq = (p[51] >> 3) & 1
            self.ext_transport = p[51] & 7
            self.l_lid, self.r_lid = be16(p, 52), be16(p, 54)
            self.l_gid, self.r_gid = bytes(p[56:72]), bytes(p[72:88])
            fw = be32(p, 88)
            self.flow_label = fw >> 12
            self.path_resv0 = (fw >> 6) & 0x3F
            self.pkt_rate = fw & 0x3F
            self.tclass, self.hop_limit = p[92], p[93]
            self.sl = p[94] >> 4
            self.subnet_local = (p[94] >> 3) & 1
            self.path_resv1 = p[94] & 7
            self.ack_timeout = p[95] >> 3
            self.path_resv2 = p[95] & 7
            self.alt_path = bytes(p[96:140])
            self.private = bytes(p[140:232])
            self.cma = self.private[:36]
            self.vendor = u24(p, 5)
            self.resv = bytes(p[4:5]) + bytes(p[24:28])
        elif a == 'REP':
            self.l_qkey = be32(p, 8)
            self.qpn = u24(p, 12)
            self.l_eecn = u24(p, 16)
            self.psn = u24(p, 20)
            self.vendor = (p[15] << 16) | (p[19] << 8) | p[23]
            self.resp_res, self.init_depth = p[24], p[25]
            self.target_ack_delay = p[26] >> 3
            self.failover = (p[26] >> 1) & 3
            self.e2e = p[26] & 1
            self.rnr_retry = p[27] >> 5
            self.srq = (p[27] >> 4) & 1
            self.resv27 = p[27] & 15
            self.guid = be64(p, 28)
            self.private = bytes(p[36:232])
        elif a == 'REJ':
            self.msg_rejected = p[8] >> 6
            self.resv8 = p[8] & 0x3F
            self.ari_len = p[9] >> 1
            self.reason = be16(p, 10)
            self.ari = bytes(p[12:84])
            self.private = bytes(p[84:232])
        elif a == 'MRA':
            self.msg_mraed = p[8] >> 6
            self.service_timeout = p[9] >> 3
        elif a == 'DREQ':
            self.remote_qpn = u24(p, 8)
        elif a == 'SIDR_REQ':
            self.request_id = be32(p, 0)
            self.pkey = be16(p, 4)
            self.resv = be16(p, 6)
            self.sid = be64(p, 8)
            self.private = bytes(p[16:232])
            self.cma = self.private[:36]
        elif a == 'SIDR_REP':
            self.request_id = be32(p, 0)
            self.sidr_status = p[4]
            self.add_info_len = p[5]
            self.vendor = (p[6] << 16) | (p[7] << 8) | p[11]
            self.qpn = u24(p, 8)
            self.sid = be64(p, 12)
            self.qkey = be32(p, 20)
            self.add_info = bytes(p[24:96])
            self.private = bytes(p[96:232])

    def __repr__(self):
        return '%s %s' % (self.name, self.where)


def read_capture(pcap):
    frames = []
    for n, (ts, raw) in enumerate(pcap_records(pcap), 1):
        try:
            frames.append(Frame(pcap, n, ts, raw))
        except (ValueError, struct.error, IndexError) as e:
            fail('%s frame %d: cannot decode: %s' % (pcap, n, e))
    return frames


# ---- tshark ---------------------------------------------------------------

TSHARK_FIELDS = [
    'frame.number', 'infiniband.mad.baseversion', 'infiniband.mad.mgmtclass',
    'infiniband.mad.classversion', 'infiniband.mad.method',
    'infiniband.mad.transactionid', 'infiniband.mad.attributeid',
    'infiniband.cm.req', 'infiniband.cm.req.serviceid',
    'infiniband.cm.req.localqpn', 'infiniband.cm.req.startpsn',
    'infiniband.cm.req.localcaguid', 'infiniband.cm.req.prim_hoplim',
    'infiniband.cm.req.ip_cm.sport',
    'infiniband.cm.rep', 'infiniband.cm.rep.remotecommid',
    'infiniband.cm.rep.localqpn', 'infiniband.cm.rep.startpsn',
    'infiniband.cm.rtu.localcommid', 'infiniband.cm.rtu.remotecommid',
    'infiniband.cm.rej.localcommid', 'infiniband.cm.rej.remotecommid',
    'infiniband.cm.rej.reason',
    'infiniband.cm.dreq.localcommid', 'infiniband.cm.dreq.remotecommid',
    'infiniband.cm.req.remoteqpneecn',
    'infiniband.cm.drsp.localcommid', 'infiniband.cm.drsp.remotecommid']


def tshark_cm(pcap):
    """frame number -> the CM fields tshark decodes."""
    out = wc.tshark(pcap, ['-T', 'fields', '-E', 'separator=\t',
                           '-E', 'occurrence=f'] +
                    sum((['-e', f] for f in TSHARK_FIELDS), []))
    rows = {}
    for line in out.splitlines():
        vals = line.split('\t')
        vals += [''] * (len(TSHARK_FIELDS) - len(vals))
        row = {}
        for k, v in zip(TSHARK_FIELDS, vals):
            row[k] = wc.num(v) if v != '' else None
        rows[row['frame.number']] = row
    return rows


def check_tshark_agrees(mads, rows):
    """tshark's decoding of each CM MAD equals ours (it dissects REQ, REP,
    RTU, REJ, DREQ and DREP; MRA and SIDR only as far as the MAD header)."""
    for m in mads:
        t = rows.get(m.frame.number)
        if t is None:
            fail('%s: tshark has no such frame' % m.where)
            continue
        want = {'infiniband.mad.baseversion': m.base,
                'infiniband.mad.mgmtclass': m.cls,
                'infiniband.mad.classversion': m.clsver,
                'infiniband.mad.method': m.method,
                'infiniband.mad.transactionid': m.tid,
                'infiniband.mad.attributeid': m.attr}
        if m.name == 'REQ':
            want.update({'infiniband.cm.req': m.local_id,
                         'infiniband.cm.req.serviceid': m.sid,
                         'infiniband.cm.req.localqpn': m.qpn,
                         'infiniband.cm.req.startpsn': m.psn,
                         'infiniband.cm.req.localcaguid': m.guid,
                         'infiniband.cm.req.prim_hoplim': m.hop_limit,
                         'infiniband.cm.req.ip_cm.sport':
                             be16(m.cma, 2)})
        elif m.name == 'REP':
            want.update({'infiniband.cm.rep': m.local_id,
                         'infiniband.cm.rep.remotecommid': m.remote_id,
                         'infiniband.cm.rep.localqpn': m.qpn,
                         'infiniband.cm.rep.startpsn': m.psn})
        elif m.name in ('RTU', 'REJ', 'DREQ'):
            k = m.name.lower()
            want.update({'infiniband.cm.%s.localcommid' % k: m.local_id,
                         'infiniband.cm.%s.remotecommid' % k: m.remote_id})
            if m.name == 'REJ':
                want['infiniband.cm.rej.reason'] = m.reason
            if m.name == 'DREQ':
                want['infiniband.cm.req.remoteqpneecn'] = m.remote_qpn
        elif m.name == 'DREP':
            want.update({'infiniband.cm.drsp.localcommid': m.local_id,
                         'infiniband.cm.drsp.remotecommid': m.remote_id})
        for k, v in want.items():
            if t.get(k) != v:
                fail('%s: tshark decodes %s = %s, the bytes say %s' %
                     (m.where, k, t.get(k), v))


# ---- the field checks ------------------------------------------------------

class Ctx:
    """Everything a capture (or a set of captures of one run) holds, so that
    an answer can be checked against what it answers."""

    def __init__(self, mads):
        self.mads = mads
        self.reqs = {}          # local comm ID -> REQ
        self.reps = {}          # local comm ID -> REP
        self.sidr_reqs = {}     # request ID -> SIDR_REQ
        self.dreqs = {}         # (local, remote) -> DREQs, in order
        for m in mads:
            if len(m.p) < 232:
                continue
            if m.name == 'REQ':
                self.reqs.setdefault(m.local_id, m)
            elif m.name == 'REP':
                self.reps.setdefault(m.local_id, m)
            elif m.name == 'SIDR_REQ':
                self.sidr_reqs.setdefault(m.request_id, m)
            elif m.name == 'DREQ':
                self.dreqs.setdefault((m.local_id, m.remote_id), []).append(m)

    def conn_of(self, a, b):
        """(REQ, REP, side) of the connection whose comm IDs are a (the
        sender's) and b (the receiver's): side 'active' if the sender sent
        the REQ."""
        req, rep = self.reqs.get(a), self.reps.get(b)
        if req and rep and rep.remote_id == a:
            return req, rep, 'active'
        req, rep = self.reqs.get(b), self.reps.get(a)
        if req and rep and rep.remote_id == b:
            return req, rep, 'passive'
        return None, None, None


def expect(m, what, got, want):
    if got != want:
        fail('%s: %s %s is %s, want %s' % (m.where, m.name, what,
                                           fmt(got), fmt(want)))
        return False
    return True


def fmt(v):
    if isinstance(v, int):
        return '0x%x' % v if v > 9 else str(v)
    if isinstance(v, bytes):
        return v.hex() if v.strip(b'\0') else '%d zero bytes' % len(v)
    return str(v)


def linux_value(m, what, got, want):
    if got != want:
        note('%s %s: %s (the Linux kernel sends %s) [first at %s]' %
             (m.name, what, fmt(got), fmt(want), m.where))


def check_framing(f, m):
    """Every CM MAD: how the Linux kernel frames it."""
    ok = True
    for what, got, want in (('UDP destination port', f.dport, 4791),
                            ('UDP length', f.ulen, 8 + 12 + 8 + MAD_LEN + 4),
                            ('BTH opcode', f.opcode, UD_SEND_ONLY),
                            ('BTH DestQP', f.destqp, GSI_QPN),
                            ('BTH P_Key', f.pkey, 0xFFFF),
                            ('BTH SE', f.se, 0), ('BTH MigReq', f.m, 0),
                            ('BTH pad count', f.pad, 0),
                            ('BTH TVer', f.tver, 0),
                            ('DETH Q_Key', f.qkey, GSI_QKEY),
                            ('DETH SrcQP', f.srcqp, GSI_QPN),
                            ('MAD length', len(f.mad), MAD_LEN),
                            ('MAD base version', m.base, 1),
                            ('MAD class', m.cls, CM_CLASS),
                            ('MAD class version', m.clsver,
                             CM_CLASS_VERSION),
                            ('MAD class-specific', m.clsspec, 0),
                            ('MAD reserved', m.reserved, 0),
                            ('MAD attribute modifier (ECE)', m.attrmod, 0)):
        ok &= expect(m, what, got, want)
    if m.attr == ATTR_ID['ClassPortInfo'] and m.method == METHOD_GET_RESP:
        # the MAD layer's answer to a Get: unsupported method/attribute
        expect(m, 'GetResp status', m.status, 0x000C)
    else:
        ok &= expect(m, 'MAD method', m.method, METHOD_SEND)
        ok &= expect(m, 'MAD status', m.status, 0)
        if m.name not in ('REQ', 'MRA', 'REJ', 'REP', 'RTU', 'DREQ',
                          'DREP', 'SIDR_REQ', 'SIDR_REP'):
            fail('%s: CM attribute %s is not one the CM sends' %
                 (m.where, m.name))
            ok = False
    linux_value(m, 'IP TTL / hop limit', f.ttl, LINUX_TTL)
    expect(m, 'IP TOS / traffic class', f.tos, 0)
    return ok


def check_cma_header(m, f, hdr):
    """The 36-byte CMA header (cma.c struct cma_hdr): version 0, IP version
    in the high nibble, the active side's port, and its source and
    destination addresses, IPv4 as 12 zero bytes and the address."""
    expect(m, 'CMA header version', hdr[0], 0)
    expect(m, 'CMA header IP version byte', hdr[1], f.family << 4)
    port = be16(hdr, 2)
    if port == 0:
        fail('%s: %s CMA header source port 0' % (m.where, m.name))
    if f.family == 4:
        want_src = b'\0' * 12 + socket.inet_pton(socket.AF_INET, f.src)
        want_dst = b'\0' * 12 + socket.inet_pton(socket.AF_INET, f.dst)
    else:
        want_src = socket.inet_pton(socket.AF_INET6, f.src)
        want_dst = socket.inet_pton(socket.AF_INET6, f.dst)
    expect(m, 'CMA header source IP', bytes(hdr[4:20]), want_src)
    expect(m, 'CMA header destination IP', bytes(hdr[20:36]), want_dst)
    return port


def check_req(m, f, ctx, want_sid):
    if m.local_id == 0:
        fail('%s: REQ local comm ID 0' % m.where)
    if want_sid is not None:
        expect(m, 'service ID', m.sid, want_sid)
    elif m.sid & ~0xFFFF not in (SID_PREFIX | PS_TCP << 16,
                                 SID_PREFIX | PS_IB << 16):
        fail('%s: REQ service ID 0x%016x is not of the TCP (or IB) port '
             'space' % (m.where, m.sid))
    expect(m, 'VendorID (ECE)', m.vendor, 0)
    expect(m, 'reserved bytes 4, 24-27', m.resv, b'\0' * 5)
    if m.guid == 0:
        fail('%s: REQ local CA GUID 0' % m.where)
    expect(m, 'local Q_Key', m.l_qkey, 0)
    if m.qpn in (0, GSI_QPN):
        fail('%s: REQ local QPN %d' % (m.where, m.qpn))
    expect(m, 'local EECN', m.l_eecn, 0)
    expect(m, 'remote EECN', m.r_eecn, 0)
    expect(m, 'remote CM response timeout', m.r_cm_timeout,
           CM_RESPONSE_TIMEOUT)
    expect(m, 'local CM response timeout', m.l_cm_timeout,
           CM_RESPONSE_TIMEOUT)
    if m.transport == TRANSPORT_XRC:
        # Linux's cm_format_req for an XRC initiator: the responder's
        # fields stay zero (it receives nothing)
        expect(m, 'extended transport type (XRC)', m.ext_transport, 1)
        expect(m, 'XRC: responder resources', m.resp_res, 0)
        expect(m, 'XRC: retry count', m.retry, 0)
        expect(m, 'XRC: RNR retry count', m.rnr_retry, 0)
        expect(m, 'XRC: SRQ', m.srq, 0)
        if m.sid & ~0xFFFF != SID_PREFIX | PS_IB << 16:
            fail('%s: XRC REQ service ID 0x%016x is not of the IB port '
                 'space' % (m.where, m.sid))
    else:
        expect(m, 'transport service type (RC)', m.transport, 0)
        expect(m, 'extended transport type', m.ext_transport, 0)
    expect(m, 'end-to-end flow control', m.e2e, 0)
    expect(m, 'P_Key', m.pkey, 0xFFFF)
    if not 1 <= m.mtu <= 5:
        fail('%s: REQ path MTU code %d' % (m.where, m.mtu))
    expect(m, 'RDC exists', m.rdc, 0)
    expect(m, 'max CM retries', m.max_cm_retries, MAX_CM_RETRIES)
    expect(m, 'primary local port LID', m.l_lid, 0xFFFF)
    expect(m, 'primary remote port LID', m.r_lid, 0xFFFF)
    if not expect(m, 'primary local port GID', m.l_gid, gid_of(f.src)):
        fail('%s: (local GID %s, IP source %s)' % (m.where, gid_str(m.l_gid),
                                                   f.src))
    if not expect(m, 'primary remote port GID', m.r_gid, gid_of(f.dst)):
        fail('%s: (remote GID %s, IP destination %s)' %
             (m.where, gid_str(m.r_gid), f.dst))
    port = check_cma_header(m, f, m.cma)
    expect(m, 'flow label ((CMA source port * 31 + port) & 0xFFFFF)',
           m.flow_label, (port * 31 + (m.sid & 0xFFFF)) & 0xFFFFF)
    expect(m, 'reserved bits after the flow label', m.path_resv0, 0)
    linux_value(m, 'packet rate', m.pkt_rate, 0)
    expect(m, 'traffic class', m.tclass, 0)
    expect(m, 'hop limit', m.hop_limit, HOP_LIMIT)
    expect(m, 'SL', m.sl, 0)
    expect(m, 'subnet local', m.subnet_local, 0)
    expect(m, 'reserved bits of the primary path', (m.path_resv1,
                                                    m.path_resv2), (0, 0))
    if m.ack_timeout == 0:
        fail('%s: REQ primary local ACK timeout 0 (infinite)' % m.where)
    linux_value(m, 'primary local ACK timeout', m.ack_timeout,
                LINUX_LOCAL_ACK_TIMEOUT)
    expect(m, 'alternate path', m.alt_path, b'\0' * 44)


def check_rep(m, f, ctx, rnr_retry):
    req = ctx.reqs.get(m.remote_id)
    if m.local_id == 0:
        fail('%s: REP local comm ID 0' % m.where)
    if req is None:
        fail('%s: REP remote comm ID 0x%08x names no REQ' %
             (m.where, m.remote_id))
    else:
        expect(m, 'TID (the REQ\'s)', m.tid, req.tid)
        # IBTA 12.7.2x: what the REP offers the REQ can take
        if m.resp_res > req.init_depth:
            fail('%s: REP responder resources %d > the REQ\'s initiator '
                 'depth %d' % (m.where, m.resp_res, req.init_depth))
        if m.init_depth > req.resp_res:
            fail('%s: REP initiator depth %d > the REQ\'s responder '
                 'resources %d' % (m.where, m.init_depth, req.resp_res))
        if m.guid == req.guid and m.qpn == req.qpn:
            fail('%s: REP names the REQ\'s own QP' % m.where)
    expect(m, 'local Q_Key', m.l_qkey, 0)
    if req is not None and req.transport == TRANSPORT_XRC:
        # Linux's cm_format_rep for an XRC target: its QPN in the EECN,
        # always on an SRQ, no initiator depth
        expect(m, 'XRC: local QPN', m.qpn, 0)
        if m.l_eecn in (0, GSI_QPN):
            fail('%s: XRC REP local EECN (the target QPN) %d' %
                 (m.where, m.l_eecn))
        expect(m, 'XRC: SRQ', m.srq, 1)
        expect(m, 'XRC: initiator depth', m.init_depth, 0)
    else:
        if m.qpn in (0, GSI_QPN):
            fail('%s: REP local QPN %d' % (m.where, m.qpn))
        expect(m, 'local EECN', m.l_eecn, 0)
    expect(m, 'VendorID (ECE)', m.vendor, 0)
    if m.target_ack_delay == 0:
        fail('%s: REP target ACK delay 0' % m.where)
    linux_value(m, 'target ACK delay', m.target_ack_delay,
                LINUX_TARGET_ACK_DELAY)
    expect(m, 'failover accepted', m.failover, 0)
    expect(m, 'end-to-end flow control', m.e2e, 0)
    # what the application asked for, as the kernel's cma_accept_ib sends
    # it (min(7, conn_param->rnr_retry_count)); rping and ucmatose ask 7
    expect(m, 'RNR retry count (the application\'s, as Linux sends it)',
           m.rnr_retry, rnr_retry)
    expect(m, 'reserved bits of byte 27', m.resv27, 0)
    if m.guid == 0:
        fail('%s: REP local CA GUID 0' % m.where)


def check_rtu(m, f, ctx):
    req, rep, side = ctx.conn_of(m.local_id, m.remote_id)
    if side != 'active':
        fail('%s: RTU comm IDs 0x%08x/0x%08x are not an active side\'s '
             'REQ/REP' % (m.where, m.local_id, m.remote_id))
        return
    linux_value(m, 'TID (Linux: the REQ\'s)', m.tid, req.tid)


def check_dreq(m, f, ctx):
    req, rep, side = ctx.conn_of(m.local_id, m.remote_id)
    if side is None:
        fail('%s: DREQ comm IDs 0x%08x/0x%08x name no connection' %
             (m.where, m.local_id, m.remote_id))
        return
    if side == 'active':
        # an XRC target's QPN is its REP's EECN
        peer_qpn = rep.l_eecn if req.transport == TRANSPORT_XRC else rep.qpn
    else:
        peer_qpn = req.qpn
    expect(m, 'remote QPN (the peer\'s QPN)', m.remote_qpn, peer_qpn)
    expect(m, 'reserved byte 11', m.p[11], 0)
    if side == 'active':
        linux_value(m, 'TID (Linux: the REQ\'s)', m.tid, req.tid)


def check_drep(m, f, ctx):
    # the DREQ it answers came before it, and holds its IDs swapped
    dreqs = [d for d in ctx.dreqs.get((m.remote_id, m.local_id), [])
             if d.frame.ts <= m.frame.ts]
    if not dreqs:
        fail('%s: DREP comm IDs 0x%08x/0x%08x answer no DREQ' %
             (m.where, m.local_id, m.remote_id))
        return
    expect(m, 'TID (the DREQ\'s)', m.tid, dreqs[-1].tid)


def check_rej(m, f, ctx, want_reason):
    if want_reason is not None:
        expect(m, 'reason', m.reason, want_reason)
    expect(m, 'reserved bits of byte 8', m.resv8, 0)
    expect(m, 'reserved bit of byte 9', m.p[9] & 1, 0)
    if m.msg_rejected == 0:
        # a REJ of a REQ: Linux names only the REQ
        req = ctx.reqs.get(m.remote_id)
        if req is None:
            fail('%s: REJ remote comm ID 0x%08x names no REQ' %
                 (m.where, m.remote_id))
        else:
            expect(m, 'TID (the REQ\'s)', m.tid, req.tid)
        if m.reason in (REJ_INVALID_SID, REJ_STALE_CONN, REJ_CONSUMER):
            expect(m, 'local comm ID', m.local_id, 0)
            expect(m, 'reject info length', m.ari_len, 0)
            expect(m, 'ARI', m.ari, b'\0' * 72)
    elif m.msg_rejected == 2 and m.reason == REJ_TIMEOUT:
        # the active side gives up in REQ_SENT: its own IDs, its CA GUID
        req = ctx.reqs.get(m.local_id)
        if req is None:
            fail('%s: REJ (timeout) local comm ID 0x%08x is no REQ\'s' %
                 (m.where, m.local_id))
        else:
            expect(m, 'TID (the REQ\'s)', m.tid, req.tid)
            expect(m, 'ARI (the CA GUID)', m.ari,
                   struct.pack('!Q', req.guid) + b'\0' * 64)
        expect(m, 'remote comm ID', m.remote_id, 0)
        expect(m, 'reject info length', m.ari_len, 8)
    elif m.msg_rejected == 1:
        req, rep, side = ctx.conn_of(m.local_id, m.remote_id)
        if side != 'active':
            fail('%s: REJ of a REP: comm IDs name no REQ/REP' % m.where)
    else:
        fail('%s: REJ message rejected %d with reason %d' %
             (m.where, m.msg_rejected, m.reason))


def check_mra(m, f, ctx):
    req = ctx.reqs.get(m.remote_id)
    if m.msg_mraed == 0:
        if req is None:
            fail('%s: MRA remote comm ID 0x%08x names no REQ' %
                 (m.where, m.remote_id))
        else:
            expect(m, 'TID (the REQ\'s)', m.tid, req.tid)
    elif m.msg_mraed > 2:
        fail('%s: MRA message MRAed %d' % (m.where, m.msg_mraed))
    expect(m, 'reserved bits of byte 8', m.p[8] & 0x3F, 0)
    expect(m, 'reserved bits of byte 9', m.p[9] & 7, 0)
    linux_value(m, 'service timeout', m.service_timeout, LINUX_MRA_TIMEOUT)


def check_sidr_req(m, f, ctx, want_sid):
    if want_sid is not None:
        expect(m, 'service ID', m.sid, want_sid)
    elif m.sid & ~0xFFFF != SID_PREFIX | PS_UDP << 16:
        fail('%s: SIDR_REQ service ID 0x%016x is not of the UDP port space' %
             (m.where, m.sid))
    expect(m, 'P_Key', m.pkey, 0xFFFF)
    expect(m, 'reserved bytes 6-7', m.resv, 0)
    check_cma_header(m, f, m.cma)


def check_sidr_rep(m, f, ctx, want_status):
    req = ctx.sidr_reqs.get(m.request_id)
    if req is None:
        fail('%s: SIDR_REP request ID 0x%08x answers no SIDR_REQ' %
             (m.where, m.request_id))
    else:
        expect(m, 'service ID (the SIDR_REQ\'s)', m.sid, req.sid)
        expect(m, 'TID (the SIDR_REQ\'s)', m.tid, req.tid)
    if want_status is not None:
        expect(m, 'status', m.sidr_status, want_status)
    expect(m, 'additional info length', m.add_info_len, 0)
    expect(m, 'VendorID', m.vendor, 0)
    if m.sidr_status == 0:
        if m.qpn in (0, GSI_QPN):
            fail('%s: SIDR_REP (status 0) QPN %d' % (m.where, m.qpn))
        expect(m, 'Q_Key', m.qkey, RDMA_UDP_QKEY)
    else:
        expect(m, 'QPN', m.qpn, 0)
        expect(m, 'Q_Key', m.qkey, 0)


def check_mads(mads, ctx, senders=None, sid=None, sidr_sid=None,
               rej_reason=None, sidr_status=None,
               rep_rnr_retry=LINUX_REP_RNR_RETRY):
    """Every MAD: tshark-independent field checks; only the MADs from
    senders (None: all) are held to them."""
    counts = {}
    for m in mads:
        f = m.frame
        if senders is not None and f.src not in senders:
            continue
        counts[m.name] = counts.get(m.name, 0) + 1
        if not check_framing(f, m) or len(m.p) < 232:
            continue
        n = m.name
        if n == 'REQ':
            check_req(m, f, ctx, sid)
        elif n == 'REP':
            check_rep(m, f, ctx, rep_rnr_retry)
        elif n == 'RTU':
            check_rtu(m, f, ctx)
        elif n == 'DREQ':
            check_dreq(m, f, ctx)
        elif n == 'DREP':
            check_drep(m, f, ctx)
        elif n == 'REJ':
            check_rej(m, f, ctx, rej_reason)
        elif n == 'MRA':
            check_mra(m, f, ctx)
        elif n == 'SIDR_REQ':
            check_sidr_req(m, f, ctx, sidr_sid)
        elif n == 'SIDR_REP':
            check_sidr_rep(m, f, ctx, sidr_status)
    return counts


def capture(pcap):
    """tshark: no expert info, every frame InfiniBand; every ICRC; the
    decoded frames and the CM MADs among them."""
    wc.check_expert(pcap)
    payloads = wc.check_icrc(pcap)
    frames = read_capture(pcap)
    if len(payloads) != len(frames):
        fail('%s: scapy reads %d frames, we %d' % (pcap, len(payloads),
                                                   len(frames)))
    mads = [Mad(f) for f in frames if f.mad is not None]
    for m in mads:
        if m.frame.destqp != GSI_QPN or len(m.raw) != MAD_LEN:
            # a MAD to another QP or of another length is still checked
            # (and fails) by check_framing
            pass
    check_tshark_agrees(mads, tshark_cm(pcap))
    return frames, mads


# ---- reference mode ---------------------------------------------------------

def reference(a):
    total = {}
    for pcap in a.pcaps:
        frames, mads = capture(pcap)
        ctx = Ctx(mads)
        counts = check_mads(mads, ctx, senders={a.sender})
        for k, v in counts.items():
            total[k] = total.get(k, 0) + v
        print('%s: %d frames, %d CM MADs, from %s: %s' %
              (os.path.basename(pcap), len(frames), len(mads), a.sender,
               ', '.join('%s %d' % kv for kv in sorted(counts.items()))))
    print('checked MADs from %s: %s' % (a.sender, ', '.join(
        '%s %d' % kv for kv in sorted(total.items()))))


# ---- run mode: unmodified rdmacm-utils over uroce ----------------------------

def proc_unix_names():
    try:
        with open('/proc/net/unix') as f:
            return {line.split()[-1] for line in f.readlines()[1:]
                    if len(line.split()) >= 8}
    except OSError:
        return set()


def sid_claimed(sid):
    """Whether a uroce process holds the CM service ID (it binds the
    abstract name "@uroce-sid.<RoCEv2 port>.<service ID>")."""
    return '@uroce-sid.4791.%016x' % sid in proc_unix_names()


class Proc:
    def __init__(self, a, tag, role, cmd):
        self.tag, self.role, self.cmd = tag, role, cmd
        self.pcap = os.path.join(a.work, '%s.%s.pcap' % (tag, role))
        if os.path.exists(self.pcap):
            os.unlink(self.pcap)
        env = dict(os.environ)
        for k in ('UROCE_CONFIG', 'UROCE_FAULTS', 'UROCE_MTU', 'UROCE_ADDRS',
                  'UROCE_WINDOW', 'UROCE_RATE'):
            env.pop(k, None)
        env['LD_LIBRARY_PATH'] = a.lib
        env['UROCE_PCAP'] = self.pcap
        if a.preload:
            env['LD_PRELOAD'] = a.preload
            env['ASAN_OPTIONS'] = 'detect_leaks=0'
        self.start = time.monotonic()
        self.p = subprocess.Popen(['timeout', '-k', '5', '60'] + cmd,
                                  env=env, stdout=subprocess.PIPE,
                                  stderr=subprocess.STDOUT, text=True,
                                  start_new_session=True)
        self.out = None

    def wait(self, limit=70):
        try:
            self.out = self.p.communicate(timeout=limit)[0]
        except subprocess.TimeoutExpired:
            os.killpg(self.p.pid, signal.SIGKILL)
            self.out = self.p.communicate()[0]
        self.secs = time.monotonic() - self.start
        return self.p.returncode

    def kill(self):
        if self.p.poll() is None:
            os.killpg(self.p.pid, signal.SIGTERM)
        self.wait(10)

    def report(self):
        return '---- %s %s (status %s, %.1f s): %s\n%s' % (
            self.tag, self.role, self.p.returncode, self.secs,
            ' '.join(self.cmd), self.out)


def note_retry(tag, line):
    """One line in the suite's retry log (tests/CMakeLists.txt)."""
    log = os.environ.get('UROCE_TEST_RETRY_LOG')
    if log:
        with open(log, 'a') as f:
            f.write('%s\t%s: client run again\t%s\n' % (
                os.environ.get('UROCE_TEST_NAME', 'cm_check.py'), tag, line))


def run_pair(a, tag, server, client, sid, expect_out):
    """Starts the server, waits for it to hold its service ID, runs the
    client; both must succeed and print expect_out (role -> regexes).
    Returns the two captures, or None after reporting a failure."""
    for attempt in range(3):
        s = Proc(a, tag, 'server', server)
        end = time.monotonic() + 20
        while not sid_claimed(sid) and time.monotonic() < end and \
                s.p.poll() is None:
            time.sleep(0.05)
        # claimed at bind, then rdma_listen: leave it the moment between
        time.sleep(0.3)
        c = Proc(a, tag, 'client', client)
        cst = c.wait()
        if cst != 0:
            s.kill()
        sst = s.wait()
        refused = cst != 0 and re.search(r'REJECTED.*(error|status):? ?8\b',
                                         c.out or '')
        if refused and attempt < 2:
            print('%s: the server was not listening yet; again' % tag)
            note_retry(tag, refused.group(0))
            continue
        ok = True
        for p, st in ((s, sst), (c, cst)):
            if st != 0:
                fail('%s: %s exited with status %s' % (tag, p.role, st))
                ok = False
            for r in expect_out.get(p.role, []):
                if not re.search(r, p.out or '', re.M):
                    fail('%s: %s output does not match %s' % (tag, p.role,
                                                              r))
                    ok = False
        if not ok:
            print(s.report() + c.report(), file=sys.stderr)
            return None
        return s, c
    return None


def same_datagrams(tag, caps):
    """Both processes captured the same CM datagrams (each what it sent
    and what it received).  Compared as sets: a datagram that the kernel
    hands to the sender's own socket of the shared RoCEv2 port is captured
    there once more before uroce forwards it to its owner."""
    sets, dups = [], []
    for pcap, frames in caps:
        got = [(f.src, f.dst, f.udp_payload) for f in frames
               if f.mad is not None]
        sets.append(set(got))
        dups.append(len(got) - len(set(got)))
    if sets[0] != sets[1]:
        only = [sets[i] - sets[1 - i] for i in (0, 1)]
        for i in (0, 1):
            for src, dst, pl in sorted(only[i])[:5]:
                fail('%s: only %s holds the %s from %s to %s (TID 0x%016x)'
                     % (tag, os.path.basename(caps[i][0]),
                        ATTR.get(be16(pl, 20 + 16), '?'), src, dst,
                        be64(pl, 20 + 8)))
    if any(dups):
        print('%s: datagrams captured twice by one process (sent, then '
              'received and forwarded): %s' % (tag, ', '.join(
                  '%s %d' % (os.path.basename(c[0]), d)
                  for c, d in zip(caps, dups))))


def check_run(tag, pcaps, want, **kw):
    """The checks of one run's captures (one or two processes); want: the
    MADs that must be there, name -> least count."""
    caps, allmads = [], []
    for pcap in pcaps:
        if not os.path.exists(pcap):
            fail('%s: no capture %s' % (tag, pcap))
            return
        frames, mads = capture(pcap)
        caps.append((pcap, frames))
        allmads.append(mads)
    counts = {}
    for mads in allmads:
        c = check_mads(mads, Ctx(mads), **kw)
        for k, v in c.items():
            counts[k] = max(counts.get(k, 0), v)
    for name, n in want.items():
        if counts.get(name, 0) < n:
            fail('%s: %d %s, want at least %d' % (tag, counts.get(name, 0),
                                                  name, n))
    if len(caps) == 2:
        same_datagrams(tag, caps)
    print('%s: CM MADs %s' % (tag, ', '.join('%s %d' % kv for kv in
                                             sorted(counts.items()))))


def tcp_sid(port):
    return SID_PREFIX | PS_TCP << 16 | port


def ib_sid(port):
    return SID_PREFIX | PS_IB << 16 | port


def udp_sid(port):
    return SID_PREFIX | PS_UDP << 16 | port


# udaddy and the others of rdmacm-utils: udaddy has no port option
UDADDY_PORT = 7174


def run(a):
    addr = '127.0.0.1' if a.family == 4 else '::1'
    base = a.port_base + (0 if a.family == 4 else 10)
    fam = 'ipv%d' % a.family
    conn = {'REQ': 1, 'REP': 1, 'RTU': 1, 'DREQ': 1, 'DREP': 1}

    # rping: one connection, three pings verified
    tag, port = 'cm.%s.rping' % fam, base
    r = run_pair(a, tag, ['rping', '-s', '-a', addr, '-p', str(port), '-v',
                          '-V', '-C', '3'],
                 ['rping', '-c', '-a', addr, '-p', str(port), '-v', '-V',
                  '-C', '3'], tcp_sid(port),
                 {'client': [r'^ping data: rdma-ping-2: ']})
    if r:
        check_run(tag, [r[0].pcap, r[1].pcap], conn, sid=tcp_sid(port))

    # ucmatose: one connection, two messages each way
    tag, port = 'cm.%s.ucmatose' % fam, base + 1
    r = run_pair(a, tag, ['ucmatose', '-b', addr, '-p', str(port), '-C', '2'],
                 ['ucmatose', '-s', addr, '-p', str(port), '-C', '2'],
                 tcp_sid(port), {'server': [r'^return status 0$'],
                                 'client': [r'^return status 0$']})
    if r:
        check_run(tag, [r[0].pcap, r[1].pcap], conn, sid=tcp_sid(port))

    # rdma_xserver / rdma_xclient -c x: XRC over the IB port space (the
    # server binds the IPv4 wildcard, so IPv4 only)
    if a.family == 4:
        tag, port = 'cm.%s.xrc' % fam, base + 3
        r = run_pair(a, tag, ['rdma_xserver', '-p', str(port), '-c', 'x'],
                     ['rdma_xclient', '-s', addr, '-p', str(port), '-c',
                      'x'], ib_sid(port),
                     {'server': [r'rdma_xserver: end 0$'],
                      'client': [r'rdma_xclient: end 0$']})
        # rdma_xserver accepts with a zeroed rdma_conn_param: the
        # kernel's REP says RNR retry count 0 for it too
        if r:
            check_run(tag, [r[0].pcap, r[1].pcap], conn, sid=ib_sid(port),
                      rep_rnr_retry=0)

    # udaddy: SIDR, two messages each way
    tag = 'cm.%s.udaddy' % fam
    r = run_pair(a, tag, ['udaddy', '-b', addr, '-C', '2'],
                 ['udaddy', '-s', addr, '-C', '2'], udp_sid(UDADDY_PORT),
                 {'server': [r'^return status 0$'],
                  'client': [r'^return status 0$']})
    if r:
        check_run(tag, [r[0].pcap, r[1].pcap], {'SIDR_REQ': 1,
                                                'SIDR_REP': 1},
                  sidr_sid=udp_sid(UDADDY_PORT), sidr_status=0)

    # a connect to a port nobody listens on: REJ reason 8, at once
    tag, port = 'cm.%s.no_listener' % fam, base + 2
    c = Proc(a, tag, 'client', ['rping', '-c', '-a', addr, '-p', str(port),
                                '-C', '1'])
    st = c.wait()
    if st == 0 or not re.search(r'REJECTED, error 8\b', c.out or ''):
        fail('%s: rping should be refused with REJECTED, error 8' % tag)
        print(c.report(), file=sys.stderr)
    elif c.secs > 5:
        fail('%s: the REJ took %.1f s' % (tag, c.secs))
    check_run(tag, [c.pcap], {'REQ': 1, 'REJ': 1}, sid=tcp_sid(port),
              rej_reason=REJ_INVALID_SID)

    # a SIDR_REQ nobody listens for: SIDR_REP status 1 (udaddy's port)
    if not sid_claimed(udp_sid(UDADDY_PORT)):
        tag = 'cm.%s.sidr_no_listener' % fam
        c = Proc(a, tag, 'client', ['udaddy', '-s', addr, '-C', '1'])
        st = c.wait()
        if st == 0 or 'UNREACHABLE' not in (c.out or ''):
            fail('%s: udaddy should fail with RDMA_CM_EVENT_UNREACHABLE' %
                 tag)
            print(c.report(), file=sys.stderr)
        elif c.secs > 5:
            fail('%s: the SIDR_REP took %.1f s' % (tag, c.secs))
        check_run(tag, [c.pcap], {'SIDR_REQ': 1, 'SIDR_REP': 1},
                  sidr_sid=udp_sid(UDADDY_PORT), sidr_status=1)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument('--lib')
    ap.add_argument('--work', default='.')
    sub = ap.add_subparsers(dest='mode', required=True)
    ref = sub.add_parser('reference')
    ref.add_argument('--sender', default='10.77.0.2',
                     help='the address whose frames are held to the checks')
    ref.add_argument('pcaps', nargs='+')
    r = sub.add_parser('run')
    r.add_argument('--family', type=int, choices=(4, 6), required=True)
    r.add_argument('--preload', help='LD_PRELOAD for the tools only')
    r.add_argument('--port-base', type=int, default=7900,
                   help="rdma_cm ports base .. base+3 (IPv4), base+10.. "
                        '(IPv6)')
    a = ap.parse_args()
    # tshark links libibverbs: it must not pick up uroce's
    os.environ.pop('LD_LIBRARY_PATH', None)
    os.environ.pop('LD_PRELOAD', None)
    if a.mode == 'run':
        if not a.lib:
            wc.die('run needs --lib')
        os.makedirs(a.work, exist_ok=True)
        run(a)
    else:
        reference(a)
    if wc.errors:
        print('FAIL: %d problems' % len(wc.errors), file=sys.stderr)
        sys.exit(1)
    print('PASS')


if __name__ == '__main__':
    main()
