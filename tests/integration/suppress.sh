#!/bin/sh
# suppress.sh — leak suppressions (issue 30, item 6; analyzer/REPORT.md,
# "Suppressions"). tests/progs/leaks_named leaks from named functions and
# prints its own counts; a --suppress file takes some of them by function
# and by 'A < B', and what it takes leaves leaked_bytes/leaked_objects
# and the leak table and is counted apart, per pattern with its file and
# line. The default list takes glibc's stdout buffer, whose size is the
# output file's st_blksize (stat %o), not a figure of ours; report, gate
# and html agree; a bad file is refused with its line.
. tests/integration/lib.sh
"$PS" record -o "$T/l.pst" -- "$P/leaks_named" >"$T/l.out" 2>/dev/null || { check record false; exit $status; }
cat >"$T/s.txt" <<'S'
# one-time tables of ours
leak_a
   helper_alloc < caller_y
S
jq_num() { python3 -c "import json,sys; d=json.load(open(sys.argv[1])); print(d$2)" "$1"; }
by_file() {
    "$PS" report "$T/l.pst" --json --suppress "$T/s.txt" >"$T/s.json" || return 1
    "$PS" report "$T/l.pst" --json --no-default-suppressions >"$T/n.json" || return 1
    python3 - "$T/s.json" "$T/n.json" "$T/l.out" "$T/s.txt" <<'PY'
import json, sys
s, n = json.load(open(sys.argv[1])), json.load(open(sys.argv[2]))
own = dict(l.strip().split('=') for l in open(sys.argv[3]))
# nothing suppressed: the program's own count
assert n['leaked_objects'] == int(own['leaked_objects']) and n['leaked_bytes'] == int(own['leaked_bytes']), (n['leaked_objects'], n['leaked_bytes'], own)
assert n['suppressed_leaked_objects'] == 0 and n['suppressions'] == [], n['suppressions']
# leak_a: 3 x 100; helper_alloc < caller_y: 70; left: leak_b 2 x 1000 and caller_x's 50
assert (s['leaked_objects'], s['leaked_bytes']) == (3, 2050), (s['leaked_objects'], s['leaked_bytes'])
assert (s['suppressed_leaked_objects'], s['suppressed_leaked_bytes']) == (4, 370), s
got = [(x['pattern'], x['source'], x['objects'], x['bytes']) for x in s['suppressions']]
f = sys.argv[4]
assert got == [('leak_a', f + ':2', 3, 300), ('helper_alloc < caller_y', f + ':3', 1, 70)], got
sites = [r['site'] for r in s['sites']['leaks']]
assert not any(x.startswith('leak_a') for x in sites) and any('< caller_x' in x for x in sites), sites
assert not any('< caller_y' in x for x in sites), sites
assert sum(r['leaked_bytes'] for r in s['sites']['leaks']) == s['leaked_bytes'], s['sites']['leaks']
PY
}
check suppress_file_by_function_and_caller by_file
text() {
    "$PS" report "$T/l.pst" --suppress="$T/s.txt" >"$T/s.txt.out" || return 1
    grep -q '^  suppressed  *370 B  in 4 objects' "$T/s.txt.out" &&
        grep -qF "300 B  in 3 objects: leak_a, $T/s.txt:2" "$T/s.txt.out" &&
        grep -qF "70 B  in 1 object: helper_alloc < caller_y, $T/s.txt:3" "$T/s.txt.out" ||
        { sed -n '/leaked at/,/internal/p' "$T/s.txt.out" >&2; return 1; }
}
check suppressed_said_in_text text
# module:GLOB: every stack has a frame of the program
by_module() {
    printf 'module:leaks_n*\n' >"$T/m.txt"
    "$PS" report "$T/l.pst" --json --suppress "$T/m.txt" >"$T/m.json" &&
        [ "$(jq_num "$T/m.json" "['leaked_objects']")" = 0 ] &&
        [ "$(jq_num "$T/m.json" "['suppressed_leaked_bytes']")" = 2420 ]
}
check suppress_by_module by_module
# gate reads the suppressed figure: 2420 B leaked, 2050 with the file
gate() {
    "$PS" gate "$T/l.pst" --max leaked_bytes=2100 >"$T/g1.out" 2>&1; r1=$?
    "$PS" gate "$T/l.pst" --max leaked_bytes=2100 --suppress "$T/s.txt" >"$T/g2.out" 2>&1; r2=$?
    [ $r1 = 1 ] && [ $r2 = 0 ] || { echo "  gate: $r1 without the file, $r2 with it" >&2; cat "$T/g1.out" "$T/g2.out" >&2; return 1; }
}
check gate_reads_suppressed gate
diff_() {
    # A: the figures without any suppression (by_file wrote them), B: the trace with the file
    "$PS" diff "$T/n.json" "$T/l.pst" --suppress "$T/s.txt" --json >"$T/d.json" 2>"$T/d.err"
    python3 - "$T/d.json" <<'PY'
import json, sys
d = {m['metric']: m for m in json.load(open(sys.argv[1]))['metrics']}
assert (d['leaked_bytes']['a'], d['leaked_bytes']['b']) == (2420, 2050), d.get('leaked_bytes')
assert (d['leaked_objects']['a'], d['leaked_objects']['b']) == (7, 3), d.get('leaked_objects')
PY
}
check diff_reads_suppressed diff_
bad() {
    printf 'leak_a\nfoo <  < bar\n' >"$T/bad.txt"
    "$PS" report "$T/l.pst" --suppress "$T/bad.txt" >/dev/null 2>"$T/bad.err"; r=$?
    [ $r = 2 ] && grep -qF "$T/bad.txt:2" "$T/bad.err" || { echo "  exit $r: $(cat "$T/bad.err")" >&2; return 1; }
    "$PS" report "$T/l.pst" --suppress "$T/none.txt" >/dev/null 2>&1; [ $? = 2 ]
}
check bad_suppressions_file_refused bad

