# pre_progs.sh — the interposer's own test programs (tests/progs/pre_calls.c,
# pre_proc.c, pre_edges.c) run under `poolscope record`, and what they say
# they did compared with what `poolscope sql` and `report --json` read from
# the trace (issue 27, item 11):
#
#   - pre_calls logs every hooked call it makes inside its "calls" scope;
#     the trace's events of each thread inside that scope, as the sql
#     `events` view gives them, must be those lines event by event (calloc
#     as nmemb and nmemb * size, realloc(p, 0), failing calls included), and
#     report --json --phase calls must count the same calls, allocations,
#     bytes and peak;
#   - pre_proc allocates (and frees) a known number of 4242-byte blocks in
#     each process image (fork, fork + exec, vfork, posix_spawn, system, an
#     exec chain, a failed exec, fds closed under the tracer): each image's
#     trace must hold exactly that many, all freed (sql's allocations), and
#     be complete with no leak and no unknown free (sql's metrics table:
#     report --json's figures);
#   - pre_edges: calloc(3, 1000) recorded as 3 x 1000 (not 3 x 3), and
#     blocks released by realloc(p, 0) while tracing is paused are not leaks.
# Traces without stacks where the test needs none (record and sql 10x
# faster); the whole script takes about 5 s.
. tests/integration/lib.sh

PC=$B/tests/progs/pre_calls

