#!/usr/bin/python3
"""Reads `uroce stat --json` (the file given) for the ib_write_bw pair of
uroce_cmd.sh.  Exits 0 if both ends are there, each with one RC QP ready
(RTS; the server, which only receives, RTR) connected to the other's; with --other PID, prints the pid of the end that
is not PID."""
import json
import sys

procs = [p for p in json.load(open(sys.argv[1]))
         if p['program'] == 'ib_write_bw' and len(p['qps']) == 1
         and p['qps'][0]['state'] in ('RTR', 'RTS')]
if len(procs) != 2:
    sys.exit(1)
a, b = procs
qa, qb = a['qps'][0], b['qps'][0]
assert qa['type'] == qb['type'] == 'RC'
assert qa['dest_qpn'] == qb['qpn'] and qb['dest_qpn'] == qa['qpn']
assert qa['peer'] == qb['peer'] == '127.0.0.1'
assert 'rx_packets' in a['counters'] and 'retransmits' in a['counters']
if len(sys.argv) == 4 and sys.argv[2] == '--other':
    print(next(p['pid'] for p in procs if p['pid'] != int(sys.argv[3])))
