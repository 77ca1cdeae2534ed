#!/bin/sh
# analyzer.sh — report, sql, plot, export, diff and gate through the CLI, on a
# program of our own recorded with the interposer (symbolization must name
# its function and source line) and on edits of its report JSON.
. tests/integration/lib.sh
P=$BIN/poolscope

cat > "$T/prog.c" <<'C'
#include <stdlib.h>
#include <string.h>
__attribute__((noinline)) void *make_buffer(size_t n) { void *p = malloc(n); memset(p, 1, n); return p; }
int main(void) {
    void *keep[100];
    for (int r = 0; r < 50; r++) {
        for (int i = 0; i < 100; i++) keep[i] = make_buffer(64 + (size_t)i * 16);
        for (int i = 0; i < 100; i++) free(keep[i]);
    }
    void *leak = make_buffer(4096); (void)leak;
    return 0;
}
C
cc -g -O1 -fno-omit-frame-pointer -o "$T/prog" "$T/prog.c"
check record_prog "$P" record -o "$T/prog.pst" --stacks fp -- "$T/prog"

"$P" report "$T/prog.pst" > "$T/report.txt" 2>&1
check report_runs grep -q "peak live heap" "$T/report.txt"
check symbolization_names_function_and_line grep -q "make_buffer (prog.c:3)" "$T/report.txt"
check report_shows_leak grep -q "leaked at exit .*4.00 KiB" "$T/report.txt"
"$P" report "$T/prog.pst" --json > "$T/base.json"
check report_json_parses python3 -c "
import json, sys
d = json.load(open('$T/base.json'))
assert d['calls']['malloc'] == 5001 and d['calls']['free'] == 5000, d['calls']
assert d['peak_live_bytes'] == 85600 and d['leaked_bytes'] == 4096
for k in ('events','peak_rss_bytes','total_allocated_bytes','lost_events','pool','reuse','kv','phases','allocs_per_decode_step'):
    assert k in d, k
"
printf 'this is not a trace\n' > "$T/bad.pst"
"$P" report "$T/bad.pst" > "$T/bad.out" 2> "$T/bad.err"; rc=$?
check bad_input_exit_2 [ "$rc" -eq 2 ]
check bad_input_one_line sh -c "[ \$(wc -l < '$T/bad.err') -eq 1 ] && grep -q 'bad.pst: not a poolscope trace' '$T/bad.err'"
head -c 20000 "$T/prog.pst" > "$T/cut.pst"
"$P" report "$T/cut.pst" > "$T/cut.out" 2> "$T/cut.err"; rc=$?
check truncated_still_reports sh -c "[ $rc -eq 0 ] && grep -q warning '$T/cut.err' && grep -q 'peak live heap' '$T/cut.out'"

# sql
"$P" sql "$T/prog.pst" -o "$T/prog.db" > /dev/null
events=$(python3 -c "import json; print(json.load(open('$T/base.json'))['events_total'])")
check sql_rows_equal_events [ "$(sqlite3 "$T/prog.db" 'select count(*) from events')" = "$events" ]
check sql_query_top_function [ "$(sqlite3 "$T/prog.db" "select f.function from events e join frames f on f.stack_id = e.stack and f.level = 0 where e.type = 1 group by 1 order by count(*) desc limit 1")" = make_buffer ]

# plots
cat > "$T/replay.json" <<'J'
{"policies": [{"name": "malloc", "peak_reserved_bytes": 3000000, "peak_live_bytes": 2000000},
              {"name": "arena", "peak_reserved_bytes": 8000000, "peak_live_bytes": 2000000},
              {"name": "pool", "peak_reserved_bytes": 2400000, "peak_live_bytes": 2000000},
              {"name": "ideal", "peak_reserved_bytes": 2000000, "peak_live_bytes": 2000000}]}
J
"$P" plot "$T/prog.pst" -o "$T/plots" --replay "$T/replay.json" > /dev/null
for f in memory sizes lifetimes reuse_cdf policies; do
    check "plot_${f}_png" python3 -c "
d = open('$T/plots/$f.png', 'rb').read()
assert d[:8] == b'\x89PNG\r\n\x1a\n' and len(d) > 5000, len(d)
"
    check "plot_${f}_svg" grep -q '<svg' "$T/plots/$f.svg"
done

