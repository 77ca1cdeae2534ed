#!/bin/sh
# reserved_series.sh — the pool's reserved bytes are one computation
# (analyzer/metrics.h, az_reserved_now) that plot, html, report and replay
# all read (issue 27 item 6). plot drew the sum of two per-bucket maxima
# (the bucket's most outstanding plus its most cached bytes, taken at
# different moments): 3.69 MiB where report said 2.43 MiB on the run below,
# 13.6 MiB against 7.58 MiB on the demo's run.
#   - the maximum of plot's pool_reserved column (timeline.dat) is report's
#     pool peak_reserved_bytes (to the column's 4 decimals), and never
#     below pool_out in any row
#   - html's timeline (pool_res) reaches the same peak exactly, as its
#     peaks say
#   - replay's pool policy over the same tensor stream reserves the same
#   - that peak is an independent count: the most bytes the pool held from
#     its backing store at once (backing allocations minus backing frees, in
#     pool order), summed by sqlite3 over `poolscope sql`'s pools table
. tests/integration/lib.sh

D=$T/w
mkdir -p "$D"
"$PS" record --stacks none -o "$D/e.pst" -- "$B/bin/refengine" --alloc pool --quiet > /dev/null 2>&1
check record_refengine [ -s "$D/e.pst" ]

"$PS" report "$D/e.pst" --json > "$D/r.json" 2> /dev/null
peak=$(python3 -c "import json,sys; print(json.load(open(sys.argv[1]))['pool']['peak_reserved_bytes'])" "$D/r.json")
"$PS" sql "$D/e.pst" -o "$D/e.db" > /dev/null 2>&1
held=$(sqlite3 "$D/e.db" "select max(s) from (select sum(case kind when 'backing_alloc' then granted_bytes
    when 'backing_free' then -granted_bytes else 0 end) over (order by pool_seq) s from pools where pool_id = 1)")
echo "  report: pool peak reserved $peak B; sqlite3: backing bytes held at most $held B" >&2
check report_peak_is_the_backing_bytes_held sh -c "[ '$peak' -gt 0 ] && [ '$peak' = '$held' ]"

# plot: the data file's pool_reserved column (7), in the unit its first line names
"$PS" plot "$D/e.pst" -o "$D/p" > /dev/null 2>&1
check plot_runs [ -s "$D/p/timeline.dat" ]
plot_peak() {
    python3 - "$D/p/timeline.dat" "$peak" <<'PY'
import sys
unit = {'B': 1, 'KiB': 1 << 10, 'MiB': 1 << 20, 'GiB': 1 << 30}
lines = open(sys.argv[1]).read().splitlines()
u = unit[lines[0].split()[-1]]
rows = [l.split() for l in lines if l and not l.startswith('#')]
top = max(float(r[6]) for r in rows)
want = int(sys.argv[2])
print('  plot: pool reserved at most %.4f x %d B = %.0f B; report %d B' % (top, u, top * u, want), file=sys.stderr)
# the column has 4 decimals: equal to within half of the last one
assert abs(top - want / u) <= 0.00005 + 1e-9, (top, want / u)
# reserved = outstanding + cached: never below the outstanding of its row
assert all(float(r[6]) >= float(r[5]) for r in rows)
PY
}
check plot_reserved_peak_is_reports plot_peak

# html: its timeline's pool_res and its peaks
"$PS" html "$D/e.pst" -o "$D/e.html" > /dev/null 2>&1
check html_reserved_peak_is_reports python3 - "$D/e.html" "$peak" <<'PY'
import sys, json, re
t = open(sys.argv[1], encoding='utf-8').read()
d = json.loads(re.findall(r'<script type="application/json"[^>]*>(.*?)</script>', t, re.S)[0])
want = int(sys.argv[2])
assert max(d['tl']['pool_res']) == want, (max(d['tl']['pool_res']), want)
assert d['peaks']['pool_reserved'] == want, d['peaks']
PY

# replay: the pool policy over the trace's tensor stream
"$PS" replay "$D/e.pst" --policy pool --json > "$D/rp.json" 2> /dev/null
check replay_pool_reserves_the_same python3 -c "
import json, sys
p = [x for x in json.load(open(sys.argv[1]))['policies'] if x['name'] == 'pool'][0]
assert p['peak_reserved_bytes'] == int(sys.argv[2]), (p['peak_reserved_bytes'], sys.argv[2])" "$D/rp.json" "$peak"
exit $status
