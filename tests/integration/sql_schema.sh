#!/bin/sh
# sql_schema.sh — `poolscope sql`'s allocations, threads, events and sites
# against expectations that do not come from poolscope:
#   - tests/progs/sql_truth, recorded with the preload: each object it made
#     (a same-thread free, both directions of a cross-thread free, a
#     realloc, a leak, calloc, posix_memalign, an mmap'd block) is one row
#     with the call, size, address, threads, how it was freed, the realloc's
#     source, and granted_bytes = the program's own malloc_usable_size();
#   - tests/progs/stress (4 threads, cross-thread hand-offs), loaded with
#     --phase counted: the calls the program counted itself (malloc, calloc,
#     realloc, free inside its "counted" scopes) and the cross-thread frees
#     it printed equal the rows;
#   - report --json on the same traces: leaked bytes and objects, the peak
#     (the documented peak query, and a running sum over the rows in SQL
#     with no help from the loader), the allocation count;
#   - every event once in the events view, as report's events_total.
# The example queries of SCHEMA.md run (against the demo-like trace too).
. tests/integration/lib.sh

command -v sqlite3 >/dev/null && command -v python3 >/dev/null || { echo "  no sqlite3 or python3: skipped" >&2; exit 0; }
q() { sqlite3 "$1" "$2"; }
jnum() { python3 -c "import json,sys; print(json.load(open(sys.argv[1]))[sys.argv[2]])" "$1" "$2"; }

# ---- the program whose objects are known ---------------------------------------------------
"$PS" record -o "$T/t.pst" -- "$P/sql_truth" >"$T/facts" 2>"$T/rec.err"
check truth_recorded sh -c "[ -s '$T/t.pst' ] && [ \$(grep -c '^obj ' '$T/facts') -eq 9 ]"
"$PS" sql "$T/t.pst" -o "$T/t.db" --quiet
"$PS" report --json --no-default-suppressions "$T/t.pst" >"$T/t.json"   # every leak, as sql has them

rows() {
    python3 - "$T/t.db" "$T/facts" <<'EOF'
import sqlite3, sys
db = sqlite3.connect(sys.argv[1])
ok = True
for line in open(sys.argv[2]):
    f = line.split()
    if not f or f[0] != "obj":
        continue
    name, kv = f[1], dict(x.split("=", 1) for x in f[2:])
    got = db.execute("select call, size_bytes, granted_bytes, tid, free_tid, freed_by, cross_thread, old_addr, "
                     "free_ts_ns - ts_ns = lifetime_ns, lifetime_ns >= 0, stack is not null "
                     "from allocations where addr = ? and size_bytes = ?", (int(kv["addr"]), int(kv["size"]))).fetchall()
    want_free = int(kv["free_tid"])
    want = (kv["call"], int(kv["size"]), int(kv["usable"]), int(kv["tid"]), want_free or None,
            None if not want_free else "realloc" if name == "realloc_src" else "free",
            None if not want_free else int(want_free != int(kv["tid"])),
            int(kv["old"]) if "old" in kv else None,
            None if not want_free else 1, None if not want_free else 1, 1)
    # an aligned request: glibc leaves a remainder of up to MINSIZE (32 B)
    # in the chunk, depending on where the aligned address fell; the
    # table gives the smallest grant (SCHEMA.md)
    if (len(got) == 1 and kv["call"] in ("posix_memalign", "memalign", "aligned_alloc")
            and 0 <= want[2] - got[0][2] <= 32):
        want = want[:2] + (got[0][2],) + want[3:]
    if len(got) != 1 or got[0] != want:
        print("  %s: want %s, got %s" % (name, want, got), file=sys.stderr)
        ok = False
    if "arg" in kv:
        arg = db.execute("select e.arg from allocations a join events e on e.id = a.id where a.addr = ? and a.size_bytes = ?",
                         (int(kv["addr"]), int(kv["size"]))).fetchone()
        if arg != (int(kv["arg"]),):
            print("  %s: arg want %s, got %s" % (name, kv["arg"], arg), file=sys.stderr)
            ok = False
# the realloc frees its source at its own event
r = db.execute("select s.free_id = d.id, s.free_ts_ns = d.ts_ns from allocations s join allocations d "
               "on d.old_addr = s.addr and d.size_bytes = 5005 where s.size_bytes = 303").fetchall()
if r != [(1, 1)]:
    print("  realloc: source's free is not the realloc: %s" % r, file=sys.stderr)
    ok = False
sys.exit(0 if ok else 1)
EOF
}
check truth_objects_row_by_row rows

