#!/bin/sh
# kvutil.sh — KV-cache utilization on real refengine traces (issue 12):
# report --json kv.kv_utilization equals replay's kv-paged utilization and
# an independent count over the reader API (tests/progs/kv_count), under
# several block sizes, with a KV pool small enough that requests are
# preempted; and the peaks report and replay share are equal. The pool sets a block's tokens at allocation and emits TOKENS
# only on change, so a reader that resets at allocation reads far lower.
. tests/integration/lib.sh

MODEL=dim=64,layers=2,heads=4,kv_heads=4,hidden=128,vocab=512,seq=128
preempted=0
for bs in 4 8 16 32; do
    t=$T/kv$bs.pst
    # 192 token slots for 4 running requests of up to 128 tokens: preemption
    "$PS" record -o "$t" -- "$B/bin/refengine" --synthetic $MODEL --workload sharegpt --requests 12 \
        --max-batch 4 --block-size $bs --kv-blocks $((192 / bs)) --quiet > "$T/eng$bs.out" 2>&1
    check "record_block_size_$bs" [ -s "$t" ]
    p=$(sed -n 's/.*preemptions \([0-9]*\).*/\1/p' "$T/eng$bs.out" | head -1)
    [ "${p:-0}" -gt 0 ] && preempted=$((preempted + 1))
    "$P/kv_count" "$t" > "$T/count$bs"
    "$PS" report "$t" --json --no-symbols --no-default-suppressions > "$T/report$bs.json"
    "$PS" replay "$t" --policy kv-paged --json > "$T/replay$bs.json"
    # figures report and replay share come from one model: equal, not close
    "$PS" replay "$t" --policy ideal --stream heap --json > "$T/heap$bs.json"
    "$PS" replay "$t" --policy ideal --stream tensor --json > "$T/tensor$bs.json"
    check "report_and_replay_share_peaks_bs$bs" python3 - "$T/report$bs.json" "$T/heap$bs.json" "$T/tensor$bs.json" <<'PY'
import json, sys
rep = json.load(open(sys.argv[1]))
heap = json.load(open(sys.argv[2]))['policies'][0]
tensor = json.load(open(sys.argv[3]))['policies'][0]
assert rep['peak_live_bytes'] == heap['peak_live_bytes'] > 0, (rep['peak_live_bytes'], heap)
assert rep['leaked_bytes'] == heap['leaked_bytes'], (rep['leaked_bytes'], heap)
assert rep['pool']['peak_live_bytes'] == tensor['peak_live_bytes'] > 0, (rep['pool'], tensor)
PY
    check "kv_utilization_report_replay_count_agree_bs$bs" python3 - "$T/count$bs" "$T/report$bs.json" "$T/replay$bs.json" <<'PY'
import json, sys
count = dict(l.strip().split('=', 1) for l in open(sys.argv[1]))
rep = json.load(open(sys.argv[2]))['kv']
pol = [p for p in json.load(open(sys.argv[3]))['policies'] if p['name'] == 'kv-paged'][0]
want = float(count['kv_utilization'])
assert int(count['allocs']) > 0, count
got = {'report': rep['kv_utilization'], 'replay kv-paged': pol['kv_utilization']}
bad = {k: v for k, v in got.items() if abs(v - want) > 2e-6}
assert not bad, 'independent count %.6f, %s' % (want, got)
assert rep['peak_blocks_in_use'] == int(count['peak_blocks']), (rep, count)
cap = int(count['capacity_at_peak'])
assert abs(rep['kv_utilization_at_peak'] - int(count['tokens_at_peak']) / cap) < 2e-6, (rep, count)
assert abs(rep['kv_waste_ratio'] - (1 - want)) < 4e-6, rep
PY
done
check some_runs_were_preempted [ "$preempted" -gt 0 ]

# preemptions are point markers: instants with a count and no span (they
# used to read as a phase from the first one to the end of the trace), and
# --phase refuses them
check preempt_points_have_no_span python3 - "$T/report16.json" "$T/eng16.out" <<'PY'
import json, re, sys
ph = json.load(open(sys.argv[1]))['phases']
n = int(re.search(r'preemptions (\d+)', open(sys.argv[2]).read()).group(1))
assert n > 0 and ph['preempt']['count'] == n, (ph.get('preempt'), n)
assert ph['preempt']['heap_calls'] is None and ph['preempt']['time_ns'] is None, ph['preempt']
PY
"$PS" report "$T/kv16.pst" --phase preempt > /dev/null 2> "$T/pp.err"; rc=$?
check phase_of_points_refused sh -c "[ $rc -eq 2 ] && grep -q 'only as point markers' '$T/pp.err'"
# and on a multi-threaded heap (allocated on one thread, freed on others):
# replay reads the trace in report's order, so the figures are equal too
"$PS" record --stacks none -o "$T/ho.pst" -- "$P/truth_handoff" 3 3 20000 500 > /dev/null 2>&1
"$PS" report "$T/ho.pst" --json --no-symbols --no-default-suppressions > "$T/ho.json"
"$PS" replay "$T/ho.pst" --policy ideal --stream heap --json > "$T/hor.json"
check report_and_replay_agree_across_threads python3 - "$T/ho.json" "$T/hor.json" <<'PY'
import json, sys
rep = json.load(open(sys.argv[1]))
r = json.load(open(sys.argv[2]))
pol = r['policies'][0]
assert rep['threads'] >= 6, rep['threads']
assert rep['peak_live_bytes'] == pol['peak_live_bytes'] > 0, (rep['peak_live_bytes'], pol['peak_live_bytes'])
assert rep['leaked_bytes'] == pol['leaked_bytes'], (rep['leaked_bytes'], pol['leaked_bytes'])
assert rep['unknown_frees'] == r['trace']['unmatched_frees'] == 0, (rep['unknown_frees'], r['trace'])
PY
exit $status
