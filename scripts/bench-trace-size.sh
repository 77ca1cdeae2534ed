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
# 200 forwards; the import dominates). BENCH_QUICK=1: 200,000 keys, 20
# forwards. A program or heaptrack that is missing is a row saying so.
set -u
BUILD=${BUILD:-build}
PS=$BUILD/bin/poolscope
PY=${PY:-/usr/bin/python3}
W=$(mktemp -d "${TMPDIR:-/tmp}/bench-size.XXXXXX")
trap 'rm -rf "$W"' EXIT
n=2000000; f=200
[ "${BENCH_QUICK:-0}" = 1 ] && { n=200000; f=20; }
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
echo "Trace bytes with dwarf stacks, poolscope (\`record --stacks dwarf\`) and heaptrack (\`heaptrack -o\`, its .zst) on the same program in one run; report: \`poolscope report\` on the trace. Programs: python3 filling a dict of $n str keys with PYTHONMALLOC=malloc; a PyTorch CPU forward loop ($f forwards of a 3-layer MLP, batch 32; the import dominates)."
echo
echo "| program | events | poolscope MB | heaptrack MB | poolscope / heaptrack | report s |"
echo "|---|---:|---:|---:|---:|---:|"
row() { # name env script
    name=$1; envv=$2; script=$3
    if ! "$PY" -c 'import sys' 2>/dev/null; then echo "| $name | python3 missing | | | | |"; return; fi
    if [ "$name" = torch ] && ! "$PY" -c 'import torch' 2>/dev/null; then echo "| $name | torch missing | | | | |"; return; fi
    rm -f "$W/t.pst" "$W"/ht.*
    env $envv "$PS" record --stacks dwarf -o "$W/t.pst" -- "$PY" "$script" >/dev/null 2>"$W/rec.err" ||
        { echo "| $name | record failed | | | | |"; return; }
    pb=$(wc -c < "$W/t.pst")
    t0=$(now); "$PS" report "$W/t.pst" >"$W/rep.txt" 2>&1; t1=$(now)
    ev=$(sed -n 's/^  events *\([0-9,]*[0-9]\).*/\1/p' "$W/rep.txt" | head -1)
    hb=""
    if command -v heaptrack >/dev/null 2>&1; then
        env $envv heaptrack -o "$W/ht" "$PY" "$script" >/dev/null 2>&1
        h=$(ls "$W"/ht*.zst 2>/dev/null | head -1)
        [ -n "$h" ] && hb=$(wc -c < "$h")
    fi
    if [ -n "$hb" ]; then
        echo "| $name | $ev | $(mb "$pb") | $(mb "$hb") | $(awk -v a="$pb" -v b="$hb" 'BEGIN { printf "%.2f", a / b }') | $(secs "$t0" "$t1") |"
    else
        echo "| $name | $ev | $(mb "$pb") | (heaptrack missing) | | $(secs "$t0" "$t1") |"
    fi
}
row dict PYTHONMALLOC=malloc "$W/dict.py"
row torch PYTHONMALLOC=pymalloc "$W/torch_fwd.py"
