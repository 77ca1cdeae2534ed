# record_heaptrack.sh — on the churn program, our trace counts the same
# allocation calls as heaptrack does for the same program: heaptrack_print's
# "calls to allocation functions" equals our malloc-family allocation
# events, and its allocations minus its leaked allocations equals our frees.
#
# heaptrack's own interposer is C++: it brings libstdc++ into the process,
# whose constructor allocates its exception emergency pool before any
# program code runs, and heaptrack counts that call. So that both runs hold
# the same libraries, ours runs with libstdc++ preloaded as well (record
# prepends the tracer to an existing LD_PRELOAD). That allocation happens
# before the tracer's constructor: the strict check needs the tracer to
# record it; the second check accepts it counted as lost (never silent).
. tests/integration/lib.sh
CALLS=100000

STDCXX=$(g++ -print-file-name=libstdc++.so.6 2>/dev/null)
[ -f "$STDCXX" ] || STDCXX=/lib/x86_64-linux-gnu/libstdc++.so.6

run_both() {
    command -v heaptrack >/dev/null || { echo "  no heaptrack: skipped" >&2; SKIP=1; return 0; }
    SKIP=0
    heaptrack -o "$T/ht" "$P/churn" $CALLS >"$T/ht.log" 2>&1 || { cat "$T/ht.log" >&2; return 1; }
    f=$(ls "$T"/ht.* | grep -v '\.log$' | head -1)
    heaptrack_print "$f" >"$T/ht.txt" 2>/dev/null || return 1
    h_allocs=$(sed -n 's/^calls to allocation functions: \([0-9]*\).*/\1/p' "$T/ht.txt")
    h_leaked=$(sed -n 's/.*leaked allocations:[[:space:]]*\([0-9]*\).*/\1/p' "$T/ht.log" | head -1)
    [ -n "$h_allocs" ] && [ -n "$h_leaked" ] || { echo "  cannot parse heaptrack's output" >&2; return 1; }
    LD_PRELOAD=$STDCXX "$PS" record -o "$T/churn.pst" -- "$P/churn" $CALLS >"$T/churn.out" 2>"$T/churn.err" || return 1
    "$DUMP" "$T/churn.pst" >"$T/churn.dump" || return 1
    ours=$(key "$T/churn.dump" alloc_calls)
    frees=$(key "$T/churn.dump" free)
    lost=$(key "$T/churn.dump" lost)
    echo "  heaptrack: $h_allocs allocations, $h_leaked leaked -> $((h_allocs - h_leaked)) frees;" \
        "poolscope: $ours allocations, $frees frees, $lost lost" >&2
}
check churn_run_under_both run_both

# Allocation calls: exactly heaptrack's "calls to allocation functions".
allocs_equal() {
    [ "$SKIP" = 1 ] && return 0
    [ "$ours" -eq "$h_allocs" ] && [ "$lost" -eq 0 ]
}
check churn_allocation_calls_equal_heaptrack allocs_equal

# Frees: the program's own count, plus the one free of libstdc++'s
# emergency pool (allocated before main, freed only by __gnu_cxx::__freeres,
# which heaptrack calls at exit and the interposer too): so ours equal
# heaptrack's exactly.
frees_exact() {
    [ "$SKIP" = 1 ] && return 0
    f=$(sed -n 's/^mallocs=[0-9]* frees=\([0-9]*\)$/\1/p' "$T/churn.out")
    m=$(sed -n 's/^mallocs=\([0-9]*\) .*/\1/p' "$T/churn.out")
    h_frees=$((h_allocs - h_leaked))
    [ -n "$f" ] && [ "$frees" -eq $((f + 1)) ] && [ "$(key "$T/churn.dump" malloc)" -ge "$m" ] &&
        [ "$h_frees" -eq "$frees" ]
}
check churn_frees_equal_program_count frees_exact
exit $status
