#!/bin/sh
# bench-tracer-cg.sh — what the tracer costs in instructions (callgrind),
# two builds side by side: a figure a noisy machine does not move.
#
#   BASE=/path/to/old/build NEW=build CALLS=440000 sh scripts/bench-tracer-cg.sh
#
# Runs tests/progs/churn (CALLS malloc+free calls) alone and under each
# build's interposer with the environment `poolscope record` gives it
# (--stacks none, and fp when STACKS="none fp"), under callgrind with one
# profile per thread. Prints, per build and mode, instructions per
# malloc+free pair: on the program's thread beyond the untraced run (the
# hooks, their slow paths, stack capture: what the program waits for),
# and on the tracer's own threads (the flusher: column split, zstd; on a
# 2-core machine it runs beside the program). Timing-dependent work (how
# often the tick moves, TS records) runs slower under callgrind than
# natively, so the figures are for comparing builds, not wall time.
set -eu
BASE=${BASE:?BASE: the other build directory}
NEW=${NEW:-build}
CALLS=${CALLS:-440000}
STACKS=${STACKS:-none}
command -v valgrind >/dev/null 2>&1 || { echo "bench-tracer-cg: valgrind missing" >&2; exit 2; }
W=$(mktemp -d "${TMPDIR:-/tmp}/bench-cg.XXXXXX")
trap 'rm -rf "$W"' EXIT
CHURN=$NEW/tests/progs/churn
# total Ir of one callgrind profile file
ir() { v=$(sed -n 's/^summary: *//p' "$1" | head -1); echo "${v:-0}"; }
# run TAG [LIB STACKS]: one profile per thread in $W/TAG.*; prints "main others"
run() {
    tag=$1
    if [ $# -gt 1 ]; then
        LD_PRELOAD=$2/lib/libpoolscope-preload.so POOLSCOPE_OUT=$W/$tag.pst POOLSCOPE_STACKS=$3 \
            valgrind --tool=callgrind --separate-threads=yes --callgrind-out-file="$W/$tag.cg" \
            "$CHURN" "$CALLS" >/dev/null 2>"$W/$tag.log"
    else
        valgrind --tool=callgrind --separate-threads=yes --callgrind-out-file="$W/$tag.cg" \
            "$CHURN" "$CALLS" >/dev/null 2>"$W/$tag.log"
    fi
    main=0 others=0
    for f in "$W/$tag.cg"*; do
        case $f in
        *-01) main=$(ir "$f") ;;
        *) others=$((others + $(ir "$f"))) ;;
        esac
    done
    echo "$main $others"
}
pairs=$((CALLS / 2))
set -- $(run plain)
plain=$1
echo "untraced: $(awk -v m="$plain" -v p=$pairs 'BEGIN { printf "%.1f", m / p }') instructions per pair"
for s in $STACKS; do
    for b in "$BASE" "$NEW"; do
        set -- $(run "t$(echo "$b$s" | tr -c 'a-zA-Z0-9' _)" "$b" "$s")
        awk -v m="$1" -v o="$2" -v base="$plain" -v p=$pairs -v b="$b" -v s="$s" 'BEGIN {
            printf "%-6s %-40s program thread +%.1f, tracer threads %.1f instructions per pair\n",
                   s, b, (m - base) / p, o / p }'
    done
done
