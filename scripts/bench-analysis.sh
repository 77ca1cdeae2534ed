#!/bin/sh
# bench-analysis.sh — what reading a trace back costs, against heaptrack_print
# on the same program, in one run (issue 15's analysis rows).
#
#   BUILD=build sh scripts/bench-analysis.sh > section.md      (make bench runs it)
#   SIZES=1 ROUNDS=3 sh scripts/bench-analysis.sh               a quick run
#   ROUNDS_BIG=3 sh scripts/bench-analysis.sh                   medians at 200 M too
#
# The program: tests/progs/stress with 4 threads (`-t 4 -n N`: N operations
# per thread, about one heap call each, so 4N events plus ~1,300 of cleanup
# and markers), 512 private slots per thread and a fifth of the frees
# handed off through shared slots, so many blocks are freed by another
# thread than the one that allocated them. For each size in SIZES (millions
# of events; default "10 50 200", BENCH_QUICK=1 "1") it is recorded once by
# `poolscope record --stacks fp` (the program has frame pointers) and once
# by heaptrack (its own libunwind unwinder). Then ROUNDS rounds (default 3)
# each run, in an order rotated by one every round so that a loaded machine
# weighs on all alike (the largest of two or more SIZES gets ROUNDS_BIG
# rounds, default 1: at 200 M one round of every tool takes 12 minutes or
# more on a 2-core machine; a size measured once says "1 run" in its wall
# cell and in the text, never "median"): `heaptrack_print` on heaptrack's file (its default
# output: peaks, allocators, temporary allocations; to /dev/null), and on
# our trace `poolscope report`, `poolscope replay` (no --policy: every
# default policy), `poolscope sql -o DB` and `poolscope export --format
# folded`. Each tool's output is thrown away after each run.
#
# Figures, from bench/timerss.c (wait4): wall-clock seconds, median over the
# rounds with (min-max) — the headline; M events per wall second (our
# trace's event count / median wall); CPU seconds (user+sys, the tool and
# every process it waited for), median; peak RSS, the largest over the
# rounds. And the bytes: both trace files, the SQLite database and its
# ratio to our trace.
#
# Disk: a 200 M-event trace is ~1 GB and its database ~3 GB; everything
# lives in one temporary directory (TMPDIR), removed on exit and before the
# next size. Progress goes to stderr when it is a terminal; the markdown
# section to stdout. A missing heaptrack leaves its rows out, saying so.
set -u
BUILD=${BUILD:-build}
ROOT=$(pwd)
. "$ROOT/scripts/benchlib.sh"
case $BUILD in /*) B=$BUILD ;; *) B=$ROOT/$BUILD ;; esac
PS=$B/bin/poolscope
STRESS=$B/tests/progs/stress
if [ -z "${SIZES:-}" ]; then
    SIZES="10 50 200"; [ "${BENCH_QUICK:-0}" = 1 ] && SIZES=1
fi
ROUNDS=${ROUNDS:-3}
ROUNDS_BIG=${ROUNDS_BIG:-1}
# the largest size, when there are several: measured ROUNDS_BIG times
BIG=$(echo $SIZES | awk 'NF > 1 { m = $1; for (i = 2; i <= NF; i++) if ($i + 0 > m + 0) m = $i; print m }')
rounds_for() { if [ "$1" = "$BIG" ]; then echo "$ROUNDS_BIG"; else echo "$ROUNDS"; fi; }
for v in "$ROUNDS" "$ROUNDS_BIG"; do
    [ "$v" -ge 1 ] 2>/dev/null || { echo "bench-analysis: ROUNDS and ROUNDS_BIG must be >= 1" >&2; exit 2; }
done
THREADS=4
for f in "$PS" "$STRESS"; do
    [ -x "$f" ] || { echo "bench-analysis: $f missing: run make first" >&2; exit 2; }
done
W=$(mktemp -d "${TMPDIR:-/tmp}/bench-analysis.XXXXXX") || exit 2
trap 'rm -rf "$W"' EXIT
trap 'exit 130' INT TERM HUP
${CC:-cc} -std=c11 -D_GNU_SOURCE -O2 -Wall -Wextra -o "$W/timerss" "$ROOT/bench/timerss.c" ||
    { echo "bench-analysis: cannot build bench/timerss.c" >&2; exit 2; }
HAVE_HT=1
command -v heaptrack >/dev/null 2>&1 && command -v heaptrack_print >/dev/null 2>&1 || HAVE_HT=0

progress() { [ -t 2 ] && echo "bench-analysis: $*" >&2; return 0; }
mb() { awk -v b="$1" 'BEGIN { printf "%.1f", b / 1048576 }'; }

# one_run TOOL: one timed run of TOOL on this size's traces
one_run() {
    t=$W/$1.time
    case $1 in
    heaptrack_print) "$W/timerss" -o "$t" heaptrack_print -f "$HT" >/dev/null 2>"$W/err.$1" ;;
    report) "$W/timerss" -o "$t" "$PS" report "$W/t.pst" >/dev/null 2>"$W/err.$1" ;;
    replay) "$W/timerss" -o "$t" "$PS" replay "$W/t.pst" >/dev/null 2>"$W/err.$1" ;;
    sql)    rm -f "$W/t.db"
            "$W/timerss" -o "$t" "$PS" sql "$W/t.pst" -o "$W/t.db" --quiet >/dev/null 2>"$W/err.$1"
            [ -f "$W/t.db" ] && wc -c <"$W/t.db" >"$W/db.bytes"
            rm -f "$W/t.db" ;;
    export) "$W/timerss" -o "$t" "$PS" export "$W/t.pst" --format folded -o "$W/t.folded" >/dev/null 2>"$W/err.$1"
            rm -f "$W/t.folded" ;;
    esac
    s=$?
    [ $s = 0 ] || echo "bench-analysis: $1 exited $s: $(head -c 300 "$W/err.$1")" >&2
}

TOOLS="report replay sql export"
[ $HAVE_HT = 1 ] && TOOLS="heaptrack_print $TOOLS"
: >"$W/rows"; : >"$W/bytes"
t_start=$(date +%s)
for M in $SIZES; do
    n=$(awk -v m="$M" 'BEGIN { printf "%d", m * 1e6 / 4 }')
    rm -f "$W"/t.* "$W"/ht* "$W"/*.time "$W/db.bytes"
    progress "$M M events: recording (stress -t $THREADS -n $n)"
    "$W/timerss" -o "$W/rec_ps.time" "$PS" record --stacks fp -o "$W/t.pst" -- \
        "$STRESS" -t $THREADS -n "$n" >"$W/stress.out" 2>"$W/rec.err"
    rs=$?
    if [ $rs != 0 ] || [ ! -s "$W/t.pst" ]; then
        echo "bench-analysis: poolscope record failed ($rs): $(tail -n 3 "$W/rec.err")" >&2
        echo "| $M M | record failed | | | | | | |" >>"$W/bytes"
        continue
    fi
    ev=$(sed -n 's/.*: \([0-9][0-9]*\) events.*/\1/p' "$W/rec.err" | awk '{ s += $1 } END { print s + 0 }')
    [ "$ev" -gt 0 ] 2>/dev/null || ev=$(awk -F= '/^(malloc|calloc|realloc|free)=/ { s += $2 } END { print s + 0 }' "$W/stress.out")
    pb=$(wc -c <"$W/t.pst")
    HT= hb=
    if [ $HAVE_HT = 1 ]; then
        "$W/timerss" -o "$W/rec_ht.time" heaptrack -o "$W/ht" "$STRESS" -t $THREADS -n "$n" >"$W/ht.out" 2>&1
        HT=$(ls "$W"/ht.*zst "$W"/ht.*gz 2>/dev/null | head -1)
        if [ -n "$HT" ]; then hb=$(wc -c <"$HT")
        else echo "bench-analysis: heaptrack wrote no file: $(tail -n 3 "$W/ht.out")" >&2; fi
    fi
    tools=$TOOLS
    [ -n "$HT" ] || tools=$(echo "$TOOLS" | sed 's/heaptrack_print //')
    rounds=$(rounds_for "$M")
    run_rounds "$rounds" "$M M events: " $tools
    for tool in $tools; do
        case $tool in
        heaptrack_print) label="heaptrack_print" ;;
        export) label="poolscope export folded" ;;
        *) label="poolscope $tool" ;;
        esac
        stats "$W/$tool.time" | awk -v l="$label" -v m="$M" -v ev="$ev" -v n="$rounds" '{
            if ($1 == "-") { printf "| %s | %s M | failed | | | | |\n", l, m; next }
            fail = $6 != 0 ? sprintf(" (a run exited %d)", $6) : ""
            # one run has no median and no spread: say so in the cell
            w = n == 1 ? sprintf("%.2f (1 run)", $1) : sprintf("%.2f (%.2f-%.2f)", $1, $2, $3)
            printf "| %s | %s M | %s%s | %.2f | %.2f | %.2f | %.1f |\n",
                   l, m, w, fail, ev / $1 / 1e6, $4, ev / $4 / 1e6, $5 / 1024 }' >>"$W/rows"
    done
    rec_ps=$(awk '{ printf "%.1f", $1 }' "$W/rec_ps.time")
    db=$(cat "$W/db.bytes" 2>/dev/null || echo 0)
    awk -v m="$M" -v ev="$ev" -v pb="$pb" -v hb="$hb" -v db="$db" -v rps="$rec_ps" \
        -v rht="$([ -f "$W/rec_ht.time" ] && awk '{ printf "%.1f", $1 }' "$W/rec_ht.time")" 'BEGIN {
        h = hb != "" ? sprintf("%.1f", hb / 1048576) : "-"
        ratio = hb != "" ? sprintf("%.2f", pb / hb) : "-"
        d = db > 0 ? sprintf("%.1f", db / 1048576) : "-"
        dr = db > 0 ? sprintf("%.2f", db / pb) : "-"
        dpe = db > 0 ? sprintf("%.1f", db / ev) : "-"
        printf "| %s M | %d | %.1f | %.2f | %s | %s | %s | %s | %s | %s | %s |\n",
               m, ev, pb / 1048576, pb / ev, h, ratio, d, dr, dpe, rps, rht == "" ? "-" : rht }' >>"$W/bytes"
    # the next size starts with an empty directory: ~1 GB per 200 M events
    rm -f "$W"/t.* "$W"/ht*
