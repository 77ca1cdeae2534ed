#!/bin/sh
# bench-stacks.sh — what each `record --stacks` mode costs, to choose the
# default (README "Sites": why dwarf). Side by side in one run: every round
# runs each configuration once, in turn (uninstrumented, none, fp, dwarf),
# so machine noise falls on all of them alike; the figure is the median
# wall time over ROUNDS rounds, as a ratio to the uninstrumented median.
#
#   BUILD=build ROUNDS=7 sh scripts/bench-stacks.sh
#   WORKLOADS="pytorch" sh scripts/bench-stacks.sh     # some of them only
#
# Workloads: tests/progs/churn (frame pointers; CALLS malloc+free), the
# same built with -fomit-frame-pointer (what most distribution code is),
# python3 on a dict/list workload (PYTHONMALLOC=malloc; the interpreter
# has no frame pointers), and a PyTorch CPU run (a small MLP's forward,
# backward and SGD step plus a 128x128 matmul, 100 times, one thread; the
# first python3 that imports torch, e.g. Debian's python3-torch in
# /usr/bin/python3; skipped when none does). Each poolscope row is the whole
# `poolscope record` command. Also prints, per workload and mode, the mean recorded stack depth
# over the events that carry a stack (from `poolscope sql` of the first
# round's trace): how much of the stack each mode sees. Progress on stderr, a markdown table on stdout.
set -eu
BUILD=${BUILD:-build}
ROUNDS=${ROUNDS:-7}
CALLS=${CALLS:-2000000}
WORKLOADS=${WORKLOADS:-churn churn-nofp python3 pytorch}
ROOT=$(pwd)
case $BUILD in /*) B=$BUILD ;; *) B=$ROOT/$BUILD ;; esac
PS=$B/bin/poolscope
W=$(mktemp -d "${TMPDIR:-/tmp}/bench-stacks.XXXXXX")
trap 'rm -rf "$W"' EXIT
${CC:-cc} -std=c11 -D_GNU_SOURCE -O2 -g -fomit-frame-pointer -o "$W/churn-nofp" "$ROOT/tests/progs/churn.c"
PY=$(python3 -c 'import sys; print(sys.executable)' 2>/dev/null || true)
cat >"$W/work.py" <<'PY'
import random
random.seed(1)
live = []
for step in range(25):
    d = {i: str(i) * (1 + i % 7) for i in range(20000)}
    l = [(k, [v] * 3) for k, v in d.items() if k % 3]
    live.append(l)
    if len(live) > 4:
        live.pop(random.randrange(len(live)))
print(len(live))
PY
TPY=
for c in "$PY" /usr/bin/python3; do
    [ -n "$c" ] && "$c" -c 'import torch' >/dev/null 2>&1 && { TPY=$c; break; }
done
cat >"$W/torch_work.py" <<'PY'
import torch
torch.manual_seed(1)
torch.set_num_threads(1)
model = torch.nn.Sequential(torch.nn.Linear(256, 512), torch.nn.ReLU(),
                            torch.nn.Linear(512, 256), torch.nn.ReLU(), torch.nn.Linear(256, 10))
opt = torch.optim.SGD(model.parameters(), lr=0.01)
x = torch.randn(64, 256)
y = torch.randint(0, 10, (64,))
for step in range(100):
    opt.zero_grad()
    loss = torch.nn.functional.cross_entropy(model(x), y)
    loss.backward()
    opt.step()
    a = torch.randn(128, 128)
    b = a @ a.t()
print(float(loss))
PY
now() { date +%s%N; }
median() { sort -n | awk '{ v[NR] = $1 } END { if (NR % 2) print v[(NR + 1) / 2]; else print int((v[NR / 2] + v[NR / 2 + 1]) / 2) }'; }

# one workload: NAME CMD...
bench() {
    name=$1; shift
    case " $WORKLOADS " in *" $name "*) ;; *) return 0 ;; esac
    r=0
    while [ $r -lt "$ROUNDS" ]; do
        for mode in plain none fp dwarf; do
            rm -f "$W/t.pst"
            t0=$(now)
            if [ $mode = plain ]; then "$@" >/dev/null 2>&1
            else "$PS" record -o "$W/t.pst" --stacks $mode -- "$@" >/dev/null 2>&1; fi
            t1=$(now)
            echo $((t1 - t0)) >>"$W/$name.$mode"
            if [ $r = 0 ] && [ $mode != plain ] && [ $mode != none ]; then
                rm -f "$W/t.db"
                "$PS" sql "$W/t.pst" -o "$W/t.db" >/dev/null 2>&1 &&
                    sqlite3 "$W/t.db" "select printf('%.1f', avg(s.depth)) from events e join stacks s on s.id = e.stack" \
                        >"$W/$name.$mode.depth" 2>/dev/null || true
            fi
        done
        r=$((r + 1))
        echo "bench-stacks: $name round $r/$ROUNDS" >&2
    done
    base=$(median <"$W/$name.plain")
    for mode in none fp dwarf; do
        m=$(median <"$W/$name.$mode")
        d=-
        [ -s "$W/$name.$mode.depth" ] && d=$(cat "$W/$name.$mode.depth")
        awk -v n="$name" -v mo="$mode" -v m="$m" -v b="$base" -v d="$d" 'BEGIN {
            printf "| %s | %s | %.0f | %.0f | %.2fx | %s |\n", n, mo, b / 1e6, m / 1e6, m / b, d }'
    done
}

echo "| workload | --stacks | uninstrumented ms | recorded ms | ratio | mean frames/stack |"
echo "|---|---|---:|---:|---:|---:|"
bench churn "$B/tests/progs/churn" "$CALLS"
bench churn-nofp "$W/churn-nofp" "$CALLS"
if [ -n "$PY" ]; then PYTHONMALLOC=malloc bench python3 "$PY" "$W/work.py"; fi
if [ -n "$TPY" ]; then bench pytorch "$TPY" "$W/torch_work.py"
else echo "bench-stacks: no python3 imports torch (apt-get install python3-torch): pytorch skipped" >&2; fi
