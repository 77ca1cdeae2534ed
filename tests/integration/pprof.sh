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
# the export suppresses nothing (suppressions are report, html, gate and diff's)
"$PS" report "$T/e.pst" --json --top 100000 --no-default-suppressions > "$T/r.json"
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
# One mapping per module (issue 30, item 9): decoded by protoc, not by our
# code, with a schema of the few profile.proto fields read here (field
# numbers of github.com/google/pprof's proto/profile.proto). The program's
# own mapping comes first with its path, its build-id as readelf prints it
# and the range the trace loaded it at; every native location points at
# the mapping holding its address; and `go tool pprof` names the binary.
mappings() {
    command -v protoc >/dev/null 2>&1 || { echo "  no protoc (scripts/deps.sh installs protobuf-compiler)" >&2; return 1; }
    cat >"$T/p.proto" <<'PROTO'
syntax = "proto3";
message Mapping { uint64 id = 1; uint64 memory_start = 2; uint64 memory_limit = 3;
  uint64 file_offset = 4; int64 filename = 5; int64 build_id = 6; bool has_functions = 7; }
message Location { uint64 id = 1; uint64 mapping_id = 2; uint64 address = 3; }
message P { repeated Mapping mapping = 3; repeated Location location = 4; repeated string string_table = 6; }
PROTO
    gzip -dc "$T/e.pb.gz" >"$T/e.pb" &&
        protoc --decode_raw <"$T/e.pb" >"$T/raw.txt" &&
        (cd "$T" && protoc --decode=P p.proto <e.pb >"$T/typed.txt") || return 1
    readelf -n "$B/bin/refengine" | sed -n 's/.*Build ID: //p' >"$T/bid.txt"
    python3 - "$T/raw.txt" "$T/typed.txt" "$B/bin/refengine" "$T/bid.txt" <<'PY'
import re, sys
raw, typed, exe, bid = open(sys.argv[1]).read(), open(sys.argv[2]).read(), sys.argv[3], open(sys.argv[4]).read().strip()
# the raw decode: top-level field 3 (mapping) present
assert re.search(r'^3 \{', raw, re.M), 'no mapping (field 3) in protoc --decode_raw'
def blocks(name):
    return [dict(re.findall(r'(\w+): (\S+)', b)) for b in re.findall(r'^%s \{\n(.*?)^\}' % name, typed, re.M | re.S)]
strings = [eval(s) for s in re.findall(r'^string_table: (".*")$', typed, re.M)]
assert strings and strings[0] == '', strings[:3]   # index 0 is ""
maps, locs = blocks('mapping'), blocks('location')
assert maps, 'no mappings'
def s(m, k): return strings[int(m.get(k, 0))]
first = maps[0]
assert s(first, 'filename') == exe, ('first mapping', s(first, 'filename'), exe)
assert s(first, 'build_id') == bid, ('build-id', s(first, 'build_id'), bid)
assert int(first['memory_limit']) > int(first['memory_start']) > 0, first
names = [s(m, 'filename') for m in maps]
assert len(names) == len(set(zip(names, [m['memory_start'] for m in maps]))), 'a module twice'
assert any('libc.so' in n for n in names), names
byid = {m['id']: m for m in maps}
native = [l for l in locs if 'address' in l]
assert native, 'no native locations'
for l in native:
    m = byid.get(l.get('mapping_id'))
    assert m, ('location without mapping', l)
    a = int(l['address'])
    assert int(m['memory_start']) <= a < int(m['memory_limit']), (l, m)
print('  %d mappings, %d native locations, main %s' % (len(maps), len(native), names[0]), file=sys.stderr)
PY
}
check pprof_one_mapping_per_module mappings
main_named() {
    go tool pprof -top -nodecount=1 "$T/e.pb.gz" >"$T/named.top" 2>"$T/named.err"
    grep -q '^File: refengine$' "$T/named.top" && ! grep -q 'Main binary filename not available' "$T/named.err" ||
        { head -5 "$T/named.top" "$T/named.err" >&2; return 1; }
}
check pprof_names_the_binary main_named
exit $status
