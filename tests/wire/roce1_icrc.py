#!/usr/bin/env python3
"""Check the ICRC of every RoCE v1 frame (ethertype 0x8915) of a pcap file
as IBTA Annex A16 defines it, independently of uroce's code: CRC-32 over 8
bytes of 0xFF (for the LRH RoCE lacks), the GRH with traffic class, flow
label and hop limit set to ones, the BTH with its byte 4 set to ones, and
the rest of the packet up to the ICRC, stored least significant byte first.

    roce1_icrc.py FILE.pcap
"""
import struct
import sys
import zlib

ETH_P_ROCE = 0x8915
GRH_LEN = 40
BTH_LEN = 12


def frames(path):
    with open(path, "rb") as f:
        head = f.read(24)
        magic = struct.unpack("<I", head[:4])[0]
        order = "<" if magic in (0xA1B2C3D4, 0xA1B23C4D) else ">"
        while True:
            rec = f.read(16)
            if len(rec) < 16:
                return
            caplen = struct.unpack(order + "IIII", rec)[2]
            yield f.read(caplen)


def icrc_ok(pkt):
    paylen = struct.unpack("!H", pkt[4:6])[0]
    if len(pkt) < GRH_LEN + paylen or paylen < BTH_LEN + 4:
        return False
    pkt = pkt[:GRH_LEN + paylen]
    grh = bytearray(pkt[:GRH_LEN])
    grh[0] |= 0x0F
    grh[1:4] = b"\xff\xff\xff"
    grh[7] = 0xFF
    bth = bytearray(pkt[GRH_LEN:GRH_LEN + BTH_LEN])
    bth[4] = 0xFF
    crc = zlib.crc32(b"\xff" * 8 + bytes(grh) + bytes(bth) +
                     pkt[GRH_LEN + BTH_LEN:-4])
    return struct.pack("<I", crc) == pkt[-4:]


def main():
    good = bad = 0
    for frame in frames(sys.argv[1]):
        if len(frame) < 14 or struct.unpack("!H", frame[12:14])[0] != ETH_P_ROCE:
            continue
        if icrc_ok(frame[14:]):
            good += 1
        else:
            bad += 1
    print(f"RoCE v1 ICRC: {good} good, {bad} bad")
    return 0 if good and not bad else 1


if __name__ == "__main__":
    sys.exit(main())
