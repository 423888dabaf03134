#!/usr/bin/env python3
"""Generate a stand-in for one of rdma-core's vendor provider libraries.

rdma-core's libmlx5.so.1 and libefa.so.1 cannot load next to uroce's
libibverbs (they import its private provider ABI), yet programs such as
perftest, pyverbs and UCX list them as NEEDED and bind to their versioned
symbols.  This script reads the real library's exported (symbol, version)
pairs and version nodes with readelf, and the return type of each function
from the library's public header, and writes:

  --map     a linker version script with the real library's nodes, in its
            order and with its parents, each symbol in every node that holds
            a version of it;
  --source  C with one stub per (symbol, version) that fails as the real
            provider does for a device it does not drive (see STUB_BODIES).

The stubs take no parameters and the generated C includes none of rdma-core's
headers: a caller's arguments are ignored, which the x86-64 System V ABI
(like any ABI where the caller pops its arguments) allows, so
only the return value must match the category of the real return type.
"""

import argparse
import re
import subprocess
import sys

# int functions whose man pages (rdma-core 44) describe a convention other
# than mlx5dv's usual "0 or the value of errno".
INT_CONVENTIONS = {
    # "Number of work requests that were canceled, or -errno on error."
    'mlx5dv_qp_cancel_posted_send_wrs': 'negative_errno',
    # "Returns the internal matching file descriptor.": EOPNOTSUPP would
    # pass for descriptor 95, so fail as open(2) does.
    'mlx5dv_vfio_get_events_fd': 'minus_one',
}


def readelf(tool, option, library):
    return subprocess.run([tool, option, '-W', library], check=True,
                          stdout=subprocess.PIPE, text=True).stdout


def read_exports(tool, library):
    """The symbols the library defines in .dynsym, as a set of
    (name, version, default, type); version is None for an unversioned
    symbol, default is True for name@@version."""
    exports = set()
    for line in readelf(tool, '--dyn-syms', library).splitlines():
        fields = line.split()
        # Num: Value Size Type Bind Vis Ndx Name
        if len(fields) < 8 or not fields[0].rstrip(':').isdigit() or \
                fields[6] == 'UND' or fields[4] == 'LOCAL':
            continue
        name, _, version = fields[7].partition('@')
        default = version.startswith('@')
        exports.add((name, version.lstrip('@') or None, default, fields[3]))
    return exports


def read_version_nodes(tool, library):
    """The library's version definitions but the base one (its soname), in
    order, as a list of (name, [parents])."""
    nodes = []
    section = False
    for line in readelf(tool, '-V', library).splitlines():
        if line.startswith('Version definition section'):
            section = True
        elif section and not line.startswith(' '):
            break
        elif section:
            m = re.search(r'Flags: (\S+).*Name: (\S+)', line)
            if m and m.group(1) != 'BASE':
                nodes.append((m.group(2), []))
            elif m is None and nodes:
                m = re.search(r'Parent \d+: (\S+)', line)
                if m:
                    nodes[-1][1].append(m.group(1))
    return nodes


def strip_balanced(text, keyword):
    """text without each `keyword (...)`, parentheses balanced."""
    while True:
        m = re.search(r'\b%s\s*\(' % keyword, text)
        if not m:
            return text
        depth, i = 0, m.end() - 1
        while True:
            depth += {'(': 1, ')': -1}.get(text[i], 0)
            i += 1
            if depth == 0:
                break
        text = text[:m.start()] + ' ' + text[i:]


def declared_return_types(cc, include_dirs, header):
    """{function name: return type} for each function declared (not defined
    inline) at file scope by the header and everything it includes.  The
    preprocessor resolves includes, macros (bool) and C++ guards."""
    cmd = [cc, '-E', '-P', '-x', 'c', '-']
    cmd += ['-I' + d for d in include_dirs]
    text = subprocess.run(cmd, input='#include <%s>\n' % header, check=True,
                          stdout=subprocess.PIPE, text=True).stdout
    text = re.sub(r'^\s*#.*$', '', text, flags=re.M)   # #pragma survives -E
    # Bodies of structs, enums and inline functions hold no declarations of
    # interest; dropping them leaves one declaration per ';'.
    flat, depth = [], 0
    for ch in text:
        if ch == '{':
            depth += 1
        elif ch == '}':
            depth -= 1
            if depth == 0:
                flat.append(';')
        elif depth == 0:
            flat.append(ch)
    types = {}
    for decl in ''.join(flat).split(';'):
        for keyword in ('__attribute__', '__asm__', '__asm'):
            decl = strip_balanced(decl, keyword)
        words = decl.split()
        if 'typedef' in words or 'static' in words:
            continue
        m = re.search(r'([A-Za-z_]\w*)\s*\(', decl)
        if not m:
            continue
        ret = [w for w in decl[:m.start()].replace('*', ' * ').split()
               if w not in ('extern', '__extension__', 'const', 'volatile')]
        types[m.group(1)] = ' '.join(ret).replace(' *', '*')
    return types


def category(name, ret):
    """How the stub for a function of return type ret fails."""
    if ret is None:
        return 'unknown'
    if ret.endswith('*'):
        return 'pointer'
    if ret == 'int':
        return INT_CONVENTIONS.get(name, 'errno_value')
    return {'void': 'void', '_Bool': 'bool', 'ssize_t': 'minus_one_ssize'
            }.get(ret, 'unknown')


