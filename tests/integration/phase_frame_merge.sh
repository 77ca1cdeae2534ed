#!/bin/sh
# phase_frame_merge.sh — --phase-frame calls that may have merged
# (analyzer/phase_frame.h, "Calls that may have merged"): step() called in
# a loop that allocates nothing between calls reads as one call, and the
# report and gate must say so instead of passing or failing on its
# figures; the same calls separated by an allocation outside, and a
# forward() that loops over its layers in every call, must not be flagged
# and must count the program's own calls (tests/progs/pf_merge).
. tests/integration/lib.sh

N=50 K=12 L=4
for mode in fp dwarf; do
    for prog in merged separated layers; do
        k=$K; [ $prog = layers ] && k=$L
        "$PS" record --stacks $mode -o "$T/$prog.$mode.pst" -- "$P/pf_merge" $prog $N $k > "$T/$prog.$mode.out" 2>/dev/null
        check "${prog}_${mode}_recorded" grep -qx "calls=$N allocs_per_call=$k" "$T/$prog.$mode.out"
    done

    # merged: one instance of 50 calls. The report says so, whatever the format
    m=$T/merged.$mode.pst
    "$PS" report "$m" --no-symbols --phase-frame step=decode > "$T/m.txt" 2> "$T/m.err"
    check "merged_${mode}_report_says_so" grep -q "calls of step may have merged: 1 instance looks like repeated calls" "$T/m.err"
    "$PS" report "$m" --json --no-symbols --phase-frame step=decode > "$T/m.json" 2> "$T/mj.err"
    check "merged_${mode}_json_report_says_so" grep -q "calls of step may have merged" "$T/mj.err"
    # gate refuses a figure read from that phase: exit 2, one line naming it,
    # whether the limit would pass or fail on the merged figure
    for lim in $K 600; do
        "$PS" gate "$m" --phase-frame step=decode --max allocs_per_decode_step=$lim > "$T/g.out" 2> "$T/g.err"; rc=$?
        check "merged_${mode}_gate_limit_${lim}_exits_2" sh -c "[ $rc -eq 2 ] && [ \$(wc -l < '$T/g.err') -eq 1 ] &&
            grep -q \"not gating on 'allocs_per_decode_step'.*calls of step may have merged\" '$T/g.err'"
    done
    "$PS" gate "$m" --phase-frame step=decode --max phases.decode.count=$N > /dev/null 2> "$T/g.err"; rc=$?
    check "merged_${mode}_gate_phase_count_exits_2" [ $rc -eq 2 ]
    # the default checks against a baseline read allocs_per_decode_step too
    "$PS" gate "$m" --phase-frame step=decode --baseline "$T/m.json" > /dev/null 2> "$T/g.err"; rc=$?
    check "merged_${mode}_gate_default_checks_exit_2" [ $rc -eq 2 ]
    # a metric that no phase feeds is gated as before
    "$PS" gate "$m" --phase-frame step=decode --max peak_live_bytes=1MiB > /dev/null 2>&1
    check "merged_${mode}_gate_other_metric_passes" [ $? -eq 0 ]

    # separated: 50 steps of 12 allocations, no note, the gate on the figure
    s=$T/separated.$mode.pst
    "$PS" report "$s" --json --no-symbols --phase-frame step=decode > "$T/s.json" 2> "$T/s.err"
    check "separated_${mode}_steps_exact" python3 -c "
import json; d = json.load(open('$T/s.json'))
assert d['decode_steps'] == $N and d['allocs_per_decode_step'] == $K, (d['decode_steps'], d['allocs_per_decode_step'])"
    check "separated_${mode}_no_note" sh -c "! grep -q 'may have merged' '$T/s.err'"
    "$PS" gate "$s" --phase-frame step=decode --max allocs_per_decode_step=$K > /dev/null 2>&1
    check "separated_${mode}_gate_passes_at_the_figure" [ $? -eq 0 ]
    "$PS" gate "$s" --phase-frame step=decode --max allocs_per_decode_step=$((K - 1)) > /dev/null 2>&1
    check "separated_${mode}_gate_fails_below_it" [ $? -eq 1 ]

    # layers: forward() repeats its first stack L times in every call; its
    # calls are separated, so nothing is flagged
    l=$T/layers.$mode.pst
    "$PS" report "$l" --json --no-symbols --phase-frame forward=decode > "$T/l.json" 2> "$T/l.err"
    check "layers_${mode}_steps_exact" python3 -c "
import json; d = json.load(open('$T/l.json'))
assert d['decode_steps'] == $N and d['allocs_per_decode_step'] == $L, (d['decode_steps'], d['allocs_per_decode_step'])"
    check "layers_${mode}_no_note" sh -c "! grep -q 'may have merged' '$T/l.err'"
    "$PS" gate "$l" --phase-frame forward=decode --max allocs_per_decode_step=$L > /dev/null 2>&1
    check "layers_${mode}_gate_passes_at_the_figure" [ $? -eq 0 ]
    "$PS" gate "$l" --phase-frame forward=decode --max allocs_per_decode_step=$((L - 1)) > /dev/null 2>&1
    check "layers_${mode}_gate_fails_below_it" [ $? -eq 1 ]
done

# phase_steps (phase_frame.sh): engine_step allocates its K objects in a
# loop, one stack, called with a header between calls: not flagged
"$PS" record -o "$T/ps.pst" -- "$P/phase_steps" 12 5 > /dev/null 2>&1
"$PS" report "$T/ps.pst" --no-symbols --phase-frame engine_step=decode > /dev/null 2> "$T/ps.err"
check phase_steps_no_note sh -c "! grep -q 'may have merged' '$T/ps.err'"
exit $status