# exports
"$P" export "$T/prog.pst" --format chrome -o "$T/prog.chrome.json"
check export_chrome_parses python3 -c "
import json
d = json.load(open('$T/prog.chrome.json'))
assert any(e['ph'] == 'C' for e in d['traceEvents'])
"
"$P" export "$T/prog.pst" --format folded -o "$T/prog.folded" --weight calls
check export_folded_lines python3 -c "
import re
lines = open('$T/prog.folded').read().splitlines()
assert lines and all(re.fullmatch(r'\S.*;?.* [0-9]+', l) for l in lines), lines
assert sum(int(l.rsplit(' ', 1)[1]) for l in lines) == 5001
assert any(l.split(' ')[0].endswith('main;make_buffer') for l in lines), lines
"

# diff
"$P" diff "$T/prog.pst" "$T/prog.pst" > "$T/diff.out"; rc=$?
check diff_self_is_empty sh -c "[ $rc -eq 0 ] && grep -q 'no differences' '$T/diff.out'"
python3 - "$T" <<'PY'
import json, sys
t = sys.argv[1]
d = json.load(open(t + '/base.json'))
d['peak_live_bytes'] = 85600 * 10 // 11            # current is +10.0% over this (rounded down: a bit more)
d['leaked_bytes'] = 0                               # zero baseline: tolerance is absolute
json.dump(d, open(t + '/edited.json', 'w'))
e = dict(d); e['peak_live_bytes'] = 77818          # 85600 / 77818 - 1 = 10.0005%
json.dump(e, open(t + '/edge.json', 'w'))
PY
"$P" diff "$T/base.json" "$T/edited.json" > /dev/null; rc=$?
check diff_finds_change [ "$rc" -eq 1 ]

# gate
"$P" gate "$T/prog.pst" --baseline "$T/base.json" > /dev/null; check gate_self_passes [ $? -eq 0 ]
"$P" gate "$T/prog.pst" --baseline "$T/base.json" --max peak_live_bytes=64KiB > "$T/g.out"; rc=$?
check gate_max_fails_1 sh -c "[ $rc -eq 1 ] && grep -q 'REGRESSED peak_live_bytes' '$T/g.out'"
"$P" gate "$T/prog.pst" --max peak_live_bytes=84KiB > /dev/null; check gate_max_units_pass [ $? -eq 0 ]
"$P" gate "$T/prog.pst" --baseline "$T/edge.json" --tol peak_live_bytes=10.01 > /dev/null; check gate_tol_edge_pass [ $? -eq 0 ]
"$P" gate "$T/prog.pst" --baseline "$T/edge.json" --tol peak_live_bytes=9.99 > /dev/null; check gate_tol_edge_fail [ $? -eq 1 ]
"$P" gate "$T/prog.pst" --baseline "$T/edited.json" --tol leaked_bytes=4KiB > /dev/null; check gate_zero_baseline_abs_pass [ $? -eq 0 ]
"$P" gate "$T/prog.pst" --baseline "$T/edited.json" --tol leaked_bytes=4095 > /dev/null; check gate_zero_baseline_abs_fail [ $? -eq 1 ]
"$P" gate "$T/prog.pst" --baseline "$T/base.json" --tol reuse.same_address_reuse=0 --tol pool.hit_rate=0 > /dev/null
check gate_rates_pass [ $? -eq 0 ]
"$P" gate "$T/prog.pst" --baseline "$T/nope.json" --tol peak_live_bytes=5 2> /dev/null; check gate_missing_baseline_2 [ $? -eq 2 ]
"$P" gate "$T/prog.pst" --baseline "$T/base.json" --tol no.such=5 2> /dev/null; check gate_unknown_metric_2 [ $? -eq 2 ]
"$P" gate "$T/bad.pst" --baseline "$T/base.json" 2> /dev/null; check gate_bad_trace_2 [ $? -eq 2 ]
"$P" gate "$T/prog.pst" --baseline "$T/base.json" --tol peak_live_bytes 2> /dev/null; check gate_bad_rule_2 [ $? -eq 2 ]

# the CI example
POOLSCOPE=$P CI_GATE_DIR=$T/ci sh scripts/ci-gate.sh "$T/base.json" -- "$T/prog" > "$T/ci.out" 2>&1
rc=$?; [ $rc -eq 0 ] || cat "$T/ci.out"
check ci_gate_example_passes [ $rc -eq 0 ]
exit $status
