#!/bin/sh
# bench-trace-size.sh — trace bytes of poolscope (format 1.5: recent-address
# coding, zstd chunks) and heaptrack (its .zst) on the same programs, each
# recorded by both in one run of this script, with dwarf stacks; and what
# reading the trace back costs (`poolscope report`, seconds).
#
#   BUILD=build sh scripts/bench-trace-size.sh      (make bench runs it)
#
# Programs: (a) python3 filling a dict of 2,000,000 str keys with
# PYTHONMALLOC=malloc (every object a malloc call: ~12 M events); (b) a
# PyTorch CPU forward loop (Debian python3-torch: 3 Linear layers, batch 32,
# 200 forwards; the import dominates); (c) tests/progs/churn at 6, 30 and
# 90 M calls, recorded by poolscope with `--stacks none` (heaptrack has no
# such mode: its own stacks). BENCH_QUICK=1: 200,000 keys, 20 forwards,
# 0.6 M calls. A program or heaptrack that is missing is a row saying so.
# Then where our bytes go, from tests/progs/pstcols: the stack table
# (META chunks) and the events, split into their columns, each compressed
# alone as the flusher compresses (about what each costs in the file).
set -u
BUILD=${BUILD:-build}
PS=$BUILD/bin/poolscope
PY=${PY:-/usr/bin/python3}
W=$(mktemp -d "${TMPDIR:-/tmp}/bench-size.XXXXXX")
trap 'rm -rf "$W"' EXIT
n=2000000; f=200; churns="6000000 30000000 90000000"
[ "${BENCH_QUICK:-0}" = 1 ] && { n=200000; f=20; churns=600000; }
COLS=$BUILD/tests/progs/pstcols
: > "$W/parts"
cat > "$W/dict.py" <<EOF
d = {}
for i in range($n):
    d[str(i)] = i
EOF
cat > "$W/torch_fwd.py" <<EOF
import torch
torch.manual_seed(0)
torch.set_num_threads(2)
m = torch.nn.Sequential(torch.nn.Linear(256, 512), torch.nn.ReLU(), torch.nn.Linear(512, 256),
                        torch.nn.ReLU(), torch.nn.Linear(256, 10))
x = torch.randn(32, 256)
with torch.no_grad():
    for i in range($f):
        y = m(x)
print(float(y.sum()))
EOF
mb() { awk -v b="$1" 'BEGIN { printf "%.2f", b / 1048576 }'; }
secs() { awk -v a="$1" -v b="$2" 'BEGIN { printf "%.2f", (b - a) / 1e9 }'; }
now() { date +%s%N; }

echo "## trace size"
echo
echo "Trace bytes, poolscope and heaptrack (\`heaptrack -o\`, its .zst) on the same program in one run; report: \`poolscope report\` on the trace. Programs: python3 filling a dict of $n str keys with PYTHONMALLOC=malloc and a PyTorch CPU forward loop ($f forwards of a 3-layer MLP, batch 32; the import dominates), both \`record --stacks dwarf\`; tests/progs/churn (N malloc+free calls), \`record --stacks none\`."
echo
echo "| program | events | poolscope MB | heaptrack MB | poolscope / heaptrack | report s |"
echo "|---|---:|---:|---:|---:|---:|"
kb() { awk -v b="$1" 'BEGIN { printf "%.1f", b / 1024 }'; }
# parts NAME TRACE: a row of where TRACE's bytes go, kept for the table after
parts() {
    [ -x "$COLS" ] || return 0
    "$COLS" "$2" > "$W/cols" 2>/dev/null
    v() { sed -n "s/^$1=//p" "$W/cols"; }
    [ -n "$(v file_meta)" ] || return 0
    echo "| $1 | $(kb "$(wc -c < "$2")") | $(kb "$(v file_meta)") | $(kb "$(v file_events)") | $(kb "$(v col_events)") | $(kb $(( $(v col_counts) + $(v col_values) ))) | $(kb "$(v col_stacks)") |" >> "$W/parts"
}
# row NAME STACKS ENV CMD...: CMD recorded by poolscope (--stacks STACKS)
# and by heaptrack, both with the variables ENV ("" for none)
row() {
    name=$1; stacks=$2; envv=$3; shift 3
    rm -f "$W/t.pst" "$W"/ht.*
    env $envv "$PS" record --stacks "$stacks" -o "$W/t.pst" -- "$@" >/dev/null 2>"$W/rec.err" ||
        { echo "| $name | record failed | | | | |"; return; }
    pb=$(wc -c < "$W/t.pst")
    parts "$name" "$W/t.pst"
    t0=$(now); "$PS" report "$W/t.pst" >"$W/rep.txt" 2>&1; t1=$(now)
    ev=$(sed -n 's/^  events *\([0-9,]*[0-9]\).*/\1/p' "$W/rep.txt" | head -1)
    hb=""
    if command -v heaptrack >/dev/null 2>&1; then
        env $envv heaptrack -o "$W/ht" "$@" >/dev/null 2>&1
        h=$(ls "$W"/ht*.zst 2>/dev/null | head -1)
        [ -n "$h" ] && hb=$(wc -c < "$h")
    fi
    if [ -n "$hb" ]; then
        echo "| $name | $ev | $(mb "$pb") | $(mb "$hb") | $(awk -v a="$pb" -v b="$hb" 'BEGIN { printf "%.2f", a / b }') | $(secs "$t0" "$t1") |"
    else
        echo "| $name | $ev | $(mb "$pb") | (heaptrack missing) | | $(secs "$t0" "$t1") |"
    fi
}
pyrow() { # name env script
    if ! "$PY" -c 'import sys' 2>/dev/null; then echo "| $1 | python3 missing | | | | |"; return; fi
    if [ "$1" = torch ] && ! "$PY" -c 'import torch' 2>/dev/null; then echo "| $1 | torch missing | | | | |"; return; fi
    row "$1" dwarf "$2" "$PY" "$3"
}
pyrow dict PYTHONMALLOC=malloc "$W/dict.py"
pyrow torch PYTHONMALLOC=pymalloc "$W/torch_fwd.py"
for c in $churns; do
    row "churn $(awk -v c="$c" 'BEGIN { printf "%g M", c / 1e6 }')" none "" "$BUILD/tests/progs/churn" "$c"
done
if [ -s "$W/parts" ]; then
    echo
    echo "Where our bytes go (\`tests/progs/pstcols\`), KiB: the stack table (META chunks, with the strings and modules) and the EVENTS chunks; then the events' columns (libtrace/FORMAT.md \"Columns\"), each compressed alone as the flusher compresses: the event records (addresses, sizes, types), the times (TS counts and values), the stack ids. Compressed together, the columns cost a little less than their sum."
    echo
    echo "| program | trace | stack table | events | event records | times | stack ids |"
    echo "|---|---:|---:|---:|---:|---:|---:|"
    cat "$W/parts"
fi
