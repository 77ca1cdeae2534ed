#!/bin/sh
# bench-attach.sh — what `poolscope attach` costs a running server: the time
# to attach and to detach, and the server's throughput by its own counter
# (tests/progs/att_rate: replacements per second, written every 100 ms)
# in the seconds before the attach, during the window, and after the
# detach, in the same run.
#
#   BUILD=build sh scripts/bench-attach.sh      (make bench runs it)
#
# Two servers of 4 threads: "paced" sleeps 1 ms every 16 replacements (a
# server waiting on I/O), "tight" never sleeps (the allocator's worst
# case). ROUNDS runs of each (5; BENCH_QUICK=1: 2), alternating; medians,
# with the range. Windows of 2 s (1 s quick), --stacks fp.
set -u
BUILD=${BUILD:-build}
PS=$BUILD/bin/poolscope
RATE=$BUILD/tests/progs/att_rate
W=$(mktemp -d "${TMPDIR:-/tmp}/bench-attach.XXXXXX")
rounds=${ROUNDS:-5}; win=2
[ "${BENCH_QUICK:-0}" = 1 ] && { rounds=2; win=1; }
SP=""
trap '[ -n "$SP" ] && kill "$SP" 2>/dev/null; rm -rf "$W"' EXIT

echo "## attach"
echo
if [ ! -x "$RATE" ]; then
    echo "not measured: $RATE missing"
    exit 0
fi
now() { date +%s%N; }

# one KIND PACE ROUND: a server, 2 s before, the window, 2 s after
one() {
    d="$W/$1.$3"; mkdir -p "$d"
    "$RATE" 4 "$2" "$d/stop" "$d/rate" >"$d/out" 2>"$d/err" &
    SP=$!
    i=0; until grep -q '^ready' "$d/err" 2>/dev/null; do i=$((i + 1)); [ $i -gt 200 ] && return 1; sleep 0.05; done
    sleep 2.5
    t_cmd=$(now)
    "$PS" attach "$SP" -o "$d/w.pst" --stacks fp --duration "$win" 2>"$d/attach" &
    AP=$!
    i=0; until grep -q 'recording to' "$d/attach" 2>/dev/null; do i=$((i + 1)); [ $i -gt 1200 ] && break; sleep 0.05; done
    t_on=$(now)
    wait "$AP"; arc=$?
    t_off=$(now)
    sleep 2.5
    touch "$d/stop"; wait "$SP"; SP=""
    echo "$1 $3 $arc $t_cmd $t_on $t_off $(sed -n 's/.*attached to pid [0-9]* in \([0-9.]*\) s.*/\1/p' "$d/attach") $(sed -n 's/.*detached in \([0-9.]*\) s.*/\1/p' "$d/attach") $(grep -c checked=ok "$d/out")" >>"$W/runs"
    cp "$d/rate" "$W/rate.$1.$3"
}

r=1
while [ $r -le "$rounds" ]; do
    one paced 16 $r
    one tight 0 $r
    r=$((r + 1))
done

python3 - "$W" <<'PY'
import os, statistics as st, sys
w = sys.argv[1]
rows = {}
for line in open(os.path.join(w, "runs")):
    kind, rnd, arc, t_cmd, t_on, t_off, att, det, ok = (line.split() + [""] * 9)[:9]
    samples = [tuple(map(int, l.split())) for l in open(os.path.join(w, f"rate.{kind}.{rnd}"))]
    def ops_at(t):   # the counter's last reading at or before t
        v = samples[0][1]
        for ts, n in samples:
            if ts > t: break
            v = n
        return v
    def rate(a, b):
        return (ops_at(b) - ops_at(a)) / ((b - a) / 1e9) if b > a else 0.0
    t_cmd, t_on, t_off = int(t_cmd), int(t_on), int(t_off)
    g = 200_000_000   # 0.2 s kept clear of each edge
    r = rows.setdefault(kind, {"att": [], "det": [], "before": [], "during": [], "after": [], "bad": 0})
    r["before"].append(rate(t_cmd - 2_000_000_000, t_cmd - g))
    r["during"].append(rate(t_on + g, t_off - g))
    r["after"].append(rate(t_off + g, t_off + 2_000_000_000))
    r["att"].append(float(att or "nan"))
    r["det"].append(float(det or "nan"))
    r["bad"] += arc != "0" or ok != "1"
def med(v): return st.median(v)
def rng(v, f): return f"{f(min(v))}..{f(max(v))}"
n = max(len(r["att"]) for r in rows.values())
print(f"Medians of {n} rounds per server, alternating (range after each); rates are the server's own "
      "replacements (a free and a malloc) per second, 4 threads; during/after as a ratio of before in the same round.")
print()
print("| server | attach, s | detach, s | before, ops/s | during, ops/s | during/before | after, ops/s | after/before | failed rounds |")
print("|---|---|---|---|---|---|---|---|---|")
for kind in ("paced", "tight"):
    r = rows.get(kind)
    if not r: continue
    k = lambda x: f"{x / 1000:,.0f} k"
    db = [d / b for d, b in zip(r["during"], r["before"]) if b]
    ab = [a / b for a, b in zip(r["after"], r["before"]) if b]
    print(f"| {kind} | {med(r['att']):.2f} ({rng(r['att'], lambda x: f'{x:.2f}')}) | {med(r['det']):.2f} ({rng(r['det'], lambda x: f'{x:.2f}')}) "
          f"| {k(med(r['before']))} | {k(med(r['during']))} | {med(db):.2f} ({rng(db, lambda x: f'{x:.2f}')}) "
          f"| {k(med(r['after']))} | {med(ab):.2f} ({rng(ab, lambda x: f'{x:.2f}')}) | {r['bad']} |")
PY
