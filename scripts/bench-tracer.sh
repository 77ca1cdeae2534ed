#!/bin/sh
# bench-tracer.sh — what the tracer costs, against heaptrack, in one run.
#
#   BUILD=build RUNS=5 CALLS=3000000 sh scripts/bench-tracer.sh > table.md
#
# On tests/progs/churn (a deterministic transformer-like malloc/free mix at
# a fixed call depth) it times, median of RUNS runs each: the program alone,
# `poolscope record --stacks none`, `--stacks fp`, then a copy of churn built
# with -fomit-frame-pointer alone and under `--stacks dwarf` (what a program
# without frame pointers needs), and heaptrack on the frame-pointer build.
# Then a python3 allocation-heavy workload alone, under `--stacks dwarf` and
# under heaptrack. Prints a markdown table on stdout; progress on stderr.
#
# The poolscope rows run the program with the environment `poolscope
# record` sets (LD_PRELOAD, POOLSCOPE_OUT, POOLSCOPE_STACKS), so they time
# the tracer; one more row times the whole `record` command, whose closing
# summary reads the trace back.
# Columns: ns per event (wall time / malloc+free calls the program made),
# slowdown against the same binary alone, trace bytes per event (our .pst,
# or heaptrack's compressed file, divided by the same call count).
# Wall time includes process start-up and the tracer's final flush, as a
# user would see it.
set -eu
BUILD=${BUILD:-build}
RUNS=${RUNS:-5}
CALLS=${CALLS:-3000000}
ROOT=$(pwd)
case $BUILD in /*) B=$BUILD ;; *) B=$ROOT/$BUILD ;; esac
PS=$B/bin/poolscope
PRELOAD=$B/lib/libpoolscope-preload.so
CHURN=$B/tests/progs/churn
NOFP=$B/bench/churn-nofp
for f in "$PS" "$CHURN" "$B/lib/libpoolscope-preload.so"; do
    [ -x "$f" ] || [ -f "$f" ] || { echo "bench-tracer: $f missing: run make first" >&2; exit 2; }
done
HAVE_HT=1
command -v heaptrack >/dev/null 2>&1 || { HAVE_HT=0; echo "bench-tracer: no heaptrack: its rows are left out" >&2; }
mkdir -p "$B/bench"
${CC:-cc} -std=c11 -D_GNU_SOURCE -O2 -g -fomit-frame-pointer -o "$NOFP" "$ROOT/tests/progs/churn.c"

W=$(mktemp -d "${TMPDIR:-/tmp}/bench-tracer.XXXXXX")
trap 'rm -rf "$W"' EXIT

now() { date +%s%N; }
median() { sort -n | awk '{ v[NR] = $1 } END { if (NR % 2) print v[(NR + 1) / 2]; else print int((v[NR / 2] + v[NR / 2 + 1]) / 2) }'; }

# run_mode NAME KIND CMD...: KIND plain|rec|ht. Times RUNS runs; leaves
# $W/NAME.ns (median ns) and $W/NAME.bytes (file bytes of the last run).
run_mode() {
    name=$1 kind=$2; shift 2
    : >"$W/$name.times"
    i=0
    while [ $i -lt "$RUNS" ]; do
        rm -rf "$W/run"; mkdir -p "$W/run"
        t0=$(now)
        case $kind in
        plain) "$@" >"$W/run/out" 2>/dev/null ;;
        # the traced program with the environment `record` gives it
        rec)   LD_PRELOAD=$PRELOAD POOLSCOPE_OUT=$W/run/t.pst POOLSCOPE_STACKS=$REC \
                   "$@" >"$W/run/out" 2>"$W/run/err" ;;
        # the whole command, closing summary (a full read of the trace) included
        cli)   "$PS" record -o "$W/run/t.pst" --stacks "$REC" -- "$@" >"$W/run/out" 2>"$W/run/err" ;;
        ht)    heaptrack -o "$W/run/ht" "$@" >"$W/run/out" 2>&1 ;;
        esac
        t1=$(now)
        echo $((t1 - t0)) >>"$W/$name.times"
        i=$((i + 1))
    done
    median <"$W/$name.times" >"$W/$name.ns"
    case $kind in
    plain) echo 0 ;;
    *) cat "$W"/run/t*.pst "$W"/run/ht* 2>/dev/null | wc -c ;;
    esac >"$W/$name.bytes"
    cp "$W/run/out" "$W/$name.out"
    [ -f "$W/run/err" ] && cp "$W/run/err" "$W/$name.err"
    echo "bench-tracer: $name: $(cat "$W/$name.ns") ns" >&2
}

REC=none
run_mode plain plain "$CHURN" "$CALLS"
EVENTS=$(sed -n 's/^mallocs=\([0-9]*\) frees=\([0-9]*\)$/\1 \2/p' "$W/plain.out" | awk '{print $1 + $2}')
REC=none;  run_mode none rec "$CHURN" "$CALLS"
REC=none;  run_mode none_cli cli "$CHURN" "$CALLS"
REC=fp;    run_mode fp rec "$CHURN" "$CALLS"
run_mode plain_nofp plain "$NOFP" "$CALLS"
REC=dwarf; run_mode dwarf rec "$NOFP" "$CALLS"
[ $HAVE_HT = 1 ] && run_mode heaptrack ht "$CHURN" "$CALLS"

row() { # NAME LABEL BASE
    awk -v ns="$(cat "$W/$1.ns")" -v base="$(cat "$W/$3.ns")" -v ev="$EVENTS" \
        -v by="$(cat "$W/$1.bytes")" -v label="$2" 'BEGIN {
        bpe = by > 0 ? sprintf("%.2f", by / ev) : "-"
        printf "| %s | %.1f | %.2fx | %s |\n", label, ns / ev, ns / base, bpe }'
}

echo "## tracer overhead"
echo
echo "churn: $EVENTS malloc+free calls at a fixed call depth; median of $RUNS runs;"
echo "wall time per call including start-up and the final flush."
echo
echo "| mode | ns per event | slowdown | trace bytes per event |"
echo "|---|---:|---:|---:|"
row plain "uninstrumented" plain
row none "poolscope record --stacks none" plain
row none_cli "poolscope record --stacks none, whole command incl. its closing trace read" plain
row fp "poolscope record --stacks fp" plain
row plain_nofp "uninstrumented, -fomit-frame-pointer build" plain_nofp
row dwarf "poolscope record --stacks dwarf (-fomit-frame-pointer build)" plain_nofp
[ $HAVE_HT = 1 ] && row heaptrack "heaptrack $(heaptrack --version 2>/dev/null | awk '{print $2}') (file: compressed)" plain

# ---- python3 ---------------------------------------------------------------
PY=$(python3 -c 'import sys; print(sys.executable)' 2>/dev/null || true)
if [ -n "$PY" ]; then
    # Every object through malloc (not pymalloc's arenas), in every row: the
    # allocation-heavy case, as one profiles Python with heaptrack too.
    export PYTHONMALLOC=malloc
    cat >"$W/work.py" <<'PY'
import random
random.seed(1)
live = []
total = 0
for step in range(60):
    d = {i: str(i) * (1 + i % 7) for i in range(20000)}
    l = [(k, [v] * 3) for k, v in d.items() if k % 3]
    live.append(l)
    if len(live) > 4:
        live.pop(random.randrange(len(live)))
    total += len(l)
print(total)
PY
    run_mode py plain "$PY" "$W/work.py"
    # one run of the whole command, for the event count of its summary
    runs=$RUNS; RUNS=1; REC=dwarf; run_mode py_dwarf cli "$PY" "$W/work.py"; RUNS=$runs
    PYEV=$(sed -n 's/.*: \([0-9]*\) events.*/\1/p' "$W/py_dwarf.err" | awk '{s += $1} END {print s + 0}')
    REC=dwarf; run_mode py_dwarf rec "$PY" "$W/work.py"
    [ $HAVE_HT = 1 ] && run_mode py_ht ht "$PY" "$W/work.py"
    echo
    echo "python3 ($("$PY" -V 2>&1), PYTHONMALLOC=malloc) dict/list workload: $PYEV events in our"
    echo "trace; median of $RUNS runs; dwarf stacks (the interpreter has no frame pointers)."
    echo
    echo "| mode | wall ms | slowdown | file bytes |"
    echo "|---|---:|---:|---:|"
    pyrow() {
        awk -v ns="$(cat "$W/$1.ns")" -v base="$(cat "$W/py.ns")" -v by="$(cat "$W/$1.bytes")" \
            -v label="$2" 'BEGIN { b = by > 0 ? by : "-"; printf "| %s | %.0f | %.2fx | %s |\n", label, ns / 1e6, ns / base, b }'
    }
    pyrow py "uninstrumented"
    pyrow py_dwarf "poolscope record --stacks dwarf"
    [ $HAVE_HT = 1 ] && pyrow py_ht "heaptrack"
fi
exit 0
