#!/bin/sh
# bench-tracer-ab.sh — the tracer of two builds side by side: every run of
# one is followed by the same run of the other, so a noisy machine weighs on
# both alike. Prints "mode build ns" per run, then medians in ns per call.
#
#   BASE=/path/to/old/build NEW=build REPS=9 sh scripts/bench-tracer-ab.sh
#
# Modes: churn (tests/progs/churn, 3 M calls) uninstrumented, --stacks none,
# fp, and dwarf on a -fomit-frame-pointer build, with the environment
# `poolscope record` gives the program; "record" is the whole `poolscope
# record --stacks none` command (its start-up and closing summary included).
# "plain-thread" is churn untraced with an idle second thread started
# first (`churn CALLS thread`): what being multi-threaded costs glibc's
# malloc, which the tracer's own thread makes every traced process pay.
# "mt" is the whole `poolscope record --stacks none` of tests/progs/stress
# -t 4 -n MT_N (4 threads, about one heap call per operation, a fifth of
# the frees on another thread: versions and cycle counts are written),
# against "mt-plain", the same run untraced; its trace bytes are printed
# too (median per build).
# The last lines give each mode's median over the uninstrumented median of
# the same binary (plain for none, fp and record; plain-nofp for dwarf;
# mt-plain for mt).
set -eu
BASE=${BASE:?BASE: the other build directory}
NEW=${NEW:-build}
REPS=${REPS:-9}
CALLS=${CALLS:-3000000}
MT_N=${MT_N:-500000}
W=$(mktemp -d "${TMPDIR:-/tmp}/bench-ab.XXXXXX")
trap 'rm -rf "$W"' EXIT
${CC:-cc} -std=c11 -D_GNU_SOURCE -O2 -g -fomit-frame-pointer -o "$W/churn-nofp" tests/progs/churn.c
CHURN=$NEW/tests/progs/churn
now() { date +%s%N; }
one() { # build mode prog
    rm -f "$W"/t*.pst*
    t0=$(now)
    if [ "$2" = plain ] || [ "$2" = plain-nofp ]; then "$3" "$CALLS" >/dev/null 2>&1
    elif [ "$2" = plain-thread ]; then "$3" "$CALLS" thread >/dev/null 2>&1
    elif [ "$2" = mt-plain ]; then "$3" -t 4 -n "$MT_N" >/dev/null 2>&1
    elif [ "$2" = mt ]; then
        "$1/bin/poolscope" record --stacks none -o "$W/t.pst" -- "$3" -t 4 -n "$MT_N" >/dev/null 2>&1
        echo "$1 $(wc -c <"$W/t.pst")" >>"$W/bytes"
    elif [ "$2" = record ]; then
        "$1/bin/poolscope" record --stacks none -o "$W/t.pst" -- "$3" "$CALLS" >/dev/null 2>&1
    else LD_PRELOAD=$1/lib/libpoolscope-preload.so POOLSCOPE_OUT=$W/t.pst POOLSCOPE_STACKS=$2 \
        "$3" "$CALLS" >/dev/null 2>&1; fi
    echo "$2 $1 $(($(now) - t0))"
}
i=0
while [ $i -lt "$REPS" ]; do
    for m in plain none fp record; do one "$BASE" $m "$CHURN"; one "$NEW" $m "$CHURN"; done
    one "$BASE" plain-thread "$CHURN"
    one "$BASE" plain-nofp "$W/churn-nofp"
    one "$BASE" dwarf "$W/churn-nofp"; one "$NEW" dwarf "$W/churn-nofp"
    one "$BASE" mt-plain "$NEW/tests/progs/stress"
    one "$BASE" mt "$NEW/tests/progs/stress"; one "$NEW" mt "$NEW/tests/progs/stress"
    i=$((i + 1))
done >"$W/runs"
cat "$W/runs"
# medians; churn makes CALLS/2 mallocs and as many frees
sort -k1,1 -k2,2 "$W/runs" | awk -v calls="$CALLS" -v mtcalls=$((4 * MT_N)) -v basedir="$BASE" '
    { k = $1 " " $2; v[k, ++n[k]] = $3; c[k] = $1 ~ /^mt/ ? mtcalls : calls }
    END { for (k in n) { m = n[k]; for (i = 1; i <= m; i++) for (j = i + 1; j <= m; j++)
            if (v[k, j] < v[k, i]) { t = v[k, i]; v[k, i] = v[k, j]; v[k, j] = t }
          med = m % 2 ? v[k, (m + 1) / 2] : (v[k, m / 2] + v[k, m / 2 + 1]) / 2
          printf "median %-40s %.1f ns per call (%d runs)\n", k, med / c[k], m
          split(k, kk, " "); md[kk[1], kk[2]] = med; b[kk[2]] = 1 }
      for (bb in b) for (x in md) { split(x, xx, SUBSEP)
          if (xx[2] != bb || xx[1] ~ /plain/) continue
          base = xx[1] == "dwarf" ? md["plain-nofp", basedir] : xx[1] == "mt" ? md["mt-plain", basedir] : md["plain", bb]
          if (base > 0) printf "ratio  %-40s %.2fx\n", xx[1] " " bb, md[x] / base }
      if (md["plain", basedir] > 0 && md["plain-thread", basedir] > 0)
          printf "ratio  %-40s %.2fx\n", "plain-thread " basedir, md["plain-thread", basedir] / md["plain", basedir] }' | sort
# mt's trace bytes, median per build
sort "$W/bytes" | awk '{ v[$1, ++n[$1]] = $2 }
    END { for (b in n) { m = n[b]; for (i = 1; i <= m; i++) for (j = i + 1; j <= m; j++)
            if (v[b, j] < v[b, i]) { t = v[b, i]; v[b, i] = v[b, j]; v[b, j] = t }
          printf "bytes  mt %-37s %d (median of %d)\n", b, m % 2 ? v[b, (m + 1) / 2] : (v[b, m / 2] + v[b, m / 2 + 1]) / 2, m } }'