# flat FILE: report --json's top-level numbers and its calls object as
# KEY=VALUE lines (calls.malloc=22, allocations=200, ...), for same_keys
flat() {
    awk '/^  "calls": [{]/ { in_calls = 1; next }
         in_calls && /^  [}]/ { in_calls = 0; next }
         { l = $0; gsub(/[ ",]/, "", l); split(l, kv, ":") }
         in_calls { print "calls." kv[1] "=" kv[2]; next }
         /^  "[a-z_]+": (-?[0-9]|true|false)/ { print kv[1] "=" kv[2] }' "$1"
}

# canon_expected: pre_calls's lines in the shape the sql below prints
# (addresses as logged; calloc: nmemb, nmemb * size, "-" for a failed one
# whose product overflows; realloc: new, old, size; ...)
canon_expected() {
    awk '
    $1 == "calloc"       { print "calloc", $2, $3, ($2 == "0x0" ? "-" : $3 * $4); next }
    $1 == "realloc"      { print "realloc", $3, $2, $4; next }
    $1 == "reallocarray" { print "reallocarray", $3, $2, $4 * $5, $4; next }
    $1 == "posix_memalign" || $1 == "aligned_alloc" || $1 == "memalign" { print $1, $2, $4, $3; next }
    $1 == "mmap"         { print "mmap", $2, $3, $5; next }
    $1 == "madvise"      { print "madvise", $2, $3; next }
    $1 == "mremap"       { print "mremap", $4, $2, $5, $3; next }
    { print }'
}

# canon_sql DB: the heap and mapping events of every thread inside its own
# "calls" scope, one line each, as `events` gives them (SCHEMA.md)
canon_sql() {
    sqlite3 "$1" "
SELECT CASE e.type_name
  WHEN 'calloc' THEN printf('calloc 0x%x %d %s', e.addr, e.arg,
                            CASE WHEN e.addr = 0 THEN '-' ELSE e.size_bytes END)
  WHEN 'realloc' THEN printf('realloc 0x%x 0x%x %d', e.addr, e.old_addr, e.size_bytes)
  WHEN 'reallocarray' THEN printf('reallocarray 0x%x 0x%x %d %d', e.addr, e.old_addr, e.size_bytes, e.arg)
  WHEN 'posix_memalign' THEN printf('posix_memalign 0x%x %d %d', e.addr, e.size_bytes, e.arg)
  WHEN 'aligned_alloc' THEN printf('aligned_alloc 0x%x %d %d', e.addr, e.size_bytes, e.arg)
  WHEN 'memalign' THEN printf('memalign 0x%x %d %d', e.addr, e.size_bytes, e.arg)
  WHEN 'mmap' THEN printf('mmap 0x%x %d %d', e.addr, e.size_bytes, e.arg)
  WHEN 'madvise' THEN printf('madvise 0x%x %d', e.addr, e.size_bytes)
  WHEN 'mremap' THEN printf('mremap 0x%x 0x%x %d %d', e.addr, e.old_addr, e.size_bytes, e.arg)
  WHEN 'free' THEN printf('free 0x%x', e.addr)
  ELSE printf('%s 0x%x %d', e.type_name, e.addr, e.size_bytes) END
FROM events e JOIN scopes s ON s.name = 'calls' AND e.tid = s.tid AND e.id > s.begin_id AND e.id < s.end_id
WHERE e.type_name IN ('malloc', 'calloc', 'realloc', 'reallocarray', 'posix_memalign', 'aligned_alloc',
                      'memalign', 'valloc', 'pvalloc', 'free', 'mmap', 'munmap', 'mremap', 'madvise')
ORDER BY e.id;"
}

# calls NAME ITER THREADS: record pre_calls; its log, sorted, must equal the
# trace's events inside the scope, through pre_dump -w and through sql
calls() {
    d=$T/$1; mkdir -p "$d"
    "$PS" record -o "$d/t.pst" -- "$PC" "$2" "$3" "$d/expected" >"$d/out" 2>"$d/err" ||
        { echo "  record failed: $(cat "$d/err")" >&2; return 1; }
    [ "$(wc -l <"$d/expected")" -ge $(($2 * $3 * 19)) ] || { echo "  short log" >&2; return 1; }
    sort "$d/expected" >"$d/want.dump"
    "$B/tests/progs/pre_dump" -w calls "$d/t.pst" | sort >"$d/got.dump"
    ok=0
    cmp -s "$d/want.dump" "$d/got.dump" ||
        { echo "  pre_dump -w calls differs from the program's log:" >&2; diff "$d/want.dump" "$d/got.dump" | head -6 >&2; ok=1; }
    "$PS" sql "$d/t.pst" -o "$d/t.sqlite" >/dev/null 2>"$d/sql.err" || { cat "$d/sql.err" >&2; return 1; }
    canon_expected <"$d/expected" | sort >"$d/want.sql"
    canon_sql "$d/t.sqlite" | sort >"$d/got.sql"
    cmp -s "$d/want.sql" "$d/got.sql" ||
        { echo "  sql events differ from the program's log:" >&2; diff "$d/want.sql" "$d/got.sql" | head -6 >&2; ok=1; }
    return $ok
}
check pre_calls_events_one_thread calls c1 30 1
check pre_calls_events_four_threads calls c4 40 4

# One thread: report --json --phase calls counts what the log says, call by
# call (a failing call is a call), and its allocations, requested bytes and
# the peak of what was allocated inside the scope, worked out from the log
# in the program's order (realloc: the old block goes, the new one comes;
# failed calls allocate nothing).
calls_report() {
    d=$T/c1
    "$PS" report --json --phase calls "$d/t.pst" >"$d/r.json" 2>"$d/r.err" || { cat "$d/r.err" >&2; return 1; }
    awk '
    function add(a, n) { if (a != "0x0") { live[a] = n; cur += n; allocs++; bytes += n; if (cur > peak) peak = cur } }
    function del(a)    { if (a != "0x0" && (a in live)) { cur -= live[a]; delete live[a] } }
    { calls[$1]++ }
    $1 == "malloc" || $1 == "valloc" || $1 == "pvalloc" { if ($2 != "0x0") add($2, $3) }
    $1 == "calloc"       { if ($2 != "0x0") add($2, $3 * $4) }
    $1 == "realloc"      { del($2); add($3, $4) }
    $1 == "reallocarray" { del($2); add($3, $4 * $5) }
    $1 == "posix_memalign" || $1 == "aligned_alloc" || $1 == "memalign" { add($2, $4) }
    $1 == "free"         { del($2) }
    END {
        n = split("malloc calloc realloc reallocarray free posix_memalign aligned_alloc memalign valloc pvalloc mmap munmap mremap", f, " ")
        for (i = 1; i <= n; i++) printf "calls.%s=%d\n", f[i], calls[f[i]]
        printf "allocations=%d\ntotal_allocated_bytes=%d\npeak_selection_live_bytes=%d\nleaked_objects=0\nunknown_frees=0\n", allocs, bytes, peak
    }' "$d/expected" >"$d/want.keys"
    flat "$d/r.json" >"$d/got.keys"
    same_keys "$d/want.keys" "$d/got.keys"
}
check pre_calls_report_counts_one_thread calls_report

# ---- pre_edges: calloc(3, 1000); realloc(p, 0) while paused ----
edges() {
    d=$T/edges; mkdir -p "$d"
    "$PS" record --stacks none -o "$d/t.pst" -- "$B/tests/progs/pre_edges" 400 >"$d/out" 2>"$d/err" ||
        { echo "  record failed: $(cat "$d/err")" >&2; return 1; }
    "$PS" report --json "$d/t.pst" >"$d/r.json" 2>"$d/r.err" || { cat "$d/r.err" >&2; return 1; }
    "$PS" sql "$d/t.pst" -o "$d/t.sqlite" >/dev/null 2>"$d/sql.err" || { cat "$d/sql.err" >&2; return 1; }
}
check pre_edges_recorded edges

# the program's own count against report --json: every block allocated while
# recording is freed (the paused realloc(p, 0) releases included)
edges_report() {
    d=$T/edges; o=$d/out
    n=$(sed -n 's/.*paused_realloc0=\([0-9]*\).*/\1/p' "$o")
    printf 'allocations=%s\ntotal_allocated_bytes=%s\nleaked_objects=0\nleaked_bytes=0\nunknown_frees=0\ncalls.calloc=1\ncalls.realloc=0\ncalls.free=%s\n' \
        "$(sed -n 's/.*allocations=\([0-9]*\).*/\1/p' "$o")" "$(sed -n 's/.*requested=\([0-9]*\).*/\1/p' "$o")" \
        "$((n + 2))" >"$d/want.keys"
    flat "$d/r.json" >"$d/got.keys"
    same_keys "$d/want.keys" "$d/got.keys"
}
check paused_realloc0_frees_and_calloc_bytes_report edges_report

# the same through sql: the calloc row is nmemb 3, 3000 bytes; the paused
# realloc(p, 0) releases close their objects (freed_by free: a paused
# release is recorded as a free), nothing left open
edges_sql() {
    d=$T/edges; o=$d/out
    n=$(sed -n 's/.*paused_realloc0=\([0-9]*\).*/\1/p' "$o")
    nm=$(sed -n 's/.*calloc_nmemb=\([0-9]*\).*/\1/p' "$o"); sz=$(sed -n 's/.*calloc_size=\([0-9]*\).*/\1/p' "$o")
    want="calloc|$nm|$((nm * sz))|1
open|0"
    got=$(sqlite3 "$d/t.sqlite" "SELECT 'calloc', arg, size_bytes, count(*) FROM events WHERE type_name = 'calloc' GROUP BY arg, size_bytes;
                                 SELECT 'open', count(*) FROM allocations WHERE free_id IS NULL;")
    [ "$got" = "$want" ] || { echo "  want: $want; got: $got" >&2; return 1; }
    # the N blocks of 64 + i % 100 bytes, each freed
    fr=$(sqlite3 "$d/t.sqlite" "SELECT count(*) FROM allocations WHERE call = 'malloc' AND size_bytes BETWEEN 64 AND 163 AND freed_by = 'free'")
    [ "$fr" = "$n" ] || { echo "  $fr of $n blocks released while paused are freed in the trace" >&2; return 1; }
}
check paused_realloc0_frees_and_calloc_bytes_sql edges_sql

# ---- pre_proc: 4242-byte blocks per process image ----
# proc NAME WANT MODE ARGS...: record pre_proc MODE; WANT lists, ascending,
# the number of 4242-byte mallocs of each image that made any (the
# program's comment: 100 at start, 100 more in the parent after a fork or
# spawn, 50 in a fork child, 1000 + 20 x 5000 in closeall). Each trace
# must hold exactly one image's count, every block freed, and be complete
# with no leak and no unknown free.
proc() {
    pn=$1 want=$2; shift 2
    d=$T/proc-$pn; mkdir -p "$d"
    "$PS" record --stacks none -o "$d/t.pst" -- "$B/tests/progs/pre_proc" "$@" >"$d/out" 2>"$d/err" ||
        { echo "  record failed: $(cat "$d/err")" >&2; return 1; }
    sed -n 's/^poolscope: pid [0-9]*: \(.*\): [0-9]* events.*/\1/p' "$d/err" >"$d/listed"
    [ -s "$d/listed" ] || { echo "  no trace listed" >&2; cat "$d/err" >&2; return 1; }
    : >"$d/counts"
    while read -r f; do
        "$PS" sql "$f" -o "$f.sqlite" >/dev/null 2>"$f.err" || { cat "$f.err" >&2; return 1; }
        r=$(sqlite3 "$f.sqlite" "SELECT count(*), count(free_id) FROM allocations WHERE call = 'malloc' AND size_bytes = 4242")
        [ "${r%|*}" = "${r#*|}" ] || { echo "  $f: 4242-byte blocks, freed: $r" >&2; return 1; }
        # the report's own figures, as sql stores them (metrics: report --json's
        # keys); leaks only for pre_proc's images (sh, under system, keeps some)
        m=$(sqlite3 "$f.sqlite" "SELECT group_concat(name || '=' || CAST(value AS INTEGER), ' ') FROM
                                 (SELECT name, value FROM metrics WHERE name IN ('complete', 'unknown_frees', 'leaked_objects') ORDER BY name)")
        [ "${r%|*}" -gt 0 ] || m=${m%% *}" leaked_objects=0 "${m##* }
        [ "$m" = "complete=1 leaked_objects=0 unknown_frees=0" ] || { echo "  $f: $m" >&2; return 1; }
        [ "${r%|*}" -gt 0 ] && echo "${r%|*}" >>"$d/counts"
    done <"$d/listed"
    got=$(sort -n "$d/counts" | tr '\n' ' ')
    [ "$got" = "$want " ] || { echo "  4242-byte blocks per image: want $want, got $got" >&2; return 1; }
}
check pre_proc_leaf proc leaf "100" leaf
check pre_proc_fork proc fork "50 200" fork
check pre_proc_forkexec proc forkexec "100 200" forkexec
check pre_proc_vfork proc vfork "100 200" vfork
check pre_proc_spawn proc spawn "100 200" spawn
check pre_proc_system proc system "100 100" system
check pre_proc_chain proc chain "100 100 100 100" chain 3
check pre_proc_execfail proc execfail "200" execfail
check pre_proc_closeall proc closeall "101100" closeall
exit $status
