#!/bin/sh
# python_frames_consumers.sh — every consumer of a trace speaks Python
# (issue 26, item 4). A small script with marker comments (# @LIST, @BIG,
# @DICT, @CALL) is recorded with Debian's /usr/bin/python3 (CPython 3.11;
# PYTHON= overrides) twice: SCALE 1, then SCALE 2, which makes the @BIG
# line allocate 8 MiB instead of 4. The expected lines are the script's own
# (grep -n of the markers), the expected bytes its own arithmetic
# (bytearray(N MiB)), never poolscope's. Checked:
#   - sql: frames rows with python = 1 naming PfHolder.pf_grow at the @BIG
#     line, its caller <module> at @CALL further out on the same stack, no
#     pc and no module on a Python row (no address), native rows around
#     them; bytes by innermost Python line (own SQL) >= the script's;
#   - export folded --lines: "<module> (pf_work.py:CALL);PfHolder.pf_grow
#     (pf_work.py:BIG)", its weight the 4 MiB; plain folded names it;
#   - export pprof, decoded here (gzip + protobuf wire format in Python,
#     independent of poolscope) and, when present, by `go tool pprof`: a
#     function PfHolder.pf_grow whose filename is the script, a location
#     at line @BIG with no address, its cumulative bytes >= 4 MiB;
#   - export chrome: the 4 MiB allocation's instant names the Python line;
#   - html: the embedded data has the frame (name, file, line, Python flag)
#     and a site row labelled by the @BIG line holding the 4 MiB (Python's
#     start-up has thousands of stacks: the script's must keep their rows),
#     its heap rows summing to report's totals and peak;
#   - report --full, diff, gate: the site is "PfHolder.pf_grow
#     (pf_work.py:BIG) < <module> (pf_work.py:CALL)"; diff's delta on it is
#     the 4 MiB the script added; a failed gate lists it;
#   - --phase-frame pf_grow: one call of the Python method, its bytes;
#   - no output prints a Python frame's tagged value (0xfe...) as an address.
# Python missing is a failure, not a skip (python.sh does the same).
. tests/integration/lib.sh

PY=${PYTHON:-/usr/bin/python3}
[ -x "$PY" ] || { echo "  no $PY" >&2; check python3_present false; exit $status; }
export PYTHONDONTWRITEBYTECODE=1

S=$T/pf_work.py
cat >"$S" <<'EOF'
import sys
SCALE = int(sys.argv[1])


def pf_make_list(n):
    return [bytes(100 + i % 7) for i in range(n)]  # @LIST


class PfHolder:
    def pf_grow(self, mib):
        self.big = bytearray(mib << 20)  # @BIG
        return self.big


def pf_strings(n):
    return {str(i): "v" * 40 + str(i) for i in range(n)}  # @DICT


keep = pf_make_list(20000)
h = PfHolder()
h.pf_grow(4 * SCALE)  # @CALL
d = pf_strings(20000)
print(len(keep), len(h.big), len(d))
EOF
line() { grep -n "# @$1\$" "$S" | cut -d: -f1; }
L_LIST=$(line LIST) L_BIG=$(line BIG) L_DICT=$(line DICT) L_CALL=$(line CALL)
check markers_found sh -c "[ -n '$L_LIST' ] && [ -n '$L_BIG' ] && [ -n '$L_DICT' ] && [ -n '$L_CALL' ]"
MIB=1048576
GROW="PfHolder.pf_grow (pf_work.py:$L_BIG)"
SITE="$GROW < <module> (pf_work.py:$L_CALL)"

rec() { # rec NAME SCALE
    "$PS" record -o "$T/$1.pst" -- "$PY" "$S" "$2" >"$T/$1.out" 2>"$T/$1.err" &&
        grep -qx "20000 $(($2 * 4 * MIB)) 20000" "$T/$1.out" || { tail -5 "$T/$1.err" >&2; return 1; }
}
check record_scale_1 rec a 1
check record_scale_2 rec b 2

