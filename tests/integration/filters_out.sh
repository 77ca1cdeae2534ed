#!/bin/sh
# filters_out.sh — `sql` and `export` with a selection (issue 12): --phase
# NAME and --from T --to T select the same events as `report`. Every
# expectation is computed here, independently of the analyzer, from the
# database of the whole run (sqlite3 and python3 over its rows):
#   sql     all rows kept; events.in_window marks exactly the events inside
#           (a time window: ts in [from, to]; a phase: from each begin of
#           the marker to its end, both included, while any instance is
#           open); meta records the selection; metrics counts only it;
#   folded  the weights sum to the allocations (calls) and their requested
#           bytes inside the selection;
#   chrome  every timed event lies inside; its markers and scopes are those
#           of the selection (plus scopes cut at its edges, balanced); its
#           large-allocation instants are those inside; the heap counter
#           where the selection opens is the live heap then;
#   errors  an unknown phase is exit 2 with one line listing the phases and
#           leaves no output (nor a temporary file); --from after --to and
#           a bad time are usage errors.
. tests/integration/lib.sh

D=$T/out
mkdir -p "$D"
"$PS" record -o "$T/x.pst" -- "$B/bin/refengine" --synthetic dim=64,layers=2,heads=4,kv_heads=4,hidden=172,vocab=512,seq=256 \
    --workload sharegpt --requests 12 --max-batch 4 --seed 7 --alloc malloc --quiet >/dev/null 2>&1
check record_trace [ -s "$T/x.pst" ]
"$PS" sql "$T/x.pst" -o "$T/all.db" --quiet
check whole_run_db [ -s "$T/all.db" ]
q() { sqlite3 "$1" "$2"; }
ALLOC_TYPES="1, 2, 3, 4, 6, 7, 8, 9, 10"     # the malloc family's allocating calls

check no_selection_all_in_window [ "$(q "$T/all.db" 'select count(*) from events where in_window = 0')" = 0 ]
check no_selection_meta_none [ "$(q "$T/all.db" "select value from meta where key = 'selection'")" = none ]

# the window: from the 30th to the 60th percentile of the allocation times
n=$(q "$T/all.db" "select count(distinct ts_ns) from events where type = 1")
FROM=$(q "$T/all.db" "select distinct ts_ns from events where type = 1 order by ts_ns limit 1 offset $((n * 3 / 10))")
TO=$(q "$T/all.db" "select distinct ts_ns from events where type = 1 order by ts_ns limit 1 offset $((n * 6 / 10))")
echo "# window [$FROM, $TO] ns of $(q "$T/all.db" 'select max(ts_ns) from events') ns"
W="ts_ns between $FROM and $TO"
want_events=$(q "$T/all.db" "select count(*) from events where $W")
want_allocs=$(q "$T/all.db" "select count(*) from events where $W and type in ($ALLOC_TYPES) and addr != 0")
want_bytes=$(q "$T/all.db" "select sum(size_bytes) from events where $W and type in ($ALLOC_TYPES) and addr != 0")
echo "# in the window: $want_events events, $want_allocs allocations, $want_bytes bytes"
check window_not_trivial sh -c "[ $want_allocs -gt 0 ] && [ $want_events -lt $(q "$T/all.db" 'select count(*) from events') ]"

