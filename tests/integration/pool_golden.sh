#!/bin/sh
# pool_golden.sh — the analyzer's pool and KV figures on events the real
# pools emit through the real adapter (tests/progs/pool_golden), against
# expectations computed by hand in that program's header comment, and
# against the pools' own statistics, which the program prints.
. tests/integration/lib.sh

t=$T/golden.pst
"$PS" record --stacks none -o "$t" -- "$P/pool_golden" > "$T/own.out" 2> "$T/rec.err"
check record_pool_golden [ -s "$t" ]
"$PS" report "$t" --json --no-symbols > "$T/r.json"
"$PS" replay "$t" --policy kv-paged,ideal --json > "$T/rp.json"

check pool_figures_equal_hand_count python3 - "$T/r.json" "$T/own.out" <<'PY'
import json, sys
r = json.load(open(sys.argv[1]))['pool']
own = dict(kv.split('=') for kv in open(sys.argv[2]).read().split())
hand = {'acquires': 3, 'hits': 1, 'misses': 2,
        'requested_bytes': 1000 + 5000 + 100,        # what the program asked for
        'granted_bytes': 4096 + 8192 + 8192,         # slab rounding; c got b's buffer
        'oversized_acquires': 2,                     # 4096 for 1000, 8192 for 100
        'peak_outstanding_bytes': 12288, 'peak_cached_bytes': 12288}
bad = {k: (r.get(k), v) for k, v in hand.items() if r.get(k) != v}
assert not bad, bad
for k in ('acquires', 'hits', 'peak_outstanding_bytes', 'peak_cached_bytes'):
    assert int(own[k]) == hand[k], (k, own[k])
assert abs(r['hit_rate'] - 1 / 3) < 1e-6, r
PY

check kv_figures_equal_hand_count python3 - "$T/r.json" "$T/own.out" "$T/rp.json" <<'PY'
import json, sys
kv = json.load(open(sys.argv[1]))['kv']
own = dict(kv_.split('=') for kv_ in open(sys.argv[2]).read().split())
assert kv['peak_blocks_in_use'] == 4 == int(own['peak_blocks_in_use']), (kv, own)
# the first time 4 blocks are held: 41 + 5 tokens in 64 slots
assert abs(kv['kv_utilization_at_peak'] - 46 / 64) < 1e-9, kv
# tokens / slots as each decode step opens: 40/48, 46/64, 5/16
want = (40 / 48 + 46 / 64 + 5 / 16) / 3
assert abs(kv['kv_utilization_per_step'] - want) < 1e-6, (kv, want)
pol = {p['name']: p for p in json.load(open(sys.argv[3]))['policies']}
# replay reads the same model: the same utilization, time-weighted
assert abs(pol['kv-paged']['kv_utilization'] - kv['kv_utilization']) < 2e-6, (pol['kv-paged'], kv)
PY
exit $status