# ---- sql ------------------------------------------------------------------------
"$PS" sql "$T/a.pst" -o "$T/a.db" --quiet
q() { sqlite3 "$T/a.db" "$1"; }
eq() { [ "$1" = "$2" ] || { echo "  $3: got '$1', want '$2'" >&2; return 1; }; }
check sql_schema_version_5 eq "$(q "select value from meta where key = 'schema_version'")" 5 schema_version
check sql_python_frame_names_the_line eq \
    "$(q "select count(*) > 0 from frames where python = 1 and function = 'PfHolder.pf_grow' and line = $L_BIG and file like '%/pf_work.py'")" 1 pf_grow
check sql_python_frames_of_every_function eq "$(q "select count(distinct function) from frames where python = 1
    and file like '%/pf_work.py' and ((function = 'pf_make_list.<locals>.<listcomp>' and line = $L_LIST)
    or (function = 'pf_strings.<locals>.<dictcomp>' and line = $L_DICT) or (function = '<module>' and line = $L_CALL))")" 3 functions
# a Python row is no address: no pc, no module; the native rows keep theirs
check sql_python_rows_have_no_address eq "$(q "select count(*) from frames where python = 1 and (pc is not null or module is not null)")" 0 addressed
check sql_native_rows_keep_pc eq "$(q "select count(*) > 1000 and sum(pc is null) = 0 from frames where python = 0")" 1 native
check sql_python_column_is_0_or_1 eq "$(q "select count(*) from frames where python is null or python not in (0, 1)")" 0 python
# the caller's line is further out on the same stack, native frames around
# both: the allocator's inside, the interpreter's entry (PyEval_EvalCode) outside
order() {
    eq "$(q "select count(*) > 0 from frames g join frames m on m.stack_id = g.stack_id and m.python = 1 and m.function = '<module>'
              and m.line = $L_CALL and m.level > g.level
             where g.python = 1 and g.function = 'PfHolder.pf_grow' and g.line = $L_BIG
               and exists (select 1 from frames n where n.stack_id = g.stack_id and n.python = 0 and n.level < g.level)
               and exists (select 1 from frames n where n.stack_id = g.stack_id and n.python = 0 and n.level > m.level
                           and n.function = 'PyEval_EvalCode')")" 1 order
}
check sql_python_frames_between_native_frames order
# bytes by innermost Python line, our own SQL: the script's arithmetic
BYLINE="select coalesce(sum(a.size_bytes), 0), count(a.id) from allocations a
        join frames f on f.stack_id = a.stack and f.python = 1
         and f.level = (select min(level) from frames x where x.stack_id = a.stack and x.python = 1)
        where f.function = '%s' and f.line = %s"
