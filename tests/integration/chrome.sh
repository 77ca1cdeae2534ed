#!/bin/sh
# chrome.sh — the Chrome trace-event export is what viewers draw: every X
# slice nests in its parent on its thread, async pairs balance, counters go
# forward in time, and with --allocations every allocation is an instant
# (counted independently with sql). No browser viewer runs offline here, so
# the structure is checked.
. tests/integration/lib.sh

"$PS" record -o "$T/e.pst" -- "$B/bin/refengine" --synthetic dim=32,layers=2,heads=2,kv_heads=2,hidden=64,vocab=64,seq=64 \
    --workload sharegpt --requests 6 --max-batch 3 --threads 2 --quiet > /dev/null 2>&1
"$PS" export "$T/e.pst" --format chrome -o "$T/c.json"
"$PS" export "$T/e.pst" --format chrome --allocations -o "$T/all.json"
"$PS" sql "$T/e.pst" -o "$T/e.db" --quiet
check structure python3 - "$T/c.json" "$T/e.db" <<'PY'
import json, sqlite3, sys
from collections import Counter, defaultdict
ev = json.load(open(sys.argv[1]))['traceEvents']
db = sqlite3.connect(sys.argv[2])
# X slices nest on each thread: sorted by start (longer first on a tie),
# each one ends inside the innermost slice still open when it starts
by_tid = defaultdict(list)
for e in ev:
    if e['ph'] == 'X':
        by_tid[e['tid']].append((e['ts'], -e['dur'], e['name']))
assert by_tid, 'no X slices'
for tid, xs in by_tid.items():
    xs.sort()
    stack = []
    for ts, ndur, name in xs:
        end = ts - ndur
        while stack and stack[-1][1] <= ts + 1e-6:
            stack.pop()
        assert not stack or end <= stack[-1][1] + 1e-6, (tid, name, ts, end, stack[-1])
        stack.append((name, end))
# async pairs balance, each b before its e
open_ = {}
for e in sorted((e for e in ev if e['ph'] in 'be'), key=lambda e: (e['ts'], e['ph'] == 'b')):
    k = (e['name'], e['id'])
    if e['ph'] == 'b':
        assert k not in open_, k
        open_[k] = e['ts']
    else:
        assert open_.pop(k) <= e['ts'], k
assert not open_, open_
# counters move forward in time, per track
last = {}
for e in ev:
    if e['ph'] == 'C':
        assert e['ts'] >= last.get(e['name'], -1), e
        last[e['name']] = e['ts']
# every scope of the trace is there once: X or async pair
want = Counter(n for (n,) in db.execute("select name from markers where kind = 'begin'"))
got = Counter(e['name'] for e in ev if e['ph'] in 'Xb')
assert got == want, (got, want)
# overlapping requests are async, the nested ones X
assert any(e['ph'] == 'b' and e['name'] == 'request' for e in ev)
assert any(e['ph'] == 'X' and e['name'] == 'forward' for e in ev)
PY
check allocations_are_instants python3 - "$T/all.json" "$T/e.db" <<'PY'
import json, sqlite3, sys
ev = json.load(open(sys.argv[1]))['traceEvents']
db = sqlite3.connect(sys.argv[2])
types = [r[0] for r in db.execute("select type from event_types where name in "
         "('malloc','calloc','realloc','reallocarray','posix_memalign','aligned_alloc','memalign','valloc','pvalloc')")]
want = db.execute("select count(*) from events where type in (%s) and addr != 0 and size_bytes > 0" % ','.join(map(str, types))).fetchone()[0]
got = [e for e in ev if e.get('cat') == 'alloc']
assert len(got) == want > 0, (len(got), want)
assert all(e['args'].get('site') for e in got)
PY
exit $status
