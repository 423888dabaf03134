#!/usr/bin/env python3
"""Compare a stand-in built from gen_stubs.py's output with the real library:
the same defined dynamic symbols (name, version, default or not, type) and
the same version nodes in the same order with the same parents.  Exits 1 and
lists every difference if they differ."""

import argparse
import sys

from gen_stubs import read_exports, read_version_nodes


def show(sym):
    name, version, default, kind = sym
    if version is None:
        return '%s %s' % (kind, name)
    return '%s %s%s%s' % (kind, name, '@@' if default else '@', version)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    ap.add_argument('--readelf', default='readelf')
    ap.add_argument('real')
    ap.add_argument('standin')
    args = ap.parse_args()

    real = read_exports(args.readelf, args.real)
    standin = read_exports(args.readelf, args.standin)
    errors = ['missing: ' + show(s) for s in sorted(real - standin)]
    errors += ['extra: ' + show(s) for s in sorted(standin - real)]
    real_nodes = read_version_nodes(args.readelf, args.real)
    standin_nodes = read_version_nodes(args.readelf, args.standin)
    if real_nodes != standin_nodes:
        errors.append('version nodes differ:\n  real:     %s\n  stand-in: %s'
                      % (real_nodes, standin_nodes))
    for line in errors:
        print(line)
    if errors:
        sys.exit(1)
    print('%s matches %s: %d symbols, %d version nodes' %
          (args.standin, args.real, len(real), len(real_nodes)))


if __name__ == '__main__':
    main()
