#!/bin/sh
# pool_sites.sh — every byte has a stack (issue 30, item 1): pool acquires,
# KV block allocations and mmap calls are recorded with their caller's
# stack, and `report` (text and --json) and the HTML page name their sites
# by the caller, not by the pool, the adapter or mmap.
#
# tests/progs/pool_sites makes each from a known chain (acq_outer ->
# acq_inner -> bp_acquire, ..., map_outer -> map_inner -> mmap) and prints
# its own count per chain: "<inner> <outer> calls=C bytes=B". For each
# chain the report's row of that kind named "<inner> (...) < <outer>" must
# have C calls (KV: blocks) and, for mappings, B bytes; no row of those
# kinds may be named by a frame of the pool library or the adapter.
# Recorded three ways: built with frame pointers under --stacks fp and
# dwarf, and built with -fomit-frame-pointer under dwarf (fp stacks cannot
# cross a frame without one, so that pairing is not asked).
. tests/integration/lib.sh

# check_sites JSON OUT: the report's rows against the program's counts
check_sites() {
    python3 - "$1" "$2" <<'PY'
import json, sys
rep = json.load(open(sys.argv[1]))
want = [l.split() for l in open(sys.argv[2]) if 'calls=' in l]
kinds = {'acq': 'pool_acquires', 'kv': 'kv_blocks', 'map': 'mmap_anon', 'fma': 'mmap_file'}
bad = []
for inner, outer, calls, nbytes in want:
    key = kinds[inner[:3] if inner[:3] in kinds else inner[:2]]
    rows = [r for r in rep['sites'][key] if r['site'].startswith(inner + ' (') and r['site'].endswith('< ' + outer)]
    c = int(calls.split('=')[1]); b = int(nbytes.split('=')[1])
    got_c = sum(r['calls'] for r in rows); got_b = sum(r['bytes'] for r in rows)
    if len(rows) != 1 or got_c != c or (key.startswith('mmap') and got_b != b):
        bad.append('%s: %s < %s: %d rows, calls %d (program %d), bytes %d (program %d)' %
                   (key, inner, outer, len(rows), got_c, c, got_b, b))
for key in kinds.values():
    for r in rep['sites'][key]:
        if r['site'].split(' ')[0].startswith(('bp_', 'psa_', 'kvb_', 'emit', 'acquire', 'mmap')):
            bad.append('%s: a row named by a wrapper: %s' % (key, r['site']))
for b in bad: print('  ' + b, file=sys.stderr)
sys.exit(1 if bad else 0)
PY
}

run() {   # NAME BINARY STACKS
    "$PS" record --stacks "$3" -o "$T/$1.pst" -- "$2" 40 > "$T/$1.out" 2> "$T/$1.rec" &&
        "$PS" report "$T/$1.pst" --json > "$T/$1.json" && "$PS" report "$T/$1.pst" > "$T/$1.txt" ||
        { cat "$T/$1.rec" >&2; return 1; }
    [ "$(grep -c 'calls=' "$T/$1.out")" = 5 ] && check_sites "$T/$1.json" "$T/$1.out"
}
check pool_sites_fp_named_by_caller run fp "$P/pool_sites" fp
check pool_sites_dwarf_named_by_caller run dwarf "$P/pool_sites" dwarf
nofp() {
    cc -std=c11 -D_GNU_SOURCE -O2 -g -fomit-frame-pointer -Iinclude -o "$T/pool_sites-nofp" tests/progs/pool_sites.c \
        "$B/lib/libpstrace.a" "$B/lib/libpool.a" "$B/lib/libpscommon.a" -lm -ldl -pthread &&
        run nofp "$T/pool_sites-nofp" dwarf
}
check pool_sites_nofp_dwarf_named_by_caller nofp

# the text report has each kind under its own title, named the same way
text_kinds() {
    for t in 'pool acquires' 'KV blocks' 'mmap anonymous (committed)' 'mmap file-backed'; do
        grep -q "^Top sites by bytes: $t\$" "$T/dwarf.txt" || { echo "  no section '$t'" >&2; return 1; }
    done
    sed -n '/^Top sites by bytes: pool acquires$/,/^$/p' "$T/dwarf.txt" | grep -q ' 81 .*acq_inner2 (pool_sites.c:[0-9]*) < acq_outer2' &&
        sed -n '/^Top sites by bytes: mmap anonymous (committed)$/,/^$/p' "$T/dwarf.txt" |
            grep -q '72.0 KiB  *6 .*map_inner (pool_sites.c:[0-9]*) < map_outer'
}
check pool_sites_text_sections text_kinds

# the page: pool, KV and both mapping kinds as rows of their own kind, with
# frames, their calls (and mapped bytes) the program's
page() {
    "$PS" html "$T/dwarf.pst" -o "$T/dwarf.html" --quiet || return 1
    python3 - "$T/dwarf.html" "$T/dwarf.out" <<'PY'
import json, re, sys
html = open(sys.argv[1]).read()
m = re.search(r'<script type="application/json" id="ps-data">(.*?)</script>', html, re.S)
D = json.loads(m.group(1))
want = {l.split()[0]: l.split() for l in open(sys.argv[2]) if 'calls=' in l}
kind = {'acq_inner': 1, 'acq_inner2': 1, 'kv_inner': 2, 'map_inner': 3, 'fmap_inner': 4}
bad = []
for inner, k in kind.items():
    outer, calls, nbytes = want[inner][1], int(want[inner][2][6:]), int(want[inner][3][6:])
    rows = [r for r in D['sites'] if r['k'] == k and r['label'].startswith(inner + ' (') and r['label'].endswith('< ' + outer)]
    # a row per stack: the pool's hit and miss paths are two stacks of one site
    if (not rows or sum(r['calls'] for r in rows) != calls or not all(r['f'] for r in rows) or
            (k >= 3 and sum(r['bytes'] for r in rows) != nbytes)):
        bad.append('%s kind %d: %s' % (inner, k, json.dumps(rows)[:300]))
for b in bad: print('  ' + b, file=sys.stderr)
sys.exit(1 if bad else 0)
PY
}
check pool_sites_page_rows page
exit $status
