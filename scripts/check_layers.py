#!/usr/bin/env python3
"""Fails the build when a layer of libibverbs calls a layer above it.

    check_layers.py --layers base,link,... OBJECT...

Each OBJECT is a file of a CMake object library uroce_<layer>
(.../uroce_<layer>.dir/src/....c.o), the layers listed bottom first.  A
symbol an object uses (nm: U) that an object of a higher layer defines is an
upward call, and an error.  A layer reaches one above it only through a
table of functions the higher one hands it (transport.h: the objects' and
QP1's ops).
"""
import argparse
import re
import subprocess
import sys


def layer_and_source(obj):
    m = re.search(r"uroce_([a-z]+)\.dir/(.*)\.o$", obj)
    if not m:
        sys.exit(f"check_layers: {obj}: not an object of a uroce_<layer> library")
    return m.group(1), m.group(2)


def symbols(obj):
    out = subprocess.run(["nm", obj], check=True, capture_output=True,
                         text=True).stdout
    defined, used = set(), set()
    for line in out.splitlines():
        f = line.split()
        if len(f) == 3 and f[1] in "TDBRVW":
            defined.add(f[2])
        elif len(f) == 2 and f[0] == "U":
            used.add(f[1])
    return defined, used


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--layers", required=True)
    ap.add_argument("objects", nargs="+")
    a = ap.parse_args()
    order = {name: i for i, name in enumerate(a.layers.split(","))}
    owner, uses = {}, []
    for obj in a.objects:
        layer, src = layer_and_source(obj)
        if layer not in order:
            sys.exit(f"check_layers: {src}: layer {layer} is not in the list")
        defined, used = symbols(obj)
        for s in defined:
            owner[s] = (layer, src)
        uses.append((layer, src, used))

    errors = []
    for layer, src, used in uses:
        for s in sorted(used):
            if s not in owner:
                continue
            up, upsrc = owner[s]
            if order[up] <= order[layer]:
                continue
            errors.append(f"{src} ({layer}) calls {s} of {upsrc} "
                          f"({up}), a layer above it")
    for e in errors:
        print(f"check_layers: {e}", file=sys.stderr)
    return 1 if errors else 0


if __name__ == "__main__":
    sys.exit(main())
