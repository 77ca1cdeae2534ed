#!/bin/sh
# openmetrics.sh — report --format openmetrics: promtool accepts it (lint
# included), and its samples are the report JSON's numbers, which gate reads.
. tests/integration/lib.sh

"$PS" record -o "$T/e.pst" -- "$B/bin/refengine" --synthetic dim=32,layers=1,heads=2,kv_heads=2,hidden=64,vocab=64,seq=64 \
    --workload fixed:8,8 --requests 3 --max-batch 2 --quiet > /dev/null 2>&1
"$PS" report "$T/e.pst" --format openmetrics --no-symbols > "$T/e.om"
"$PS" report "$T/e.pst" --json --no-symbols > "$T/e.json"
check promtool_accepts_it sh -c "promtool check metrics < '$T/e.om'"
check ends_with_eof sh -c "[ \"\$(tail -1 '$T/e.om')\" = '# EOF' ]"
check samples_are_the_report_numbers python3 - "$T/e.om" "$T/e.json" <<'PY'
import json, re, sys
d = json.load(open(sys.argv[2]))
got = {}
for line in open(sys.argv[1]):
    if line.startswith('#'):
        continue
    m = re.match(r'(\w+)\{(.*)\} (\S+)$', line.strip())
    assert m, line
    labels = dict(re.findall(r'(\w+)="((?:[^"\\]|\\.)*)"', m.group(2)))
    assert labels['program'] == d['program'] and labels['trace'] == d['trace'], labels
    key = (m.group(1), labels.get('function') or labels.get('phase'))
    assert key not in got, key                         # one sample per series
    got[key] = float(m.group(3))
assert got[('poolscope_peak_live_bytes', None)] == d['peak_live_bytes']
assert got[('poolscope_leaked_bytes', None)] == d['leaked_bytes']
assert got[('poolscope_pool_acquires', None)] == d['pool']['acquires'] > 0
assert abs(got[('poolscope_kv_kv_utilization', None)] - d['kv']['kv_utilization']) < 1e-9
assert abs(got[('poolscope_duration_seconds', None)] - d['duration_ns'] / 1e9) < 1e-12
for f, n in d['calls'].items():
    assert got[('poolscope_calls', f)] == n, f
for p, v in d['phases'].items():
    assert got[('poolscope_phase_instances', p)] == v['count'], p
# a metric that does not apply (null in the JSON) is absent, never 0
nulls = [k for k, v in d.items() if v is None]
for k in nulls:
    assert ('poolscope_' + k, None) not in got, k
PY
"$PS" report "$T/e.pst" --format yaml > /dev/null 2> "$T/bad.err"
check unknown_format_exit_2 sh -c "[ $? -eq 2 ] && grep -q 'openmetrics' '$T/bad.err'"
exit $status