byline() { q "$(printf "$BYLINE" "$1" "$2")"; }
big_sql() {
    set -- $(byline PfHolder.pf_grow "$L_BIG" | tr '|' ' ')
    [ "$1" -ge $((4 * MIB)) ] && [ "$1" -lt $((4 * MIB + 65536)) ] || { echo "  @BIG bytes $1" >&2; return 1; }
}
check sql_bytes_at_big_line_are_the_scripts big_sql
many_sql() {
    set -- $(byline 'pf_make_list.<locals>.<listcomp>' "$L_LIST" | tr '|' ' ')
    [ "$2" -ge 20000 ] || { echo "  @LIST allocations $2" >&2; return 1; }
    set -- $(byline 'pf_strings.<locals>.<dictcomp>' "$L_DICT" | tr '|' ' ')
    [ "$2" -ge 40000 ] || { echo "  @DICT allocations $2" >&2; return 1; }
}
check sql_allocations_at_list_and_dict_lines many_sql
check sql_stacks_site_is_the_python_line eq "$(q "select count(*) > 0 from stacks where site = '$SITE'")" 1 site
# SCHEMA.md's own Python-line query runs: the script's three lines first
# (they allocate megabytes, the interpreter's start-up kilobytes), @BIG's
# bytes the script's 4 MiB
schema_query() {
    awk '/^Bytes allocated by Python line/ {f = 1} f && /^```sql$/ {on = 1; next} on && /^```$/ {exit} on' \
        "$ROOT/analyzer/SCHEMA.md" >"$T/pyline.sql"
    [ -s "$T/pyline.sql" ] && sqlite3 -bail -separator '|' "$T/a.db" <"$T/pyline.sql" >"$T/pyline.out" || return 1
    b=$(head -3 "$T/pyline.out" | awk -F'|' -v l="$L_BIG" '$1 == "PfHolder.pf_grow" && $2 ~ /\/pf_work.py$/ && $3 == l {print $5}')
    [ "$(head -3 "$T/pyline.out" | grep -c '/pf_work.py|')" = 3 ] && [ -n "$b" ] && [ "$b" -ge $((4 * MIB)) ] &&
        [ "$b" -lt $((4 * MIB + 65536)) ] || { cat "$T/pyline.out" >&2; return 1; }
}
check sql_schema_md_python_query schema_query
# its faster form, a walk over the stacks' paths that stops at the first
# Python frame (schema 5), gives the same rows
schema_query_walk() {
    awk '/^The same rows in less time/ {f = 1} f && /^```sql$/ {on = 1; next} on && /^```$/ {exit} on' \
        "$ROOT/analyzer/SCHEMA.md" >"$T/pyline2.sql"
    [ -s "$T/pyline2.sql" ] && sqlite3 -bail -separator '|' "$T/a.db" <"$T/pyline2.sql" >"$T/pyline2.out" &&
        [ -s "$T/pyline.out" ] && cmp "$T/pyline.out" "$T/pyline2.out"
}
check sql_schema_md_python_walk_same_rows schema_query_walk

# ---- export folded ------------------------------------------------------------------
"$PS" export "$T/a.pst" --format folded --lines -o "$T/lines.folded"
"$PS" export "$T/a.pst" --format folded -o "$T/plain.folded"
folded_lines() {
    w=$(grep -F "<module> (pf_work.py:$L_CALL);$GROW" "$T/lines.folded" | awk '{s += $NF} END {print s + 0}')
    [ "$w" -ge $((4 * MIB)) ] || { echo "  weight at $GROW: $w" >&2; return 1; }
}
check folded_lines_python_file_line folded_lines
check folded_lines_listcomp grep -qF "pf_make_list (pf_work.py:$L_LIST);pf_make_list.<locals>.<listcomp> (pf_work.py:$L_LIST)" "$T/lines.folded"
check folded_plain_python_names sh -c "grep -qF ';<module>;PfHolder.pf_grow' '$T/plain.folded' && ! grep -q 'pf_work.py' '$T/plain.folded'"

# ---- export pprof --------------------------------------------------------------------
"$PS" export "$T/a.pst" --format pprof -o "$T/a.pb.gz"
check pprof_python_function_file_line python3 - "$T/a.pb.gz" "$L_BIG" <<'PY'
import gzip, sys
data = gzip.open(sys.argv[1]).read()
big = int(sys.argv[2])

def fields(b):
    i = 0
    while i < len(b):
        k = 0; s = 0
        while True:
            c = b[i]; i += 1; k |= (c & 0x7f) << s; s += 7
            if c < 0x80: break
        f, t = k >> 3, k & 7
        if t == 0:
            v = 0; s = 0
            while True:
                c = b[i]; i += 1; v |= (c & 0x7f) << s; s += 7
                if c < 0x80: break
            yield f, v
        elif t == 2:
            n = 0; s = 0
            while True:
                c = b[i]; i += 1; n |= (c & 0x7f) << s; s += 7
                if c < 0x80: break
            yield f, b[i:i + n]; i += n
        else:
            raise SystemExit('unexpected wire type %d' % t)

strs, funcs, locs = [], {}, []
for f, v in fields(data):
    if f == 6: strs.append(v.decode())
for f, v in fields(data):
    if f == 5:
        d = dict(fields(v)); funcs[d[1]] = (strs[d.get(2, 0)], strs[d.get(4, 0)], strs[d.get(3, 0)])
    elif f == 4:
        d = {'addr': 0, 'lines': []}
        for g, w in fields(v):
            if g == 3: d['addr'] = w
            if g == 4: ln = dict(fields(w)); d['lines'].append((ln.get(1), ln.get(2, 0)))
        locs.append(d)