leaks() {
    [ "$(q "$T/t.db" 'select total(size_bytes) from allocations where free_ts_ns is null' | cut -d. -f1)" = "$(jnum "$T/t.json" leaked_bytes)" ] &&
    [ "$(q "$T/t.db" 'select count(*) from allocations where free_ts_ns is null')" = "$(jnum "$T/t.json" leaked_objects)" ]
}
check truth_leaks_equal_report leaks
eq() { [ "$1" = "$2" ] || { echo "  $3: got $1, want $2" >&2; return 1; }; }
check truth_leak_is_a_row eq "$(q "$T/t.db" 'select count(*) from allocations where size_bytes = 777 and free_id is null')" 1 leak

# the peak: the documented query (the loader's peak event), and a running
# sum over the rows in SQL alone (+size at the allocation's id, -size at the
# free's; max over ids), both against report
PEAK_Q="SELECT sum(a.size_bytes) FROM allocations a, (SELECT CAST(value AS INTEGER) AS p FROM meta WHERE key = 'peak_live_event_id') WHERE a.id <= p AND (a.free_id IS NULL OR a.free_id > p)"
RUN_Q="SELECT max(live) FROM (SELECT sum(d) OVER (ORDER BY id ROWS UNBOUNDED PRECEDING) AS live FROM (SELECT id, sum(d) AS d FROM (SELECT id, size_bytes AS d FROM allocations UNION ALL SELECT free_id, -size_bytes FROM allocations WHERE free_id IS NOT NULL) GROUP BY id))"
check truth_peak_query_equals_report eq "$(q "$T/t.db" "$PEAK_Q")" "$(jnum "$T/t.json" peak_live_bytes)" peak
check truth_running_peak_equals_report eq "$(q "$T/t.db" "$RUN_Q")" "$(jnum "$T/t.json" peak_live_bytes)" peak
check truth_allocations_count_report eq "$(q "$T/t.db" 'select count(*) from allocations')" "$(jnum "$T/t.json" allocations)" allocations
n=$(jnum "$T/t.json" events_total)
check truth_events_once eq "$(q "$T/t.db" "select count(*) || ' ' || count(distinct id) || ' ' || min(id) || ' ' || max(id) from events")" "$n $n 1 $n" events
threads() {
    main=$(sed -n 's/^obj same_thread .* tid=\([0-9]*\) .*/\1/p' "$T/facts")
    wk=$(sed -n 's/^obj worker_alloc .* tid=\([0-9]*\) .*/\1/p' "$T/facts")
    eq "$(q "$T/t.db" "select count(*) from threads where tid in ($main, $wk) and start_ts_ns is not null and not tracer")" 2 threads &&
    eq "$(q "$T/t.db" "select cross_thread_frees from threads where tid = $wk")" 1 worker_cross_thread_frees &&
    eq "$(q "$T/t.db" "select sum(cross_thread_frees) from threads")" "$(q "$T/t.db" 'select count(*) from allocations where cross_thread')" cross &&
    eq "$(q "$T/t.db" "select sum(allocations) from threads")" "$(q "$T/t.db" 'select count(*) from allocations')" allocations
}
check truth_threads_table threads
sites() {
    eq "$(q "$T/t.db" 'select sum(allocations) from sites')" "$(q "$T/t.db" 'select count(*) from allocations')" allocations &&
    eq "$(q "$T/t.db" 'select total(leaked_bytes) from sites')" "$(q "$T/t.db" 'select total(size_bytes) from allocations where free_id is null')" leaked &&
    eq "$(q "$T/t.db" "select count(*) from allocations where size_bytes = 1001 and site like 'main (sql_truth.c:%'")" 1 main_site &&
    eq "$(q "$T/t.db" "select count(*) from allocations where size_bytes = 2002 and site like 'worker (sql_truth.c:%'")" 1 worker_site
}
check truth_sites_total sites

