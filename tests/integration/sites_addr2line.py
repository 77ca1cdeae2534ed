#!/usr/bin/env python3
"""sites_addr2line.py DB [MIN] [MAX] [MIN_DISTINCT] — every displayed frame of
`poolscope sql` DB (table frames: one row per displayed frame, inline chains
expanded, `frame` the recorded frame, `pc` its recorded address) against
binutils' `addr2line -f -i -C -a` on the same address minus one (the
recorded frames are return addresses). Compares, for every recorded frame
of every stack, the whole chain the table shows for it: function, source
file (basename) and line of every level, innermost first, against
addr2line's chain for its address.

Counted: a displayed frame is one row of `frames` (one function of one
stack's chain), so a frame shared by many stacks counts once per stack —
each such row is compared on its own. Also counted: distinct displayed
frames (distinct (address, function, file, line)). Looks at up to MAX
distinct addresses (an even sample, sorted by address) and every row at
them; fails when fewer than MIN rows or MIN_DISTINCT distinct frames were
compared, or any row differs.

Where binutils' answer differs, LLVM's llvm-addr2line (a second DWARF
reader, independent of binutils and of libdw) is asked too, and the frame
passes when each field (function, file, line) of each level equals
binutils' or LLVM's: binutils 2.40 names the including .c file
instead of the header for some DWARF 5 line rows (glibc's
__libc_start_call_main, libc_start_call_main.h:58, which readelf's decoded
line table and LLVM agree on), and takes glibc's __GI_ alias where its
DWARF sits in a dwz partial unit, as poolscope's symbol-table fallback
does, where LLVM reads the DWARF name. All counts are printed.
Used by tests/integration/sites.sh; independent of poolscope's code."""
import os, re, sqlite3, subprocess, sys

db = sys.argv[1]
need = int(sys.argv[2]) if len(sys.argv) > 2 else 1
cap = int(sys.argv[3]) if len(sys.argv) > 3 else 100000
need_distinct = int(sys.argv[4]) if len(sys.argv) > 4 else 1
con = sqlite3.connect(db)
mods = con.execute("select path, base, size_bytes from modules").fetchall()
# Python frames (python = 1) are no addresses (pc NULL): nothing for
# addr2line; python_frames_consumers.sh checks them against the script
rows = con.execute("select stack_id, frame, level, pc, function, file, line, inlined "
                   "from frames where not python order by stack_id, level").fetchall()
chains = {}
for sid, fr, lvl, pc, fn, fi, ln, inl in rows:
    chains.setdefault((sid, fr), []).append((pc, fn, fi, ln, inl))

def module_of(pc):
    best = None
    for path, base, size in mods:
        if base <= pc < base + size and path.startswith('/') and os.path.exists(path):
            best = (path, base)       # later maps at the same place win
    return best

vaddr = {}
def min_vaddr(path):
    if path not in vaddr:
        out = subprocess.run(['readelf', '-lW', path], capture_output=True, text=True).stdout
        v = [int(l.split()[2], 16) for l in out.splitlines() if l.split()[:1] == ['LOAD']]
        vaddr[path] = min(v) if v else 0
    return vaddr[path]

# every stack's chain at each recorded pc (stacks sharing a frame each have one)
ours = {}
for key, ch in chains.items():
    pc = ch[0][0]
    if any(c[0] != pc for c in ch):
        sys.exit('stack %d frame %d: one recorded frame with two pcs' % key)
    ours.setdefault(pc, []).append((key, [(c[1], c[2], c[3]) for c in ch]))
pcs = sorted(ours)
if len(pcs) > cap:
    step = len(pcs) / cap
    pcs = [pcs[int(i * step)] for i in range(cap)]

by_mod = {}
for pc in pcs:
    m = module_of(pc)
    if m is None:
        continue                           # vdso, a deleted file: nothing to compare with
    by_mod.setdefault(m[0], []).append((pc, pc - 1 - m[1] + min_vaddr(m[0])))

def norm_fn(f):
    return None if f in (None, '??') else f

def norm_loc(loc):
    loc = re.sub(r' \(discriminator \d+\)$', '', loc)
    if loc.startswith('??'):
        return None, 0
    f, _, l = loc.rpartition(':')
    return os.path.basename(f), int(l) if l.isdigit() else 0

LLVM = next((t for t in ('llvm-addr2line', 'llvm-addr2line-14') if
             subprocess.run(['sh', '-c', 'command -v ' + t], capture_output=True).returncode == 0), None)

def run(tool, path, addrs):
    """{address: [(function, file basename, line), ...]} from one tool."""
    out = subprocess.run([tool, '-f', '-i', '-C', '-a', '-e', path] + ['0x%x' % a for a in addrs],
                         capture_output=True, text=True).stdout.splitlines()
    recs, cur = [], None
    for l in out:
        if re.fullmatch(r'0x[0-9a-f]+', l):
            cur = []
            recs.append(cur)
        elif cur is not None:
            cur.append(l)
    if len(recs) != len(addrs):
        sys.exit('%s %s: %d records for %d addresses' % (tool, path, len(recs), len(addrs)))
    return {a: [(norm_fn(r[i]),) + norm_loc(r[i + 1]) for i in range(0, len(r) - 1, 2)]
            for a, r in zip(addrs, recs)}

compared = bad = by_llvm = 0
distinct, addrs, stacks = set(), set(), set()
for path, lst in by_mod.items():
    ref = run('addr2line', path, [a for _, a in lst])
    odd = []
    for pc, a in lst:
        want = ref[a]
        for key, ch in ours[pc]:
            got = [(norm_fn(f), os.path.basename(fi) if fi else None, ln or 0) for f, fi, ln in ch]
            if not any(g[0] for g in got) and not any(w[0] for w in want):
                continue                   # neither knows anything
            compared += len(got)
            distinct.update((pc,) + g for g in got)
            addrs.add(pc)
            stacks.add(key[0])
            if got != want:
                odd.append((a, got, want))
    second = run(LLVM, path, sorted({a for a, _, _ in odd})) if odd and LLVM else {}
    for a, got, want in odd:
        alt = second.get(a)
        # each field of each level equal to what binutils or LLVM says
        if alt is not None and len(got) in (len(want), len(alt)) and all(
                any(len(t) > i and t[i][k] == g[k] for t in (want, alt))
                for i, g in enumerate(got) for k in range(3)):
            by_llvm += 1
            continue
        bad += 1
        if bad <= 10:
            print('  %s+0x%x:\n    poolscope %s\n    addr2line %s\n    llvm      %s'
                  % (os.path.basename(path), a, got, want, second.get(a)), file=sys.stderr)
print('  compared %d displayed frames (rows of %d stacks; %d distinct frames at %d addresses, of %d sampled): '
      '%d differ from both; binutils differs and llvm-addr2line agrees on %d chains'
      % (compared, len(stacks), len(distinct), len(addrs), len(pcs), bad, by_llvm), file=sys.stderr)
if compared < need or len(distinct) < need_distinct:
    print('  too few: want at least %d displayed frames and %d distinct' % (need, need_distinct), file=sys.stderr)
sys.exit(1 if bad or compared < need or len(distinct) < need_distinct else 0)
