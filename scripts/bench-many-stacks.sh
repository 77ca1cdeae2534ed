#!/bin/sh
# bench-many-stacks.sh — reading back a trace with many distinct stacks
# (issue 31's "many distinct stacks" row), against heaptrack_print on the
# same program, in one run.
#
#   BUILD=build sh scripts/bench-many-stacks.sh > section.md   (make bench runs it)
#   ROUNDS=1 STEPS=2 sh scripts/bench-many-stacks.sh           a quick look
#
# The program: bench/python/torch_infer.py (PyTorch CPU inference, STEPS
# steps, default 10; BENCH_QUICK=1: 2), under the first python3 that
# imports torch (Debian's python3-torch is /usr/bin/python3's). Recorded
# once by `poolscope record` (its defaults: dwarf stacks with the Python
# frames spliced in) and once by heaptrack. Then ROUNDS rounds (default 3;
# quick: 1), each running every tool once in an order rotated by one each
# round, so a loaded machine weighs on all alike: `heaptrack_print -f FILE`
# (its default output), `heaptrack_print -f FILE -F OUT` (the folded
# stacks, its default output too: heaptrack has no folded-only mode), and
# on our trace `poolscope report`, `export --format folded`, `sql`,
# `replay` and `html`. Outputs are thrown away after each run.
#
# Figures (bench/timerss.c, wait4): wall-clock seconds, median over the
# rounds with (min-max), and its ratio to heaptrack_print's median (the
# folded row: to heaptrack_print -F's); CPU s (user+sys), median; peak RSS,
# the largest over the rounds. Then the bytes: both traces, the database.
# Progress on stderr when it is a terminal; the markdown section on stdout.
# Without heaptrack or torch the section says so and measures nothing.
set -u
BUILD=${BUILD:-build}
ROOT=$(pwd)
. "$ROOT/scripts/benchlib.sh"
case $BUILD in /*) B=$BUILD ;; *) B=$ROOT/$BUILD ;; esac
PS=$B/bin/poolscope
quick=0; [ "${BENCH_QUICK:-0}" = 1 ] && quick=1
ROUNDS=${ROUNDS:-$([ $quick = 1 ] && echo 1 || echo 3)}
STEPS=${STEPS:-$([ $quick = 1 ] && echo 2 || echo 10)}
[ "$ROUNDS" -ge 1 ] 2>/dev/null || { echo "bench-many-stacks: ROUNDS must be >= 1" >&2; exit 2; }
[ -x "$PS" ] || { echo "bench-many-stacks: $PS missing: run make first" >&2; exit 2; }

echo "## many stacks"
echo
PY=
for p in /usr/bin/python3 $(command -v python3 2>/dev/null); do
    "$p" -c 'import torch' >/dev/null 2>&1 && { PY=$p; break; }
done
if [ -z "$PY" ] || ! command -v heaptrack >/dev/null 2>&1 || ! command -v heaptrack_print >/dev/null 2>&1; then
    echo "Not measured: needs a python3 that imports torch (apt-get install python3-torch) and heaptrack (apt-get install heaptrack)."
    exit 0
fi
W=$(mktemp -d "${TMPDIR:-/tmp}/bench-many-stacks.XXXXXX") || exit 2
trap 'rm -rf "$W"' EXIT
trap 'exit 130' INT TERM HUP
${CC:-cc} -std=c11 -D_GNU_SOURCE -O2 -Wall -Wextra -o "$W/timerss" "$ROOT/bench/timerss.c" ||
    { echo "bench-many-stacks: cannot build bench/timerss.c" >&2; exit 2; }
progress() { [ -t 2 ] && echo "bench-many-stacks: $*" >&2; return 0; }

progress "recording torch_infer.py $STEPS steps (poolscope, then heaptrack)"
"$PS" record -o "$W/t.pst" -- "$PY" "$ROOT/bench/python/torch_infer.py" "$STEPS" >"$W/rec.out" 2>"$W/rec.err" ||
    { echo "bench-many-stacks: poolscope record failed: $(tail -n 3 "$W/rec.err")" >&2; exit 1; }
heaptrack -o "$W/ht" "$PY" "$ROOT/bench/python/torch_infer.py" "$STEPS" >"$W/ht.out" 2>&1
HT=$(ls "$W"/ht.*zst "$W"/ht.*gz 2>/dev/null | head -1)
[ -n "$HT" ] || { echo "bench-many-stacks: heaptrack wrote no file: $(tail -n 3 "$W/ht.out")" >&2; exit 1; }
"$PS" report --json "$W/t.pst" >"$W/t.json" 2>/dev/null
ev=$(sed -n 's/^ *"events": *\([0-9][0-9]*\).*/\1/p' "$W/t.json" | head -1)
st=$("$PS" report "$W/t.pst" 2>/dev/null | sed -n 's/^ *stacks *\([0-9,]*\) distinct.*/\1/p' | head -1)