# ---- many threads handing blocks to each other ------------------------------------------------
(cd "$T" && "$PS" record -o "$T/s.pst" -- "$P/stress" -t 4 -n 50000) >"$T/s.out" 2>"$T/s.err"
"$PS" sql "$T/s.pst" -o "$T/s.db" --phase counted --quiet
"$PS" report --json --phase counted "$T/s.pst" >"$T/s.json"
# a thread's calls inside its own "counted" scopes (the program counts those)
IN_OWN="join scopes s on s.name = 'counted' and s.tid = a.tid and a.id between s.begin_id and s.end_id"
FREE_IN_OWN="join scopes s on s.name = 'counted' and s.tid = a.free_tid and a.free_id between s.begin_id and s.end_id"
counted() {
    eq "$(q "$T/s.db" "select count(*) from allocations a $IN_OWN where a.call = 'malloc'")" "$(key "$T/s.out" malloc)" malloc &&
    eq "$(q "$T/s.db" "select count(*) from allocations a $IN_OWN where a.call = 'calloc'")" "$(key "$T/s.out" calloc)" calloc &&
    eq "$(q "$T/s.db" "select count(*) from allocations a $IN_OWN where a.call = 'realloc'")" "$(key "$T/s.out" realloc)" realloc &&
    eq "$(q "$T/s.db" "select count(*) from allocations a $FREE_IN_OWN where a.freed_by = 'free'")" "$(key "$T/s.out" free)" free
}
check stress_counted_calls_equal_program counted
check stress_cross_thread_frees_equal_program eq "$(q "$T/s.db" 'select count(*) from allocations where cross_thread')" \
    "$(sed -n 's/^cross_thread_frees=//p' "$T/s.err")" cross_thread_frees
check stress_window_leaks_equal_report eq "$(q "$T/s.db" 'select total(size_bytes) from allocations where in_window and free_id is null' | cut -d. -f1)" \
    "$(jnum "$T/s.json" leaked_bytes)" leaked_bytes
check stress_window_peak_equals_report eq "$(q "$T/s.db" "$PEAK_Q")" "$(jnum "$T/s.json" peak_live_bytes)" peak
check stress_window_allocations_equal_report eq "$(q "$T/s.db" 'select count(*) from allocations where in_window')" \
    "$(jnum "$T/s.json" allocations)" allocations

# ---- SCHEMA.md's example queries run, on a trace with scopes -------------------------------------
"$PS" record -o "$T/e.pst" -- "$B/bin/refengine" --synthetic dim=64,layers=2,heads=4,kv_heads=4,hidden=128,vocab=512,seq=128 \
    --workload sharegpt --requests 4 --max-batch 2 --quiet >/dev/null 2>&1
