#!/bin/sh
# phase_frame.sh — phases from call stacks (--phase-frame, analyzer/
# phase_frame.h) on programs without markers: an engine loop in C
# (tests/progs/phase_steps) under fp and dwarf stacks, and the same loop as
# a C++ method built without frame pointers. The expectations are the
# programs' own counts and sums computed here by hand.
. tests/integration/lib.sh

N=12 K=5
for mode in fp dwarf; do
    t=$T/c_$mode.pst
    "$PS" record --stacks $mode -o "$t" -- "$P/phase_steps" $N $K > "$T/c_$mode.out" 2>/dev/null
    check "c_${mode}_recorded" grep -qx "steps=$N allocs_per_step=$K outside=$((N + 1))" "$T/c_$mode.out"
    "$PS" report "$t" --json --no-symbols --phase-frame engine_step=decode > "$T/c_$mode.json" 2> "$T/c_$mode.err"
    check "c_${mode}_steps_and_allocs_per_step_exact" python3 - "$T/c_$mode.json" $N $K <<'PY'
import json, sys
d = json.load(open(sys.argv[1]))
n, k = int(sys.argv[2]), int(sys.argv[3])
dec = d['phases']['decode']
assert dec['count'] == n, dec
assert d['decode_steps'] == n and d['allocs_per_decode_step'] == k, d
# the step's own bytes: sum over s < n, i < k of 64 + i + s
assert dec['heap_bytes'] == sum(64 + i + s for s in range(n) for i in range(k)), dec
# every allocation the program made: the steps', a header per step, the
# array, and stdout's buffer (its one printf)
assert d['allocations'] == n * k + n + 2, d['allocations']
PY
done
# without =NAME the scope is named after the function
"$PS" report "$T/c_fp.pst" --json --no-symbols --phase-frame engine_step > "$T/plain.json" 2>&1
check scope_named_after_function python3 -c "
import json,sys; d=json.load(open('$T/plain.json')); assert d['phases']['engine_step']['count'] == $N, d['phases']"
# --phase works on such a scope as on a marker: the step's allocations only
"$PS" report "$T/c_fp.pst" --json --no-symbols --phase-frame engine_step=decode --phase decode > "$T/ph.json"
check phase_selects_the_frame_scopes python3 -c "
import json; d=json.load(open('$T/ph.json')); assert d['allocations'] == $N * $K, d['allocations']"

# a function no stack holds, and a trace without stacks: exit 2, saying which
"$PS" report "$T/c_fp.pst" --phase-frame no_such_function > /dev/null 2> "$T/nf.err"; rc=$?
check unknown_function_is_an_error sh -c "[ $rc -eq 2 ] && grep -q \"no recorded stack holds 'no_such_function'\" '$T/nf.err'"
"$PS" record --stacks none -o "$T/none.pst" -- "$P/phase_steps" 3 2 > /dev/null 2>&1
"$PS" report "$T/none.pst" --phase-frame engine_step > /dev/null 2> "$T/ns.err"; rc=$?
check no_stacks_is_said sh -c "[ $rc -eq 2 ] && grep -q 'recorded with --stacks none' '$T/ns.err'"

# gate and diff read the same scopes
"$PS" gate "$T/c_fp.pst" --phase-frame engine_step=decode --max allocs_per_decode_step=$K > "$T/g.out" 2>&1
check gate_passes_at_the_exact_figure [ $? -eq 0 ]
"$PS" gate "$T/c_fp.pst" --phase-frame engine_step=decode --max allocs_per_decode_step=$((K - 1)) > "$T/g.out" 2>&1
check gate_fails_below_it [ $? -eq 1 ]
"$PS" diff "$T/c_fp.pst" "$T/c_dwarf.pst" --phase-frame engine_step=decode > "$T/d.out" 2>&1
check diff_fp_and_dwarf_agree_on_steps sh -c "! grep -q 'decode_steps\|allocs_per_decode_step' '$T/d.out'"
# sql: the metrics table holds the scopes' figures
"$PS" sql "$T/c_fp.pst" -o "$T/c.db" --phase-frame engine_step=decode --quiet
check sql_metrics_have_the_steps sh -c "[ \"\$(sqlite3 '$T/c.db' \"SELECT CAST(value AS INTEGER) FROM metrics WHERE name = 'decode_steps'\")\" = $N ]"

# replay reads the same scopes: the arena resets at the end of each call
"$PS" replay "$T/c_fp.pst" --stream heap --policy arena --phase-frame engine_step=decode --arena-reset decode --json > "$T/rp.json"
check replay_arena_resets_per_call python3 -c "
import json; d=json.load(open('$T/rp.json'))
a=[p for p in d['policies'] if p['name']=='arena'][0]; assert a['resets'] == $N, a['resets']"
"$PS" replay "$T/c_fp.pst" --stream heap --policy ideal --phase-frame no_such_function > /dev/null 2> "$T/rnf.err"; rc=$?
check replay_unknown_function_is_an_error sh -c "[ $rc -eq 2 ] && grep -q \"no recorded stack holds 'no_such_function'\" '$T/rnf.err'"

# C++: a qualified method, -O2 without frame pointers (dwarf stacks)
if g++ -O2 -g -fomit-frame-pointer -o "$T/cxx_steps" tests/cxx/phase_steps.cpp; then
    "$PS" record -o "$T/cxx.pst" -- "$T/cxx_steps" $N $K > /dev/null 2>&1
    for spec in eng::Engine::step Engine::step; do
        "$PS" report "$T/cxx.pst" --json --phase-frame "$spec=decode" > "$T/cxx.json" 2> "$T/cxx.err"
        # two allocations per object: the vector and its buffer
        check "cxx_${spec##*:}_$(echo "$spec" | tr -cd ':' | wc -c)_steps_exact" python3 -c "
import json; d=json.load(open('$T/cxx.json'))
assert d['decode_steps'] == $N and d['allocs_per_decode_step'] == 2 * $K, (d['decode_steps'], d['allocs_per_decode_step'])"
    done
else
    check cxx_built false
fi
exit $status
