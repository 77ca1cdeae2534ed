#!/bin/sh
# record_gaps.sh — what a trace cannot show is said at the end of `record`
# (issue 25 item 7, libtrace/launch.c "Silent gaps"):
#   - fork children that cannot open their trace (RLIMIT_NOFILE 3, set by
#     the program after it started: no descriptor left) run untraced, and
#     record names them: the count and the pids the program reports, the
#     reason (EMFILE); singular and plural
#   - a program with its own malloc family (tests/progs/ownmalloc.c: the
#     loader binds every malloc to it, not to the tracer) gets a trace with
#     no heap event, and record says it may use its own allocator; an
#     ordinary program does not get that line, and its trace is still
#     summed up from END alone (scanned_bytes=0)
. tests/integration/lib.sh

# untraced N: forkexec nofile N under record; the warning names N children,
# exactly the pids the program forked, and EMFILE's reason
untraced() {
    n=$1; d=$T/nofile$n; mkdir -p "$d"
    "$PS" record -o "$d/t.pst" -- "$P/forkexec" nofile "$n" >"$d/out" 2>"$d/err" ||
        { echo "  record failed: $(cat "$d/err")" >&2; return 1; }
    pids=$(sed -n 's/^child=//p' "$d/out" | sort -n | tr '\n' ' ' | sed 's/ $//; s/ /, /g')
    forks=$("$DUMP" "$d/t.pst" | sed -n 's/^fork=//p')
    [ "$(sed -n 's/^child=//p' "$d/out" | wc -l)" -eq "$n" ] && [ "$forks" = "$n" ] ||
        { echo "  the program forked $forks, reported $(grep -c '^child=' "$d/out")" >&2; return 1; }
    if [ "$n" -eq 1 ]; then
        want="poolscope: record: 1 child process (pid $pids) was not traced: could not open its trace (too many open files)"
    else
        want="poolscope: record: $n child processes (pids $pids) were not traced: could not open their traces (too many open files)"
    fi
    [ "$(grep -c 'was not traced\|were not traced' "$d/err")" -eq 1 ] && grep -qxF "$want" "$d/err" ||
        { echo "  want: $want" >&2; cat "$d/err" >&2; return 1; }
    # the parent itself is traced, completely; the children left no file
    [ "$(ls "$d" | grep -c '\.pst$')" -eq 1 ] && [ "$("$DUMP" "$d/t.pst" | sed -n 's/^complete=//p')" = 1 ]
}
check nofile_child_named untraced 1
check nofile_children_named untraced 3

# ---- a program with its own malloc ------------------------------------------------
d=$T/own; mkdir -p "$d"
POOLSCOPE_RECORD_STATS=$d/stats "$PS" record -o "$d/t.pst" -- "$P/ownmalloc" 300 >"$d/out" 2>"$d/err"; rc=$?
"$DUMP" "$d/t.pst" >"$d/dump" 2>&1
check own_malloc_runs sh -c "[ $rc -eq 0 ] && [ \$(sed -n 's/^calls=//p' '$d/out') -gt 1000 ]"
# the tracer saw none of its calls, but each of its mmaps
own_trace() {
    [ "$(key "$d/dump" alloc_calls)" = 0 ] && [ "$(key "$d/dump" free)" = 0 ] &&
        [ "$(key "$d/dump" realloc)" = 0 ] && [ "$(key "$d/dump" complete)" = 1 ] &&
        [ "$(key "$d/dump" mmap)" = "$(key "$d/out" mmaps)" ] && [ "$(key "$d/out" mmaps)" -gt 0 ] ||
        { cat "$d/dump" >&2; return 1; }
}
check own_malloc_trace_has_no_heap_calls own_trace
want="poolscope: record: ownmalloc made no heap calls the tracer could see: it may use its own allocator (statically linked malloc, or jemalloc/tcmalloc linked in); only mmap calls were recorded"
check own_malloc_warned sh -c "[ \$(grep -c 'made no heap calls' '$d/err') -eq 1 ] && grep -qxF '$want' '$d/err'"
# the look at its events is counted
check own_malloc_trace_was_read sh -c "[ \$(sed -n 's/^scanned_bytes=//p' '$d/stats') -gt 0 ]"

# an ordinary program: no such line, and nothing read beyond END
d=$T/plain; mkdir -p "$d"
POOLSCOPE_RECORD_STATS=$d/stats "$PS" record -o "$d/t.pst" -- "$P/forkexec" leaf >"$d/out" 2>"$d/err"; rc=$?
check plain_not_warned sh -c "[ $rc -eq 0 ] && grep -q ' events' '$d/err' && ! grep -q 'made no heap calls\|not traced' '$d/err'"
check plain_read_from_end sh -c "[ \"\$(cat '$d/stats')\" = scanned_bytes=0 ]"
exit $status
