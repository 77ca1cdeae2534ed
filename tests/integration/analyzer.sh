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
head -c $(($(wc -c < "$T/prog.pst") * 3 / 4)) "$T/prog.pst" > "$T/cut.pst"   # compressed (1.5): a fraction
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
"$P" gate "$T/prog.pst" --baseline "$T/base.json" --tol reuse.same_address_reuse=0 --tol pool.hit_rate=0 > "$T/g.out"
check gate_rates_pass_null_hit_rate_is_na sh -c "[ $? -eq 0 ] && grep -q '^n/a *pool.hit_rate' '$T/g.out'"
"$P" gate "$T/prog.pst" --baseline "$T/nope.json" --tol peak_live_bytes=5 2> /dev/null; check gate_missing_baseline_2 [ $? -eq 2 ]
"$P" gate "$T/prog.pst" --baseline "$T/base.json" --tol no.such=5 2> /dev/null; check gate_unknown_metric_2 [ $? -eq 2 ]
"$P" gate "$T/bad.pst" --baseline "$T/base.json" 2> /dev/null; check gate_bad_trace_2 [ $? -eq 2 ]
"$P" gate "$T/prog.pst" --baseline "$T/base.json" --tol peak_live_bytes 2> /dev/null; check gate_bad_rule_2 [ $? -eq 2 ]