"$PS" sql "$T/e.pst" -o "$T/e.db" --quiet
examples() {
    # every ```sql block of SCHEMA.md, as one script
    awk '/^```sql$/ {on = 1; next} /^```$/ {on = 0} on' "$ROOT/analyzer/SCHEMA.md" >"$T/examples.sql"
    [ "$(grep -c ';$' "$T/examples.sql")" -ge 6 ] || { echo "  too few example queries" >&2; return 1; }
    for db in "$T/e.db" "$T/t.db"; do
        sqlite3 -bail "$db" <"$T/examples.sql" >"$T/examples.out" 2>"$T/examples.err" ||
            { cat "$T/examples.err" >&2; return 1; }
    done
}
check schema_md_examples_run examples
# frames is a view over interned rows: each text once in names, each
# distinct displayed frame once in frame_defs, a stack's rows integers; a
# function many stacks pass through is one names row, and the view gives
# every stack's rows back
interned() {
    shared=$(q "$T/e.db" "select function from frames where function is not null group by function
                          having count(distinct stack_id) > 1 order by count(distinct stack_id) desc limit 1")
    [ -n "$shared" ] || { echo "  no function on two stacks" >&2; return 1; }
    eq "$(q "$T/e.db" "select count(*) from names where name = '$shared'")" 1 "names_of_$shared" &&
    eq "$(q "$T/e.db" "select count(*) from (select name from names group by name having count(*) > 1)")" 0 repeated_names &&
    eq "$(q "$T/e.db" "select count(*) from (select distinct pc, function, file, line, module, inlined, python from frames)")" \
       "$(q "$T/e.db" "select count(*) from frame_defs")" frame_defs &&
    eq "$(q "$T/e.db" "select count(*) from frames")" "$(q "$T/e.db" "select count(*) from stack_frames")" rows &&
    eq "$(q "$T/e.db" "select count(distinct stack_id) from frames")" "$(q "$T/e.db" "select count(*) from stacks")" stacks &&
    eq "$(q "$T/e.db" "select value from meta where key = 'schema_version'")" 5 schema_version
}
check frames_interned_once interned
# Schema 5 stores a stack as a path from its outermost frame inward, the
# paths stacks share once (stack_nodes). Against export's Chrome JSON,
# which symbolizes each allocation's stack itself (--allocations: every
# one, its frames innermost first): `frames WHERE stack_id = ?` gives each
# allocation's stack those frames in that order, and the nodes on the
# paths of those stacks are as many as the distinct outer-first prefixes
# of those frame lists (fewer than their frames: they all start in main).
shared_paths() {
    "$PS" export "$T/e.pst" --format chrome --allocations -o "$T/e.json" || return 1
    python3 - "$T/e.db" "$T/e.json" <<'EOF2'
import json, os, sqlite3, sys
db = sqlite3.connect(sys.argv[1])
doc = json.load(open(sys.argv[2]))
evs = doc["traceEvents"] if isinstance(doc, dict) else doc
def shown(r):   # a frame as export writes it (az_sym_format)
    fn, fl, line, mod, pc, inl = r
    if fn and fl: t = "%s (%s:%d)" % (fn, os.path.basename(fl), line or 0)
    elif fn: t = fn
    elif mod: t = mod + "+0x"    # the module's offset: the prefix only
    else: t = "0x%x" % pc
    return t + (" [inlined]" if inl else "")
ok, stacks, prefixes, frames = True, set(), set(), 0
# the instants come in the scan's order, the allocations' ids too
big = [e for e in evs if e.get("cat") == "alloc"]
rows = db.execute("select ts_ns, tid, size_bytes, stack from allocations order by id").fetchall()
if len(big) != len(rows): print("  %d instants, %d allocations" % (len(big), len(rows)), file=sys.stderr); sys.exit(1)
for e, (ts, tid, size, sid) in zip(big, rows):
    a = e["args"]
    want = a["stack"]
    if (round(e["ts"] * 1000), e["tid"], a["bytes"]) != (ts, tid, size) or sid is None:
        print("  instant %s, allocation %s" % (e, (ts, tid, size, sid)), file=sys.stderr); ok = False; continue
    got = [shown(r) for r in db.execute("select function, file, line, module, pc, inlined from frames "
                                        "where stack_id = ? order by level", (sid,))]
    if len(got) != len(want) or any(w != g and not (g.endswith("+0x") and w.startswith(g)) for g, w in zip(got, want)):
        print("  stack %d: frames %s, export %s" % (sid, got, want), file=sys.stderr); ok = False
    stacks.add(sid)
    outer_first = want[::-1]
    for k in range(1, len(outer_first) + 1): prefixes.add(tuple(outer_first[:k]))
    frames += len(want)
ids = ",".join(str(s) for s in stacks)
nodes = db.execute("with recursive up(id) as (select node from stack_rows where id in (%s) "
                   "union select n.parent from up join stack_nodes n on n.id = up.id where n.parent is not null) "
                   "select count(*) from up" % ids).fetchone()[0]
if nodes != len(prefixes) or len(stacks) < 10 or nodes >= frames:
    print("  %d stacks: %d nodes, %d distinct prefixes, %d frames" % (len(stacks), nodes, len(prefixes), frames),
          file=sys.stderr); ok = False
sys.exit(0 if ok else 1)
EOF2
}
check stacks_share_paths_and_frames_equal_export shared_paths
scopes() {
    [ "$(q "$T/e.db" "select count(*) from scopes")" = "$(q "$T/e.db" "select count(*) from markers where kind = 'begin'")" ] &&
    [ "$(q "$T/e.db" "select count(*) from scopes s join markers e on e.event_id = s.end_id and e.kind = 'end' and e.name = s.name and e.instance = s.instance")" = \
      "$(q "$T/e.db" "select count(*) from markers where kind = 'end'")" ]
}
check scopes_pair_markers scopes
# a scope's heap calls counted at load time, summed over scopes that do not
# overlap (one forward, one layer at a time): report's phase figure
phase_calls() {
    for n in forward layer; do
        got=$(q "$T/e.db" "select sum(heap_calls) from scopes where name = '$n'")
        [ "$got" -gt 0 ] || { echo "  $n: no heap calls" >&2; return 1; }
        eq "$got" "$(q "$T/e.db" "select cast(value as integer) from metrics where name = 'phases.$n.heap_calls'")" "$n" || return 1
    done
}
check scopes_heap_calls_equal_metrics phase_calls
check scopes_allocations_equal_rows eq "$(q "$T/e.db" "select sum(allocations) from scopes where name = 'request'")" \
    "$(q "$T/e.db" "select count(*) from scopes p join allocations a on a.id between p.begin_id and p.end_id where p.name = 'request'")" request_allocations
exit $status