grow = [i for i, fn in funcs.items() if fn[0] == 'PfHolder.pf_grow']
assert len(grow) == 1, [fn for fn in funcs.values() if 'pf_grow' in fn[0]]
name, file, system = funcs[grow[0]]
assert file.endswith('/pf_work.py'), file
assert system != name, 'system_name equal to name: pprof would "demangle" it'
at = [l for l in locs if (grow[0], big) in l['lines']]
assert at, 'no location at PfHolder.pf_grow line %d' % big
assert all(l['addr'] == 0 for l in at), [hex(l['addr']) for l in at]
assert not [l for l in locs if l['addr'] >= 0xfe00000000000000], 'a Python frame as an address'
mod = [fn for fn in funcs.values() if fn[0] == '<module>' and fn[1].endswith('/pf_work.py')]
assert mod, 'no <module> function of the script'
PY
go_pprof() {
    command -v go >/dev/null 2>&1 || { echo "  no go: the decoder above only" >&2; return 0; }
    HOME=$T GOCACHE=$T/gocache GOFLAGS=-mod=mod go tool pprof -top -lines -nodecount=100000 -nodefraction=0 \
        -edgefraction=0 -sample_index=alloc_space -unit=B "$T/a.pb.gz" >"$T/pp.top" 2>"$T/pp.err" || { cat "$T/pp.err" >&2; return 1; }
    # flat flat% sum% cum cum% NAME FILE:LINE
    cum=$(awk -v want="$T/pf_work.py:$L_BIG" '$6 == "PfHolder.pf_grow" && $7 == want { sub(/B$/, "", $4); print $4 }' "$T/pp.top")
    [ -n "$cum" ] && [ "$cum" -ge $((4 * MIB)) ] &&
        grep -q " <module> $T/pf_work.py:$L_CALL\$" "$T/pp.top" || { grep pf_work "$T/pp.top" >&2; return 1; }
}
check pprof_go_tool_reads_python_lines go_pprof

# ---- export chrome ----------------------------------------------------------------------
"$PS" export "$T/a.pst" --format chrome -o "$T/a.chrome.json"
check chrome_big_allocation_names_python_line python3 - "$T/a.chrome.json" "$GROW" "$SITE" <<'PY'
import json, sys
ev = json.load(open(sys.argv[1]))['traceEvents']
big = [e for e in ev if e.get('cat') == 'alloc' and e['args']['bytes'] >= 4 << 20]
assert big, 'no 4 MiB allocation instant'
e = big[0]
assert e['args']['site'] == sys.argv[3], e['args']['site']
assert sys.argv[2] in e['args']['stack'], e['args']['stack'][:12]
PY

# ---- html ------------------------------------------------------------------------------
"$PS" html "$T/a.pst" -o "$T/a.html" >/dev/null 2>"$T/html.err"
"$PS" report "$T/a.pst" --json --no-default-suppressions >"$T/a.json"   # every leak, as the consumers have them
check html_python_frames_and_rows python3 - "$T/a.html" "$T/a.json" "$L_BIG" "$SITE" <<'PY'
import json, re, sys
html = open(sys.argv[1], encoding='utf-8').read()
m = re.search(r'<script type="application/json" id="ps-data">(.*?)</script>', html, re.S)
assert m, 'no data element'
d, r = json.loads(m.group(1)), json.load(open(sys.argv[2]))
big, site = int(sys.argv[3]), sys.argv[4]
S = d['strings']
s = lambda i: S[i] if i is not None and i >= 0 else None
fr = d['frames']
want = [i for i, f in enumerate(fr) if s(f[0]) == 'PfHolder.pf_grow' and (s(f[2]) or '').endswith('/pf_work.py')
        and f[3] == big and f[6] == 1]
