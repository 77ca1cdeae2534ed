# columns.sh — the column form of compressed EVENTS chunks (format 1.6,
# libtrace/columns.c) on real programs recorded by the tracer: every chunk
# the flusher wrote in column form is exactly what the library's splitter
# makes of its payload, every payload splits and joins back byte for byte
# (pstcols), and the reader reads the traces whole with every event
# (pstdump's counts against the program's own where it prints them).
. tests/integration/lib.sh
COLS=$B/tests/progs/pstcols

# $1 name, $2 stacks, rest: the program
columns() {
    n=$1 s=$2; shift 2
    "$PS" record --stacks "$s" -o "$T/$n.pst" -- "$@" >"$T/$n.out" 2>"$T/$n.err" || { cat "$T/$n.err" >&2; return 1; }
    "$COLS" "$T/$n.pst" >"$T/$n.cols" || { cat "$T/$n.cols" >&2; return 1; }
    [ "$(key "$T/$n.cols" column_chunks)" -gt 0 ] || { echo "  no chunk in column form:" >&2; cat "$T/$n.cols" >&2; return 1; }
    "$DUMP" "$T/$n.pst" >"$T/$n.dump" || return 1
    [ "$(key "$T/$n.dump" complete)" = 1 ] || { grep -E '^(corrupt|truncated)' "$T/$n.dump" >&2; return 1; }
}
check columns_churn_fp columns churn fp "$P/churn" 200000 8
check columns_churn_dwarf columns churn_dwarf dwarf "$P/churn" 100000 8
check columns_stress_threads columns stress fp "$P/stress" -t 4 -n 100000
check columns_no_stacks columns nostk none "$P/churn" 200000 8
check columns_pool_events columns pool fp "$P/pool_events"
exit $status