# What each category's stub returns.  The failure is the one rdma-core's
# providers give for a device of another vendor (e.g. mlx5dv_query_device
# and efadv_query_device return EOPNOTSUPP for a non-mlx5/non-EFA context):
#   pointer          NULL, errno EOPNOTSUPP (mlx5dv_open_device, *_create_*)
#   errno_value      EOPNOTSUPP itself, errno untouched: their man pages say
#                    "0 on success or the value of errno on failure"
#                    (mlx5dv_query_device, mlx5dv_devx_general_cmd,
#                    efadv_query_device, ...)
#   minus_one(_ssize) -1, errno EOPNOTSUPP (mlx5dv_devx_get_event, whose
#                    header comment says so; descriptors)
#   negative_errno   -EOPNOTSUPP
#   bool             false: "is this device yours?" (mlx5dv_is_supported)
#   void             nothing (destructors of objects that cannot exist here)
# A symbol no header declares, or one whose return type fits none of these,
# gets a stub returning all-zero bits with errno EOPNOTSUPP, which reads as
# NULL, false or nothing.  Only a caller expecting a "0 or errno" status
# would take it for success; any non-zero value would instead be a bogus
# pointer that a NULL-checking caller dereferences.  The build warns so
# that the symbol gets classified.
STUB_BODIES = {
    'pointer': ('void *', 'errno = EOPNOTSUPP;\n\treturn NULL;'),
    'errno_value': ('int', 'return EOPNOTSUPP;'),
    'minus_one': ('int', 'errno = EOPNOTSUPP;\n\treturn -1;'),
    'minus_one_ssize': ('ssize_t', 'errno = EOPNOTSUPP;\n\treturn -1;'),
    'negative_errno': ('int', 'return -EOPNOTSUPP;'),
    'bool': ('bool', 'return false;'),
    'void': ('void', ''),
    'unknown': ('void *', 'errno = EOPNOTSUPP;\n\treturn NULL;'),
}


def c_ident(text):
    return re.sub(r'\W', '_', text)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    ap.add_argument('--library', required=True, help='the real library')
    ap.add_argument('--header', required=True,
                    help='its public header, as #include <...> names it')
    ap.add_argument('--cc', required=True, help='C compiler (for -E)')
    ap.add_argument('-I', dest='include_dirs', action='append', default=[])
    ap.add_argument('--readelf', default='readelf')
    ap.add_argument('--map', required=True, help='version script to write')
    ap.add_argument('--source', required=True, help='C file to write')
    args = ap.parse_args()

    prog = sys.argv[0].rsplit('/', 1)[-1]
    exports = read_exports(args.readelf, args.library)
    nodes = read_version_nodes(args.readelf, args.library)
    node_names = {name for name, _ in nodes}
    types = declared_return_types(args.cc, args.include_dirs, args.header)

    funcs = sorted(e for e in exports if e[0] not in node_names)
    for name, version, _, kind in funcs:
        if kind != 'FUNC' or version not in node_names:
            sys.exit('%s: %s: cannot stub %s %s@%s' %
                     (prog, args.library, kind, name, version))

    versions_of = {}
    for name, version, default, _ in funcs:
        versions_of.setdefault(name, []).append((version, default))

    lines = ['/* Generated by %s from %s: do not edit. */' %
             (prog, args.library)]
    for i, (node, parents) in enumerate(nodes):
        # Every name with a version in this node: `local: *` would hide a
        # name@node that .symver makes but the node does not list.
        members = sorted({n for n, v, _, _ in funcs if v == node})
        lines.append('%s {' % node)
        if members:
            lines.append('\tglobal:')
            lines += ['\t\t%s;' % n for n in members]
        if i == 0:
            lines.append('\tlocal: *;')
        lines.append('}%s;' % ''.join(' ' + p for p in parents))
        lines.append('')
    with open(args.map, 'w') as f:
        f.write('\n'.join(lines))

    out = ['/*',
           ' * Generated by %s from %s and <%s>: do not edit.' %
           (prog, args.library, args.header),
           ' * Each stub fails as the real provider does for a device it does',
           ' * not drive; %s explains how.' % prog,
           ' */',
           '#include <errno.h>',
           '#include <stdbool.h>',
           '#include <stddef.h>',
           '#include <sys/types.h>']
    for name in sorted(versions_of):
        ret = types.get(name)
        cat = category(name, ret)
        if cat == 'unknown':
            print('%s: warning: %s: %s %s; its stub returns NULL/0 with '
                  'errno EOPNOTSUPP' %
                  (prog, args.library, name,
                   'is declared in no header' if ret is None else
                   'returns %s, which has no stub convention' % ret),
                  file=sys.stderr)
        ctype, body = STUB_BODIES[cat]
        vers = versions_of[name]
        for version, default in sorted(vers):
            out.append('')
            out.append('/* %s%s%s: %s */' %
                       (name, '@@' if default else '@', version,
                        ret or 'undeclared'))
            # A symbol with several versions needs one function per
            # version, bound to it by .symver; a single default version
            # comes from the version script.
            if len(vers) > 1 or not default:
                fn = 'stub_%s_%s' % (name, c_ident(version))
                out.append('__asm__(".symver %s, %s%s%s");' %
                           (fn, name, '@@' if default else '@', version))
            else:
                fn = name
            out.append('%s%s%s(void)' %
                       (ctype, '' if ctype.endswith('*') else ' ', fn))
            out.append('{')
            if body:
                out.append('\t' + body)
            out.append('}')
    with open(args.source, 'w') as f:
        f.write('\n'.join(out) + '\n')


if __name__ == '__main__':
    main()