one_run() {
    t=$W/$1.time
    case $1 in
    ht)     "$W/timerss" -o "$t" heaptrack_print -f "$HT" >/dev/null 2>"$W/err.$1" ;;
    htF)    "$W/timerss" -o "$t" heaptrack_print -f "$HT" -F "$W/ht.folded" >/dev/null 2>"$W/err.$1"
            rm -f "$W/ht.folded" ;;
    report) "$W/timerss" -o "$t" "$PS" report "$W/t.pst" >/dev/null 2>"$W/err.$1" ;;
    folded) "$W/timerss" -o "$t" "$PS" export --format folded -o "$W/t.folded" "$W/t.pst" >/dev/null 2>"$W/err.$1"
            rm -f "$W/t.folded" ;;
    sql)    rm -f "$W/t.db"
            "$W/timerss" -o "$t" "$PS" sql "$W/t.pst" -o "$W/t.db" --quiet >/dev/null 2>"$W/err.$1"
            [ -f "$W/t.db" ] && wc -c <"$W/t.db" >"$W/db.bytes"
            rm -f "$W/t.db" ;;
    replay) "$W/timerss" -o "$t" "$PS" replay "$W/t.pst" >/dev/null 2>"$W/err.$1" ;;
    html)   "$W/timerss" -o "$t" "$PS" html -o "$W/t.html" "$W/t.pst" >/dev/null 2>"$W/err.$1"
            rm -f "$W/t.html" ;;
    esac
    s=$?
    [ $s = 0 ] || echo "bench-many-stacks: $1 exited $s: $(head -c 300 "$W/err.$1")" >&2
}

TOOLS="ht htF report folded sql replay html"
t_start=$(date +%s)
run_rounds "$ROUNDS" "" $TOOLS
total=$(($(date +%s) - t_start))
ht_med=$(stats "$W/ht.time" | awk '{ print $1 }')
htF_med=$(stats "$W/htF.time" | awk '{ print $1 }')
htv=$(heaptrack --version 2>/dev/null | awk '{ print $2 }')
tv=$("$PY" -c 'import torch; print(torch.__version__)' 2>/dev/null)
[ "$ROUNDS" = 1 ] && how="1 run (no median)" || how="$ROUNDS rounds, medians with (min-max)"
echo "PyTorch CPU inference (\`$PY bench/python/torch_infer.py $STEPS\`, torch $tv): our trace has ${ev:-?} events and ${st:-?} distinct stacks (dwarf, Python frames spliced in); heaptrack ${htv:-?} recorded the same program. $how; each round runs every tool once in an order rotated every round; wall-clock seconds and peak RSS from wait4 (bench/timerss.c); the ratio is to heaptrack_print's median (the folded row: to \`heaptrack_print -F\`'s, which also prints its default report). \`sh scripts/bench-many-stacks.sh\`, $total s of rounds."
echo
echo "| tool | wall s | / heaptrack_print | CPU s | peak RSS MiB |"
echo "|---|---:|---:|---:|---:|"
for tool in $TOOLS; do
    case $tool in
    ht) l="heaptrack_print"; base=$ht_med ;;
    htF) l="heaptrack_print -F (folded)"; base=$ht_med ;;
    report) l="poolscope report"; base=$ht_med ;;
    folded) l="poolscope export --format folded"; base=$htF_med ;;
    *) l="poolscope $tool"; base=$ht_med ;;
    esac
    stats "$W/$tool.time" | awk -v l="$l" -v b="$base" -v n="$ROUNDS" '{
        if ($1 == "-") { printf "| %s | failed | | | |\n", l; next }
        fail = $6 != 0 ? sprintf(" (a run exited %d)", $6) : ""
        w = n == 1 ? sprintf("%.2f", $1) : sprintf("%.2f (%.2f-%.2f)", $1, $2, $3)
        printf "| %s | %s%s | %.2fx | %.2f | %.1f |\n", l, w, fail, (b > 0 ? $1 / b : 0), $4, $5 / 1024 }'
done
pb=$(wc -c <"$W/t.pst"); hb=$(wc -c <"$HT"); db=$(cat "$W/db.bytes" 2>/dev/null || echo 0)
echo
awk -v pb="$pb" -v hb="$hb" -v db="$db" 'BEGIN {
    printf "Bytes: our trace %.2f MB, heaptrack'"'"'s %.2f MB (%.2fx); the sql database %.1f MB = %.1fx our trace.\n",
           pb / 1e6, hb / 1e6, pb / hb, db / 1e6, db / pb }'
exit 0
