#!/bin/sh
# bench-python.sh — what recording a Python program costs (issue 26's
# benchmark): the Python frames in every stack against the same record
# without them, and against Python's own tracers, in one run.
#
#   BUILD=build sh scripts/bench-python.sh > section.md    (make bench runs it)
#   BUILD=build sh scripts/bench.sh python                  this section of bench/results.md alone
#   ROUNDS=3 WORKLOADS=pure sh scripts/bench-python.sh      fewer rounds, one workload
#   BUSY=3 sh scripts/bench.sh python                       the same beside 3 busy loops
#                                                           (its own section, "python, 3 busy loops beside")
#
# Workloads (bench/python/): pure.py, pure Python making and dropping many
# small objects in nested calls (PURE_ARGS, default its own: 1000 rounds),
# and torch_infer.py, a small transformer-style model's CPU inference under
# torch.inference_mode, one intra-op thread (TORCH_ARGS, default 10 steps;
# skipped, saying so, when the interpreter cannot import torch). The
# interpreter is PYTHON (default Debian's /usr/bin/python3, 3.11, whose
# python3-torch is the one the issue names).
#
# Runs, side by side: every round runs each of them once, in this order
# (A B C D A B C D ...), so a noisy machine weighs on all alike:
#   untraced            PYTHON WORKLOAD
#   frames on           poolscope record -o T -- PYTHON WORKLOAD (the
#                       defaults: Python frames on, --stacks dwarf, depth
#                       128 in a Python process), the whole command
#   frames off          the same with --python-frames off
#   tracemalloc         PYTHONTRACEMALLOC=TRACEMALLOC_FRAMES (default 1:
#                       its cheapest setting) PYTHON WORKLOAD, untraced by us
#   memray              memray run --native -o F WORKLOAD, when PYTHON -m
#                       memray or a memray command works (else its row
#                       says it is not available)
# ROUNDS rounds (default 7; BENCH_QUICK=1: 1 round of short workloads).
# Figures from bench/timerss.c (wait4): wall-clock seconds, median over the
# rounds with (min-max) — the headline; best of the rounds beside it; ratios
# of medians to the untraced median, and frames on over frames off; CPU
# seconds (user+sys) median; peak RSS the largest over the rounds. Trace
# bytes: the first round's file; events: `poolscope report --json` of that
# file ("events"). Every run's output must be the untraced run's (the
# workloads print a checksum): a run that differs or fails is counted and
# said under the table.
#
# BUSY=N starts N busy loops (`while :; do :; done`, killed on exit) before
# the first round, to see the figures on a loaded machine; the section's
# heading says so, so that it does not replace the quiet one.
# Progress on stderr, the markdown section on stdout. No figure here is
# asserted anywhere: the goals (frames on <= 1.3x frames off, and below
# tracemalloc) are reported, met or missed.
set -u
BUILD=${BUILD:-build}
ROOT=$(pwd)
case $BUILD in /*) B=$BUILD ;; *) B=$ROOT/$BUILD ;; esac
PS=$B/bin/poolscope
PY=${PYTHON:-/usr/bin/python3}
[ -x "$PY" ] || PY=$(command -v python3 || true)
ROUNDS=${ROUNDS:-7}
PURE_ARGS=${PURE_ARGS:-}
TORCH_ARGS=${TORCH_ARGS:-}
if [ "${BENCH_QUICK:-0}" = 1 ]; then
    ROUNDS=1; PURE_ARGS=${PURE_ARGS:-50}; TORCH_ARGS=${TORCH_ARGS:-1}
fi
WORKLOADS=${WORKLOADS:-pure torch}
TM=${TRACEMALLOC_FRAMES:-1}
BUSY=${BUSY:-0}
[ "$ROUNDS" -ge 1 ] 2>/dev/null || { echo "bench-python: ROUNDS must be >= 1" >&2; exit 2; }
[ "$BUSY" -ge 0 ] 2>/dev/null || { echo "bench-python: BUSY must be a number" >&2; exit 2; }
[ -x "$PS" ] && [ -f "$B/lib/libpoolscope-preload.so" ] ||
    { echo "bench-python: $PS or its preload library missing: run make first" >&2; exit 2; }
[ -n "$PY" ] || { echo "bench-python: no python3" >&2; exit 2; }
W=$(mktemp -d "${TMPDIR:-/tmp}/bench-python.XXXXXX") || exit 2
busy=""
cleanup() { for p in $busy; do kill "$p" 2>/dev/null; done; rm -rf "$W"; }
trap cleanup EXIT
trap 'exit 130' INT TERM HUP
${CC:-cc} -std=c11 -D_GNU_SOURCE -O2 -Wall -Wextra -o "$W/timerss" "$ROOT/bench/timerss.c" ||
    { echo "bench-python: cannot build bench/timerss.c" >&2; exit 2; }
progress() { echo "bench-python: $*" >&2; }

# memray, if this machine has it: as a module of PYTHON first (the same
# interpreter as every other row), else a memray command (its own)
MEMRAY=""; mrv=""
if "$PY" -m memray --version >/dev/null 2>&1; then
    MEMRAY="$PY -m memray"; mrv=$("$PY" -m memray --version 2>&1 | head -n1)
elif command -v memray >/dev/null 2>&1 && memray --version >/dev/null 2>&1; then
    MEMRAY=memray; mrv=$(memray --version 2>&1 | head -n1)
fi
[ -n "$MEMRAY" ] || progress "no memray (neither \`$PY -m memray\` nor a memray command): its rows say so"
HAVE_TORCH=0
"$PY" -c 'import torch' >/dev/null 2>&1 && HAVE_TORCH=1
MODES="plain on off tm"; [ -n "$MEMRAY" ] && MODES="$MODES memray"

# one NAME MODE ROUND SCRIPT [ARGS...]: one timed run, appended to
# $W/NAME.MODE.time; the first round's trace is kept as $W/NAME.MODE.first
one() {
    n=$1 m=$2 r=$3; shift 3
    rm -rf "$W/run"; mkdir "$W/run"
    t=$W/$n.$m.time
    case $m in
    plain)  "$W/timerss" -o "$t" "$PY" "$@" >"$W/run/out" 2>"$W/run/err" ;;
    on)     "$W/timerss" -o "$t" "$PS" record -o "$W/run/t.pst" -- "$PY" "$@" >"$W/run/out" 2>"$W/run/err" ;;
    off)    "$W/timerss" -o "$t" "$PS" record -o "$W/run/t.pst" --python-frames off -- "$PY" "$@" \
                >"$W/run/out" 2>"$W/run/err" ;;
    tm)     PYTHONTRACEMALLOC=$TM "$W/timerss" -o "$t" "$PY" "$@" >"$W/run/out" 2>"$W/run/err" ;;
    memray) "$W/timerss" -o "$t" $MEMRAY run --native -q -o "$W/run/t.pst" "$@" >"$W/run/out" 2>"$W/run/err" ;;
    esac
    st=$(tail -n1 "$t" | awk '{ print $5 }')
    if [ "$m" = plain ] && [ "$r" = 1 ]; then cp "$W/run/out" "$W/$n.expect"; fi
    if [ "$st" != 0 ] || ! cmp -s "$W/run/out" "$W/$n.expect"; then
        echo "$m round $r: status $st, $(tail -n1 "$W/run/out" 2>/dev/null) $(tail -n1 "$W/run/err" 2>/dev/null)" >>"$W/$n.bad"
    fi
    if [ "$r" = 1 ] && [ -f "$W/run/t.pst" ]; then mv "$W/run/t.pst" "$W/$n.$m.first"; fi
}

# stats FILE: "median_wall min max best median_cpu max_rss_kib" over the
# lines timerss appended to FILE
stats() {
    awk 'function med(a, n,   i, j, t) {
             for (i = 1; i <= n; i++) for (j = i + 1; j <= n; j++) if (a[j] < a[i]) { t = a[i]; a[i] = a[j]; a[j] = t }
             return n % 2 ? a[(n + 1) / 2] : (a[n / 2] + a[n / 2 + 1]) / 2 }
         { w[NR] = $1; c[NR] = $2 + $3; if ($4 > rss) rss = $4 }
         END { if (!NR) { print "- - - - - -"; exit }
               mw = med(w, NR); mc = med(c, NR)
               printf "%.3f %.3f %.3f %.3f %.2f %d\n", mw, w[1], w[NR], w[1], mc, rss }' "$1"
}

# bench NAME SCRIPT [ARGS...]: ROUNDS rounds of every mode, then the
# events of the first round's traces
bench() {
    n=$1; shift
    r=1
    while [ "$r" -le "$ROUNDS" ]; do
        for m in $MODES; do one "$n" "$m" "$r" "$@"; done
        progress "$n round $r/$ROUNDS ($(($(date +%s) - start)) s so far)"
        r=$((r + 1))
    done
    for m in on off; do
        [ -f "$W/$n.$m.first" ] || continue
        "$PS" report --json "$W/$n.$m.first" 2>/dev/null |
            "$PY" -c 'import json, sys; print(json.load(sys.stdin)["events"])' >"$W/$n.$m.events" 2>/dev/null ||
            echo - >"$W/$n.$m.events"
    done
    # torch: how many of those events the import and the model's set-up
    # make alone (0 inference steps), once, frames on
    if [ "$n" = torch ]; then
        rm -f "$W/setup.pst"
        "$PS" record -o "$W/setup.pst" -- "$PY" "$1" 0 >/dev/null 2>&1 &&
            "$PS" report --json "$W/setup.pst" 2>/dev/null |
            "$PY" -c 'import json, sys; print(json.load(sys.stdin)["events"])' >"$W/torch.setup.events" 2>/dev/null ||
            rm -f "$W/torch.setup.events"
        rm -f "$W/setup.pst"
    fi
    # the per-round ratio frames on / frames off (round i of each)
    paste -d' ' "$W/$n.on.time" "$W/$n.off.time" | awk '{ print $1 / $6 }' >"$W/$n.pair"
}

start=$(date +%s)
i=0
while [ "$i" -lt "$BUSY" ]; do
    sh -c 'while :; do :; done' &
    busy="$busy $!"; i=$((i + 1))
done
[ "$BUSY" -gt 0 ] && progress "$BUSY busy loops running:$busy"
ran=""
for wl in $WORKLOADS; do
    case $wl in
    pure)  bench pure "$ROOT/bench/python/pure.py" $PURE_ARGS; ran="$ran pure" ;;
    torch) if [ $HAVE_TORCH = 1 ]; then bench torch "$ROOT/bench/python/torch_infer.py" $TORCH_ARGS; ran="$ran torch"
           else progress "$PY cannot import torch (apt-get install python3-torch): torch skipped"; fi ;;
    *)     progress "unknown workload $wl (pure, torch)"; exit 2 ;;
    esac
done
for p in $busy; do kill "$p" 2>/dev/null; done; busy=""
total=$(($(date +%s) - start))

label() {
    case $1 in
    plain) echo "untraced" ;;
    on) echo "\`poolscope record\` (Python frames on: the default)" ;;
    off) echo "\`poolscope record --python-frames off\`" ;;
    tm) echo "tracemalloc (\`PYTHONTRACEMALLOC=$TM\`)" ;;
    memray) echo "memray ${mrv#* } \`run --native\`" ;;
    esac
}
wname() { case $1 in pure) echo "pure Python (pure.py${PURE_ARGS:+ $PURE_ARGS})" ;; torch) echo "PyTorch CPU inference (torch_infer.py${TORCH_ARGS:+ $TORCH_ARGS})" ;; esac; }

if [ "$BUSY" -gt 0 ]; then echo "## python, $BUSY busy loops beside"; else echo "## python"; fi
echo
pyv=$("$PY" -V 2>&1); tv=""
[ $HAVE_TORCH = 1 ] && tv=", torch $("$PY" -c 'import torch; print(torch.__version__)' 2>/dev/null)"
echo "What recording a Python program costs (issue 26): \`$PY\` ($pyv$tv), the workloads of bench/python/ (pure.py: small objects made and dropped in nested calls; torch_infer.py: a 2-block transformer-style model's CPU inference, one intra-op thread). $ROUNDS rounds; each runs every row once, in the table's order, so the rows share the machine's noise$( [ "$BUSY" -gt 0 ] && echo ", with $BUSY busy loops running beside on the $(nproc) cores"). Wall-clock seconds from wait4 (bench/timerss.c): the median over the rounds with (min-max), and the best; ratios are of medians. The poolscope rows are the whole \`poolscope record\` command with its defaults (\`--stacks dwarf\`, depth 128 in a Python process); CPU s is user+sys, median; peak RSS the largest of the rounds. Trace bytes are the first round's file, events its \`poolscope report --json\` count. \`sh scripts/bench-python.sh\`, $total s."
echo
echo "| workload | run | wall s, median (min-max) | best of $ROUNDS | vs untraced | vs frames off | CPU s | peak RSS MiB | trace MB | events | bytes/event |"
echo "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|"
for n in $ran; do
    base=$(stats "$W/$n.plain.time" | awk '{ print $1 }')
    off=$(stats "$W/$n.off.time" | awk '{ print $1 }')
    for m in plain on off tm memray; do
        if [ "$m" = memray ] && [ -z "$MEMRAY" ]; then
            echo "| $(wname $n) | memray \`run --native\` | not available on this machine (no \`$PY -m memray\`, no memray command) | | | | | | | | |"
            continue
        fi
        by=-; ev=-
        [ -f "$W/$n.$m.first" ] && by=$(wc -c <"$W/$n.$m.first")
        [ -f "$W/$n.$m.events" ] && ev=$(cat "$W/$n.$m.events")
        stats "$W/$n.$m.time" | awk -v w="$(wname $n)" -v l="$(label $m)" -v m="$m" -v base="$base" -v off="$off" \
            -v by="$by" -v ev="$ev" '{
            vo = m == "on" && off > 0 ? sprintf("%.2fx", $1 / off) : (m == "off" ? "1.00x" : "-")
            mb = by == "-" ? "-" : sprintf("%.1f", by / 1e6)
            bpe = (by != "-" && ev != "-" && ev > 0) ? sprintf("%.2f", by / ev) : "-"
            printf "| %s | %s | %.2f (%.2f-%.2f) | %.2f | %.2fx | %s | %.2f | %.1f | %s | %s | %s |\n",
                w, l, $1, $2, $3, $4, $1 / base, vo, $5, $6 / 1024, mb, ev, bpe }'
    done
done
echo
echo "Against the issue's goals (ratios of the medians above, to 3 decimals as the verdict reads them; per round: frames on over frames off of the same round, median (min-max)):"
echo
echo "| workload | frames on / frames off | per round | goal <= 1.3x | frames on / tracemalloc | goal < 1x |"
echo "|---|---:|---:|---|---:|---|"
for n in $ran; do
    on=$(stats "$W/$n.on.time" | awk '{ print $1 }')
    off=$(stats "$W/$n.off.time" | awk '{ print $1 }')
    tm=$(stats "$W/$n.tm.time" | awk '{ print $1 }')
    pr=$(awk 'function med(a, n,   i, j, t) {
             for (i = 1; i <= n; i++) for (j = i + 1; j <= n; j++) if (a[j] < a[i]) { t = a[i]; a[i] = a[j]; a[j] = t }
             return n % 2 ? a[(n + 1) / 2] : (a[n / 2] + a[n / 2 + 1]) / 2 }
         { v[NR] = $1 } END { m = med(v, NR); printf "%.2fx (%.2f-%.2f)", m, v[1], v[NR] }' "$W/$n.pair")
    awk -v w="$(wname $n)" -v on="$on" -v off="$off" -v tm="$tm" -v pr="$pr" 'BEGIN {
        a = on / off; b = on / tm
        printf "| %s | %.3fx | %s | %s | %.3fx | %s |\n", w, a, pr, a <= 1.3 ? "met" : "missed", b, b < 1 ? "met" : "missed" }'
done
if [ -s "$W/torch.setup.events" ] && [ -s "$W/torch.on.events" ]; then
    echo
    awk -v s="$(cat "$W/torch.setup.events")" -v a="$(cat "$W/torch.on.events")" 'BEGIN {
        printf "Of the torch run'"'"'s %d events (frames on), %d (%.1f%%) come from `import torch` and the model'"'"'s set-up alone (the same script with 0 inference steps, recorded once): the cost of tracing it is mostly the import'"'"'s.\n", a, s, 100 * s / a }'
fi
bad=0
for n in $ran; do
    [ -s "$W/$n.bad" ] || continue
    bad=1
    echo
    echo "Runs of $(wname $n) that failed or printed another result than the untraced run (their times are in the table all the same):"
    echo
    sed 's/^/- /' "$W/$n.bad"
done
[ $bad = 0 ] && { echo; echo "Every run printed the untraced run's result."; }
exit 0