# the default list: glibc's stdout buffer (st_blksize bytes of the file stdout is)
"$PS" record -o "$T/e.pst" -- "$B/bin/refengine" --synthetic dim=32,layers=1,heads=2,kv_heads=2,hidden=64,vocab=64,seq=64 \
    --workload fixed:8,8 --requests 2 --max-batch 2 >"$T/e.out" 2>/dev/null
blk=$(stat -c %o "$T/e.out")
defaults() {
    "$PS" report "$T/e.pst" --json >"$T/ed.json" && "$PS" report "$T/e.pst" --json --no-default-suppressions >"$T/en.json" || return 1
    python3 - "$T/ed.json" "$T/en.json" "$blk" <<'PY'
import json, sys
d, n, blk = json.load(open(sys.argv[1])), json.load(open(sys.argv[2])), int(sys.argv[3])
hit = [x for x in d['suppressions'] if x['pattern'] == '*_IO_file_doallocate']
assert hit and hit[0]['source'] == 'default' and hit[0]['reason'], d['suppressions']
assert hit[0]['objects'] == 1 and hit[0]['bytes'] == blk, (hit, blk)
assert d['leaked_bytes'] + d['suppressed_leaked_bytes'] == n['leaked_bytes'], (d['leaked_bytes'], n['leaked_bytes'])
assert any('_IO_file_doallocate' in r['site'] for r in n['sites']['leaks']), n['sites']['leaks']
assert not any('_IO_file_doallocate' in r['site'] for r in d['sites']['leaks']), d['sites']['leaks']
print('  stdout buffer: %d B (st_blksize %d) suppressed; leaked %d B, %d B without the defaults' % (hit[0]['bytes'], blk, d['leaked_bytes'], n['leaked_bytes']), file=sys.stderr)
PY
}
check default_suppresses_stdout_buffer defaults
html_() {
    "$PS" html "$T/e.pst" -o "$T/e.html" >/dev/null 2>&1 || return 1
    python3 - "$T/e.html" "$T/ed.json" <<'PY'
import json, re, sys
page, d = open(sys.argv[1]).read(), json.load(open(sys.argv[2]))
m = re.search(r'<script type="application/json"[^>]*>(.*?)</script>', page, re.S)
data = json.loads(m.group(1))
def find(v, k):
    if isinstance(v, dict):
        if k in v: return v[k]
        for x in v.values():
            r = find(x, k)
            if r is not None: return r
nb = find(data, 'leaked_bytes')
assert nb == d['leaked_bytes'], (nb, d['leaked_bytes'])
assert find(data, 'suppressed_leaked_bytes') == d['suppressed_leaked_bytes'], find(data, 'suppressed_leaked_bytes')
heap = [x for x in data['sites'] if x['k'] == 0]
assert sum(x['live'] for x in heap if not x.get('sup')) == d['leaked_bytes'], ('site rows live', heap)
assert sum(x['live'] for x in heap if x.get('sup')) == d['suppressed_leaked_bytes'], ('suppressed rows', heap)
PY
}
check html_leaks_suppressed html_
helps() {
    for c in report html gate diff; do
        "$PS" $c --help | grep -q -- '--suppress FILE' && "$PS" $c --help | grep -q -- '--no-default-suppressions' ||
            { echo "  $c --help lacks --suppress" >&2; return 1; }
    done
    "$PS" export --help | grep -q -- '--suppress' && { echo "  export says --suppress" >&2; return 1; }
    return 0
}
check help_lists_suppress helps
exit $status