done
total=$(($(date +%s) - t_start))

if [ -n "$BIG" ] && [ "$ROUNDS_BIG" != "$ROUNDS" ]; then
    [ "$ROUNDS_BIG" = 1 ] && rb="1 run" || rb="$ROUNDS_BIG rounds"
    rounds_text="$ROUNDS rounds ($rb at $BIG M)"
else
    rounds_text="$ROUNDS rounds"
fi
[ "$rounds_text" = "1 rounds" ] && rounds_text="1 run"
htv=$(heaptrack --version 2>/dev/null | awk '{ print $2 }')
echo "## analysis"
echo
echo "Reading a trace back, against heaptrack_print on the same program: tests/progs/stress, $THREADS threads (\`-t $THREADS -n N\`, ~4N events: malloc/calloc/realloc/free over 512 slots per thread, a fifth of the frees handed off through shared slots, so many blocks are freed by another thread), $(echo $SIZES | sed 's/ / \/ /g') M events. Recorded once each by \`poolscope record --stacks fp\` (the program keeps frame pointers) and by heaptrack ${htv:-(missing)} (its own unwinder). Then $rounds_text, each running every tool once in an order rotated every round: \`heaptrack_print -f FILE\` (its default output: peaks, allocators, temporary), and on our trace \`poolscope report\`, \`poolscope replay\` (no --policy: every default policy), \`poolscope sql -o DB\`, \`poolscope export --format folded\`; outputs discarded. Wall-clock seconds are medians over the rounds with (min-max), or the one run's where a size had 1 run; M events/s divide our trace's event count by that wall time; CPU s is user+sys of the tool and the processes it waited for (median, or the one run's); peak RSS is the largest over the rounds (wait4, bench/timerss.c). This script took ${total} s."
echo
echo "| tool | events | wall s, median (min-max) or 1 run | M events/s | CPU s | M events/CPU s | peak RSS MiB |"
echo "|---|---:|---:|---:|---:|---:|---:|"
cat "$W/rows"
[ $HAVE_HT = 1 ] || echo "| heaptrack_print | (heaptrack not installed: apt-get install heaptrack) | | | | | |"
echo
echo "Trace and database bytes of the same runs (one recording each; record s is that run's wall time, the whole command)."
echo
echo "| size | events | poolscope trace MB | bytes/event | heaptrack file MB | poolscope / heaptrack | sql DB MB | DB / trace | DB bytes/event | poolscope record s | heaptrack record s |"
echo "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"
cat "$W/bytes"
exit 0