# ---- sql, window -------------------------------------------------------------
"$PS" sql "$T/x.pst" -o "$T/w.db" --from "${FROM}ns" --to "${TO}ns" >"$T/w.out"
check sql_window_keeps_every_row [ "$(q "$T/w.db" 'select count(*) from events')" = "$(q "$T/all.db" 'select count(*) from events')" ]
check sql_window_in_window_count [ "$(q "$T/w.db" 'select count(*) from events where in_window')" = "$want_events" ]
# the same rows, not only as many
check sql_window_in_window_rows [ "$(q "$T/w.db" "select count(*) from events where in_window != ($W)")" = 0 ]
check sql_window_meta sh -c "[ \"\$(sqlite3 '$T/w.db' \"select value from meta where key = 'from_ns'\")\" = $FROM ] &&
    [ \"\$(sqlite3 '$T/w.db' \"select value from meta where key = 'to_ns'\")\" = $TO ] &&
    [ \"\$(sqlite3 '$T/w.db' \"select value from meta where key = 'events_in_window'\")\" = $want_events ] &&
    [ \"\$(sqlite3 '$T/w.db' \"select value from meta where key = 'selection'\")\" = 'from $FROM ns to $TO ns' ]"
metric() { q "$1" "select cast(value as integer) from metrics where name = '$2'"; }
check sql_window_metrics_events [ "$(metric "$T/w.db" events)" = "$want_events" ]
check sql_window_metrics_allocations [ "$(metric "$T/w.db" allocations)" = "$want_allocs" ]
check sql_window_metrics_bytes [ "$(metric "$T/w.db" total_allocated_bytes)" = "$want_bytes" ]
check sql_window_metrics_events_total [ "$(metric "$T/w.db" events_total)" = "$(q "$T/all.db" 'select count(*) from events')" ]
check sql_window_summary_says_selection grep -q "($want_events in the selection)" "$T/w.out"

# ---- folded, window ------------------------------------------------------------
wsum() { awk '{ s += $NF } END { print s + 0 }' "$1"; }
"$PS" export "$T/x.pst" --format folded --weight calls -o "$T/w.calls" --from "${FROM}ns" --to "${TO}ns"
"$PS" export "$T/x.pst" --format folded -o "$T/w.bytes" --from "${FROM}ns" --to "${TO}ns"
check folded_window_calls_are_window_allocations [ "$(wsum "$T/w.calls")" = "$want_allocs" ]
check folded_window_bytes_are_window_bytes [ "$(wsum "$T/w.bytes")" = "$want_bytes" ]
"$PS" export "$T/x.pst" --format folded --weight calls -o "$T/all.calls"
check folded_whole_run_weighs_more [ "$(wsum "$T/all.calls")" -gt "$want_allocs" ]

# ---- chrome, window ---------------------------------------------------------------
"$PS" export "$T/x.pst" --format chrome -o "$T/w.json" --from "${FROM}ns" --to "${TO}ns"
# chrome_check JSON DB SQL-OF-SELECTED-EVENTS NAME: the checks that need the rows
chrome_check() {
    python3 - "$1" "$2" "$3" "$ALLOC_TYPES" "$4" <<'EOF'
import json, sqlite3, sys
from collections import Counter
doc = json.load(open(sys.argv[1]))
db = sqlite3.connect(sys.argv[2])
sel = sys.argv[3]                      # SQL: the ids of the selected events
types = [int(t) for t in sys.argv[4].split(",")]
ids = {r[0] for r in db.execute(sel)}
ev = doc["traceEvents"]
res = {}
# the stretches of the selection: runs of selected events in merged order,
# [time of the first, time of the last] (a phase has gaps between them)
spans, cur = [], None
for i, ts in db.execute("select id, ts_ns from events order by id"):
    if i in ids:
        cur = [ts, ts] if cur is None else [cur[0], ts]
    elif cur is not None:
        spans.append(cur)
        cur = None
if cur is not None:
    spans.append(cur)
def inside(us):
    ns = us * 1000.0
    return any(a - 0.5 <= ns <= b + 0.5 for a, b in spans)
timed = [e for e in ev if "ts" in e]
res["every_timed_event_inside"] = bool(timed) and all(inside(e["ts"]) for e in timed)
if not res["every_timed_event_inside"]:
    print("  %d stretches; outside: %s" % (len(spans), [e for e in timed if not inside(e["ts"])][:3]), file=sys.stderr)
# markers and scopes: those of the selected events, plus the cut ones
want = Counter()
for eid, name, kind in db.execute("select event_id, name, kind from markers"):
    if eid in ids:
        want[(name, {"point": "i", "begin": "b", "end": "e"}[kind])] += 1
# a scope is an X slice (one begin and one end) or an async b/e pair; an
# edge the selection made is named in args.cut ("begin", "end", "both")
got = Counter()
for e in ev:
    cut = e.get("args", {}).get("cut", "")
    if e.get("cat") == "marker":
        got[(e["name"], "i")] += 1
    elif e.get("cat") == "scope" and e["ph"] in "Xb" and cut not in ("begin", "both"):
        got[(e["name"], "b")] += 1
    if e.get("cat") == "scope" and (e["ph"] == "e" or (e["ph"] == "X" and cut not in ("end", "both"))):
        got[(e["name"], "e")] += 1
res["markers_are_the_selections"] = got == want
if got != want:
    print("  markers: want %s, got %s" % (sorted(want.items()), sorted(got.items())), file=sys.stderr)
bal = Counter()
for e in ev:
    if e.get("cat") == "scope" and e["ph"] in "be":
        bal[(e["name"], e["id"])] += 1 if e["ph"] == "b" else -1
res["scopes_balanced"] = all(v == 0 for v in bal.values())
# large allocations (64 KiB and more) inside
nbig = sum(1 for (i, t, s) in db.execute("select id, type, size_bytes from events where size_bytes >= 65536")
           if i in ids and t in types)
res["large_allocations_are_the_selections"] = sum(1 for e in ev if e.get("cat") == "alloc") == nbig
# the heap counter where the selection first opens: the live heap then,
# replayed here from the rows (realloc: free old + alloc new)
first = min(ids)
live, total = {}, 0
for i, t, addr, old, size in db.execute("select id, type, addr, old_addr, size_bytes from events where id < ? order by id", (first,)):
    if t in (3, 4) and old:
        if addr or size == 0:
            total -= live.pop(old, 0)
        if not addr:
            continue
    if t in types and addr:
        total -= live.pop(addr, 0)
        live[addr] = size
        total += size
    elif t == 5:
        total -= live.pop(addr, 0)
heap = [e for e in ev if e["ph"] == "C" and e["name"] == "heap live bytes"]
res["heap_counter_opens_at_live_heap"] = bool(heap) and heap[0]["args"]["bytes"] == total
if heap and heap[0]["args"]["bytes"] != total:
    print("  heap at the opening: chrome %d, rows %d" % (heap[0]["args"]["bytes"], total), file=sys.stderr)
for k, v in res.items():
    print(("ok " if v else "not ok ") + "chrome_" + sys.argv[5] + "_" + k)
sys.exit(0 if all(res.values()) else 1)
EOF
}
chrome_check "$T/w.json" "$T/all.db" "select id from events where $W" window || status=1
check chrome_window_other_data python3 -c "
import json; d = json.load(open('$T/w.json'))
assert d['otherData'] == {'from_ns': $FROM, 'to_ns': $TO}, d.get('otherData')"
"$PS" export "$T/x.pst" --format chrome -o "$T/all.json"
check chrome_no_selection_no_other_data python3 -c "
import json; assert 'otherData' not in json.load(open('$T/all.json'))"

# ---- the phase layer (one scope per layer of a forward: gaps between) ------------------------------------------------------------------
# the ids of the events inside layer scopes, from the rows in
# their merged order (a begin opens before its own event, an end closes
# after it; instances may overlap)
python3 - "$T/all.db" > "$T/phase.ids" <<'EOF'
import sqlite3, sys
db = sqlite3.connect(sys.argv[1])
kind = {r[0]: r[1] for r in db.execute("select event_id, kind from markers where name = 'layer'")}
open_ = 0
for (i,) in db.execute("select id from events order by id"):
    k = kind.get(i)
    if k == "begin":
        open_ += 1
    if open_ > 0:
        print(i)
    if k == "end" and open_ > 0:
        open_ -= 1
EOF
want_phase=$(wc -l < "$T/phase.ids")
q "$T/all.db" "create table sel(id integer primary key)"
q "$T/all.db" ".import $T/phase.ids sel"
want_palloc=$(q "$T/all.db" "select count(*) from events where id in (select id from sel) and type in ($ALLOC_TYPES) and addr != 0")
want_pbytes=$(q "$T/all.db" "select sum(size_bytes) from events where id in (select id from sel) and type in ($ALLOC_TYPES) and addr != 0")
echo "# phase layer: $want_phase events, $want_palloc allocations, $want_pbytes bytes"
check phase_not_trivial sh -c "[ $want_palloc -gt 0 ]"
"$PS" sql "$T/x.pst" -o "$T/p.db" --phase layer --quiet
check sql_phase_in_window_count [ "$(q "$T/p.db" 'select count(*) from events where in_window')" = "$want_phase" ]
check sql_phase_in_window_rows sh -c "sqlite3 '$T/p.db' 'select id from events where in_window order by id' | cmp -s - '$T/phase.ids'"
check sql_phase_meta sh -c "[ \"\$(sqlite3 '$T/p.db' \"select value from meta where key = 'phase'\")\" = layer ] &&
    [ \"\$(sqlite3 '$T/p.db' \"select value from meta where key = 'selection'\")\" = 'phase layer' ] &&
    [ -z \"\$(sqlite3 '$T/p.db' \"select value from meta where key = 'from_ns'\")\" ]"
check sql_phase_metrics_allocations [ "$(metric "$T/p.db" allocations)" = "$want_palloc" ]
check sql_phase_metrics_bytes [ "$(metric "$T/p.db" total_allocated_bytes)" = "$want_pbytes" ]
"$PS" export "$T/x.pst" --format folded --weight calls -o "$T/p.calls" --phase layer
"$PS" export "$T/x.pst" --format folded -o "$T/p.bytes" --phase layer
check folded_phase_calls [ "$(wsum "$T/p.calls")" = "$want_palloc" ]
check folded_phase_bytes [ "$(wsum "$T/p.bytes")" = "$want_pbytes" ]
"$PS" export "$T/x.pst" --format chrome -o "$T/p.json" --phase layer
chrome_check "$T/p.json" "$T/all.db" "select id from sel" phase || status=1

# ---- both at once: the events of the phase inside the window --------------------------------
want_both=$(q "$T/all.db" "select count(*) from events where id in (select id from sel) and $W")
"$PS" sql "$T/x.pst" -o "$T/b.db" --phase layer --from "${FROM}ns" --to "${TO}ns" --quiet
check sql_phase_and_window [ "$(q "$T/b.db" 'select count(*) from events where in_window')" = "$want_both" ]

# ---- errors -----------------------------------------------------------------------------------
# refused NAME WANT CMD...: exit 2, one line on stderr containing WANT, nothing new in $D
refused() {
    n=$1 want=$2; shift 2
    before=$(ls -A "$D" | tr '\n' ' ')
    "$@" >"$T/r.out" 2>"$T/r.err"; rc=$?
    after=$(ls -A "$D" | tr '\n' ' ')
    if [ $rc -eq 2 ] && [ "$(wc -l <"$T/r.err")" -eq 1 ] && grep -q -- "$want" "$T/r.err" && [ "$before" = "$after" ]; then
        echo "ok $n"
    else
        echo "not ok $n (rc $rc: $(cat "$T/r.err"); $D before: $before after: $after)"; status=1
    fi
}
PHASES="no phase 'nope' in this trace; its phases: .*decode"
refused sql_unknown_phase "$PHASES" "$PS" sql "$T/x.pst" -o "$D/p.db" --phase nope
refused folded_unknown_phase "$PHASES" "$PS" export "$T/x.pst" --format folded -o "$D/p.folded" --phase nope
refused chrome_unknown_phase "$PHASES" "$PS" export "$T/x.pst" --format chrome -o "$D/p.json" --phase nope
echo keep > "$D/old.json"
refused chrome_unknown_phase_keeps_old_output "$PHASES" "$PS" export "$T/x.pst" --format chrome -o "$D/old.json" --phase nope
check old_output_unchanged [ "$(cat "$D/old.json")" = keep ]
refused sql_from_after_to "--from is after --to" "$PS" sql "$T/x.pst" -o "$D/p.db" --from 2s --to 1s
refused export_from_after_to "--from is after --to" "$PS" export "$T/x.pst" --format folded -o "$D/p.folded" --from 2s --to 1s
refused sql_bad_time "is not a time" "$PS" sql "$T/x.pst" -o "$D/p.db" --from soon
refused export_bad_time "is not a time" "$PS" export "$T/x.pst" --format chrome -o "$D/p.json" --to later
check errors_left_only_old_output [ "$(ls -A "$D")" = old.json ]
exit $status