# ---- issue 12: figures a gate can trust ----
# a metric that does not apply is null, never 0 (no pool, no KV, no decode step)
check json_null_when_not_applicable python3 -c "
import json
d = json.load(open('$T/base.json'))
assert d['pool']['hit_rate'] is None and d['allocs_per_decode_step'] is None, d
assert d['heap_calls_per_decode_step'] is None and d['kv']['kv_utilization'] is None, d
assert d['kv']['kv_utilization_per_step'] is None
assert d['program'].endswith('/prog') and d['argv'][0].endswith('/prog'), (d['program'], d['argv'])
"
"$P" gate "$T/prog.pst" --max allocs_per_decode_step=5 > /dev/null 2> "$T/g.err"
check gate_max_on_null_metric_2 sh -c "[ $? -eq 2 ] && grep -q \"'allocs_per_decode_step' does not apply\" '$T/g.err'"
# string, infinite, missing metrics in the baseline: exit 2 naming metric and baseline
python3 - "$T" <<'PY'
import json, sys
t = sys.argv[1]
d = json.load(open(t + '/base.json'))
s = dict(d); s['peak_live_bytes'] = str(d['peak_live_bytes'])
json.dump(s, open(t + '/string.json', 'w'))
txt = json.dumps(d).replace('"leaked_bytes": %d' % d['leaked_bytes'], '"leaked_bytes": 1e999')
assert '1e999' in txt
open(t + '/inf.json', 'w').write(txt)
m = dict(d); del m['total_allocated_bytes']
json.dump(m, open(t + '/missing.json', 'w'))
o = dict(d); o['program'] = '/usr/bin/other'
json.dump(o, open(t + '/other.json', 'w'))
PY
for c in "string:peak_live_bytes:is not a number" "inf:leaked_bytes:is not a finite number" \
         "missing:total_allocated_bytes:no metric"; do
    f=${c%%:*}; rest=${c#*:}; m=${rest%%:*}; why=${rest#*:}
    "$P" gate "$T/prog.pst" --baseline "$T/$f.json" > /dev/null 2> "$T/g.err"; rc=$?
    check "gate_${f}_metric_in_baseline_2" sh -c "[ $rc -eq 2 ] && grep -q \"$m\" '$T/g.err' && grep -q '$why' '$T/g.err' && grep -q '$f.json' '$T/g.err'"
    "$P" gate "$T/prog.pst" --baseline "$T/$f.json" --tol $m=50 > /dev/null 2>&1
    check "gate_${f}_metric_explicit_tol_2" [ $? -eq 2 ]
done
"$P" gate "$T/prog.pst" --baseline "$T/base.json" > "$T/g.out"
check gate_names_its_baseline sh -c "grep -q 'against baseline $T/base.json' '$T/g.out' && grep -q 'passed against $T/base.json' '$T/g.out'"
"$P" gate "$T/prog.pst" --baseline "$T/other.json" > /dev/null 2> "$T/g.err"; rc=$?
check gate_refuses_other_program sh -c "[ $rc -eq 2 ] && grep -q 'recorded from /usr/bin/other' '$T/g.err'"
"$P" gate "$T/prog.pst" --baseline "$T/other.json" --accept-program > /dev/null 2>&1
check gate_accept_program_passes [ $? -eq 0 ]

# incomplete traces: cut short (and so no END), header only, a corrupt chunk, killed
sz=$(stat -c %s "$T/prog.pst")
head -c $((sz / 2)) "$T/prog.pst" > "$T/half.pst"
head -c 200 "$T/prog.pst" > "$T/hdr.pst"
cp "$T/prog.pst" "$T/corrupt.pst"
printf '\377\377\377\377\377\377\377\377' | dd of="$T/corrupt.pst" bs=1 seek=$((sz / 3)) conv=notrunc 2>/dev/null
"$P" record -o "$T/k.pst" -- "$PROGS/sigkill" 3000 > "$T/k.out" 2> "$T/k.err" &
rp=$!
if wait_line "$T/k.out" '^sync' $rp; then sleep 0.4; kill -KILL "$(pgrep -P $rp)"; fi
wait $rp
for f in half hdr corrupt k; do
    "$P" report "$T/$f.pst" --json > "$T/$f.json" 2> /dev/null
    "$P" gate "$T/$f.pst" --max leaked_bytes=1GiB > /dev/null 2> "$T/g.err"; rc=$?
    check "gate_refuses_incomplete_$f" sh -c "[ $rc -eq 2 ] && grep -q 'allow-incomplete' '$T/g.err'"
    "$P" gate "$T/$f.json" --max leaked_bytes=1GiB > /dev/null 2>&1
    check "gate_refuses_incomplete_${f}_json" [ $? -eq 2 ]
    "$P" diff "$T/prog.pst" "$T/$f.pst" > /dev/null 2>&1
    check "diff_refuses_incomplete_$f" [ $? -eq 2 ]
done
"$P" gate "$T/prog.pst" --baseline "$T/half.json" > /dev/null 2> "$T/g.err"
check gate_refuses_incomplete_baseline sh -c "[ $? -eq 2 ] && grep -q 'baseline' '$T/g.err'"
"$P" gate "$T/half.pst" --max leaked_bytes=1GiB --allow-incomplete > /dev/null 2>&1
check gate_allow_incomplete [ $? -eq 0 ]
"$P" diff "$T/prog.pst" "$T/half.pst" --allow-incomplete > /dev/null 2>&1
check diff_allow_incomplete [ $? -le 1 ]

# an unknown --phase is an error that lists the phases
cat > "$T/steps.c" <<'C'
#include <stdlib.h>
#include "poolscope/poolscope.h"
int main(void) {
    for (int s = 0; s < 12; s++) {
        ps_begin("decode", (unsigned)s, 0, 0);
        void *a = malloc(100), *b = calloc(4, 8), *c = malloc(300);
        c = realloc(c, 600);
        free(a); free(b); free(c);
        ps_end("decode", (unsigned)s);
    }
    return 0;
}
C
cc -O0 -I"$ROOT/include" -o "$T/steps" "$T/steps.c" "$B/lib/libpstrace.a" -ldl -pthread
"$P" record -o "$T/steps.pst" -- "$T/steps" > /dev/null 2>&1
"$P" report "$T/steps.pst" --phase nosuch > "$T/ph.out" 2> "$T/ph.err"; rc=$?
check report_unknown_phase_lists_phases sh -c "[ $rc -eq 2 ] && [ ! -s '$T/ph.out' ] && grep -q \"no phase 'nosuch'.*decode\" '$T/ph.err'"
"$P" report "$T/steps.pst" --phase decode > /dev/null
check report_known_phase_ok [ $? -eq 0 ]
# allocs_per_decode_step counts allocation calls (malloc, calloc, malloc,
# realloc = 4 per step); heap calls (with the 3 frees: 7) are their own key
"$P" report "$T/steps.pst" --json --no-symbols > "$T/steps.json"
check allocs_per_decode_step_counts_allocations python3 -c "
import json
d = json.load(open('$T/steps.json'))
assert d['allocs_per_decode_step'] == 4, d['allocs_per_decode_step']
assert d['heap_calls_per_decode_step'] == 7, d['heap_calls_per_decode_step']
assert d['decode_steps'] == 12
"

# identical deterministic refengine runs: the default gate at 0% tolerance
# and diff both pass, five times in a row (time-weighted figures are not
# gate defaults; timing differences are shown, not counted)
ENG="$B/bin/refengine --synthetic dim=64,layers=2,heads=4,kv_heads=4,hidden=128,vocab=512,seq=128 \
    --workload sharegpt --requests 12 --max-batch 4 --kv-blocks 24 --block-size 8 --alloc pool --quiet"
"$P" record -o "$T/e0.pst" -- $ENG > /dev/null 2>&1
"$P" report "$T/e0.pst" --json --no-symbols > "$T/e0.json"
ok_runs=0
for i in 1 2 3 4 5; do
    "$P" record -o "$T/e$i.pst" -- $ENG > /dev/null 2>&1
    "$P" gate "$T/e$i.pst" --baseline "$T/e0.json" --default-tol 0 > "$T/eg$i.out" 2>&1; g=$?
    "$P" diff "$T/e0.pst" "$T/e$i.pst" > "$T/ed$i.out" 2>&1; d=$?
    if [ $g -eq 0 ] && [ $d -eq 0 ]; then ok_runs=$((ok_runs + 1)); else cat "$T/eg$i.out" "$T/ed$i.out" >&2; fi
done
check identical_runs_gate_and_diff_pass_5_of_5 [ $ok_runs -eq 5 ]
check gate_default_uses_step_weighted_kv sh -c "grep -q 'kv.kv_utilization_per_step' '$T/eg1.out' && ! grep -q 'kv.kv_utilization:' '$T/eg1.out'"
"$P" diff "$T/e0.pst" "$T/e1.pst" --timing > /dev/null 2>&1
check diff_timing_counts_when_asked [ $? -eq 1 ]

# the CI example
POOLSCOPE=$P CI_GATE_DIR=$T/ci sh scripts/ci-gate.sh "$T/base.json" -- "$T/prog" > "$T/ci.out" 2>&1
rc=$?; [ $rc -eq 0 ] || cat "$T/ci.out"
check ci_gate_example_passes [ $rc -eq 0 ]
exit $status
