#!/usr/bin/python3
"""A process of another user that speaks uroced's protocol itself
(src/mux/service.h) to try to receive a victim's traffic.

  svc_client.py SOCKET PORT PEER_SLOT

Says HELLO, then asks for the connected receive sockets of all 16 flow
classes of PEER_SLOT on 127.0.0.1:PORT (the pairs a victim connected to that
slot's QPs would need), prints "ready <granted>" and waits for a line on
stdin; then reads whatever those sockets received and prints
"received <datagrams>".
"""
import select
import socket
import struct
import sys

SVC_MAGIC = 0x75524F53
SVC_HELLO, SVC_STEER = 1, 2
ADDR_LEN = 28           # union fwd_addr: a sockaddr_in6
SPORT_BASE, CLASS_BITS = 0xC000, 4


def sockaddr_in(ip, port):
    raw = struct.pack('=H', socket.AF_INET) + struct.pack('!H', port) + \
        socket.inet_aton(ip)
    return raw.ljust(ADDR_LEN, b'\0')


def call(sock, op, self_addr=b'', peer_addr=b''):
    req = struct.pack('=II', SVC_MAGIC, op) + \
        self_addr.ljust(ADDR_LEN, b'\0') + peer_addr.ljust(ADDR_LEN, b'\0')
    sock.send(req)
    msg, fds, _, _ = socket.recv_fds(sock, 16, 64)
    magic, err, slot, families = struct.unpack('=IiII', msg)
    assert magic == SVC_MAGIC, 'not uroced'
    return err, slot, fds


def main():
    path, port, peer_slot = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
    svc = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    svc.settimeout(5)
    svc.connect(path)
    err, slot, _ = call(svc, SVC_HELLO)
    assert err == 0, f'HELLO refused: {err}'
    socks = []
    for cls in range(1 << CLASS_BITS):
        sport = SPORT_BASE | peer_slot << CLASS_BITS | cls
        err, _, fds = call(svc, SVC_STEER, sockaddr_in('127.0.0.1', port),
                           sockaddr_in('127.0.0.1', sport))
        socks += [socket.socket(fileno=fd) for fd in fds]
    print(f'ready {len(socks)}', flush=True)
    sys.stdin.readline()
    received = 0
    for s in socks:
        s.setblocking(False)
        while select.select([s], [], [], 0)[0] and received < 100000:
            s.recv(65536)
            received += 1
    print(f'received {received}', flush=True)


main()