assert want, [f for f in fr if 'pf_grow' in (s(f[0]) or '')]
assert not [f for f in fr if f[6] and s(f[5])], 'a Python frame with a module'
rows = [x for x in d['sites'] if x['label'] == site]
assert rows and want[0] in rows[0]['f'], ('no row', site, [x['label'] for x in d['sites'][:8]])
assert 4 << 20 <= sum(x['bytes'] for x in rows) < (4 << 20) + 65536, [x['bytes'] for x in rows]
heap = [x for x in d['sites'] if x['k'] == 0]
assert sum(x['bytes'] for x in heap) == r['total_allocated_bytes'], 'heap rows vs total'
assert sum(x['calls'] for x in heap) == r['allocations'], 'heap rows vs allocations'
assert sum(x['pk'][0] for x in heap) == r['peak_live_bytes'], 'heap rows at the peak vs peak'
assert sum(x['live'] for x in heap) == r['leaked_bytes'], 'heap rows live vs leaked'
PY

# ---- report --full, diff, gate -------------------------------------------------------------
"$PS" report "$T/a.pst" --full --top 30 >"$T/a.full.txt"
check report_full_python_frame grep -qF "$GROW" "$T/a.full.txt"
"$PS" diff "$T/a.pst" "$T/b.pst" >"$T/diff.txt"; rc=$?
check diff_names_python_line sh -c "[ $rc -eq 1 ] && grep -F '$SITE' '$T/diff.txt' | grep -q '4.00 MiB -> 8.00 MiB'"
"$PS" diff "$T/a.pst" "$T/b.pst" --json >"$T/diff.json"
check diff_json_delta_is_the_scripts python3 - "$T/diff.json" "$SITE" <<'PY'
import json, sys
s = [x for x in json.load(open(sys.argv[1]))['sites'] if x['site'] == sys.argv[2]]
assert len(s) == 1, s
assert s[0]['bytes_b'] - s[0]['bytes_a'] == 4 << 20, s
PY
"$PS" gate "$T/b.pst" --baseline "$T/a.json" --tol total_allocated_bytes=5 >"$T/gate.txt" 2>&1; rc=$?
check gate_failure_names_python_line sh -c "[ $rc -eq 1 ] && grep -q 'REGRESSED total_allocated_bytes' '$T/gate.txt' &&
    grep -F '$SITE' '$T/gate.txt' | grep -q '4.00 MiB -> 8.00 MiB'" 
"$PS" gate "$T/b.pst" --max peak_live_bytes=1MiB >"$T/gmax.txt" 2>&1; rc=$?
check gate_max_names_python_line_at_peak sh -c "[ $rc -eq 1 ] && grep -A5 'sites at the heap peak' '$T/gmax.txt' | grep -F '$SITE' | grep -q '8.00 MiB'"
"$PS" gate "$T/a.pst" --baseline "$T/a.json" >"$T/gok.txt" 2>&1; rc=$?
check gate_pass_lists_no_sites sh -c "[ $rc -eq 0 ] && ! grep -q 'Allocation sites' '$T/gok.txt'"

# ---- --phase-frame on a Python method ---------------------------------------------------
"$PS" report "$T/a.pst" --json --phase-frame pf_grow=grow >"$T/pf.json" 2>"$T/pf.err"
check phase_frame_python_method python3 - "$T/pf.json" <<'PY'
import json, sys
g = json.load(open(sys.argv[1]))['phases']['grow']
assert g['count'] == 1 and 4 << 20 <= g['heap_bytes'] < (4 << 20) + 65536, g
PY
"$PS" report "$T/a.pst" --json --phase-frame PfHolder.pf_grow >"$T/pfq.json" 2>&1
check phase_frame_python_qualified python3 -c "
import json; g = json.load(open('$T/pfq.json'))['phases']['PfHolder.pf_grow']; assert g['count'] == 1, g"

# ---- no Python frame printed as an address ------------------------------------------------
check no_python_frame_as_hex sh -c "! grep -Eiq '0x ?fe0[0-9a-f]{13}|\\bfe0000[0-9a-f]{10}\\b' \
    '$T/lines.folded' '$T/plain.folded' '$T/a.chrome.json' '$T/a.full.txt' '$T/diff.txt' '$T/gate.txt' '$T/a.html'"
exit $status
