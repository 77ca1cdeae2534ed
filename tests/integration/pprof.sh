#!/bin/sh
# pprof.sh — export --format pprof read by `go tool pprof` (Debian golang-go):
# its functions' allocated bytes are the report's sites summed by their
# innermost function, its in-use bytes the report's leaks.
. tests/integration/lib.sh

command -v go > /dev/null 2>&1 || { check go_installed false; exit $status; }
"$PS" record -o "$T/e.pst" -- "$B/bin/refengine" --synthetic dim=32,layers=1,heads=2,kv_heads=2,hidden=64,vocab=64,seq=64 \
    --workload fixed:8,8 --requests 3 --max-batch 2 --quiet > /dev/null 2>&1
"$PS" export "$T/e.pst" --format pprof -o "$T/e.pb.gz"
check export_written sh -c "[ -s '$T/e.pb.gz' ] && [ \"\$(head -c 2 '$T/e.pb.gz' | od -An -tx1 | tr -d ' ')\" = 1f8b ]"
"$PS" report "$T/e.pst" --json --top 100000 > "$T/r.json"
export HOME=$T GOCACHE=$T/gocache GOFLAGS=-mod=mod
for idx in alloc_space alloc_objects inuse_space; do
    go tool pprof -top -nodecount=100000 -nodefraction=0 -edgefraction=0 -sample_index=$idx -unit=B "$T/e.pb.gz" > "$T/$idx.top" 2> "$T/$idx.err"
done
check pprof_reads_it sh -c "grep -q 'Type: alloc_space' '$T/alloc_space.top'"
check functions_equal_report_sites python3 - "$T/alloc_space.top" "$T/alloc_objects.top" "$T/inuse_space.top" "$T/r.json" <<'PY'
import json, re, sys
def flat(path):
    out = {}
    for line in open(path):
        m = re.match(r'\s*(\d+)B?\s+\S+%\s+\S+%\s+\d+B?\s+\S+%\s+(.+)$', line.rstrip())
        if m:
            out[m.group(2)] = out.get(m.group(2), 0) + int(m.group(1))
    return out
space, objects, inuse = flat(sys.argv[1]), flat(sys.argv[2]), flat(sys.argv[3])
r = json.load(open(sys.argv[4]))
want_b, want_n = {}, {}
for row in r['sites']['by_bytes']:
    fn = row['site'].split(' (')[0].split(' < ')[0]
    want_b[fn] = want_b.get(fn, 0) + row['bytes']
    want_n[fn] = want_n.get(fn, 0) + row['calls']
want_b = {k: v for k, v in want_b.items() if v}
top = sorted(want_b, key=lambda k: -want_b[k])[:5]
assert top, r['sites']
for fn in top:
    assert space.get(fn) == want_b[fn], (fn, space.get(fn), want_b[fn])
    assert objects.get(fn) == want_n[fn], (fn, objects.get(fn), want_n[fn])
assert sum(space.values()) == r['total_allocated_bytes'], (sum(space.values()), r['total_allocated_bytes'])
assert sum(inuse.values()) == r['leaked_bytes'], (sum(inuse.values()), r['leaked_bytes'])
PY
# a pipe works too: -o -
"$PS" export "$T/e.pst" --format pprof -o - > "$T/pipe.pb.gz"
check pprof_to_stdout_equals_file sh -c "cmp -s '$T/pipe.pb.gz' '$T/e.pb.gz'"
exit $status
