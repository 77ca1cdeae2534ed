#!/bin/sh
# record --duration / --until-signal: recording stops inside a run that goes
# on (tests/progs/window: 3000 iterations of 1 ms at least, one malloc of
# 20000 + i bytes each, 32 blocks live). The program's output and status
# must be those of an untraced run; the trace must be complete (END, flagged
# stopped) and hold exactly the first M iterations' mallocs, in order, for
# some 0 < M < 3000 (the window starts before main and ends before the
# program does, whatever the machine's speed: no timing is asserted), the
# frees of iterations 0..M-33 (32 live, or 33 when the stop fell between a
# free and its malloc) and nothing after; report calls the live blocks
# "live at stop", not leaks.
. tests/integration/lib.sh

N=3000 LIVE=32
"$P/window" $N $LIVE >"$T/plain.out"; prc=$?

# $1: name; the trace $T/$1.pst, record's output in $T/$1.out / $1.err
window_checks() {
    check "$1: program exits 0 as untraced" test "$rc" -eq 0 -a "$prc" -eq 0
    check "$1: program's output unchanged" cmp -s "$T/plain.out" "$T/$1.out"
    check "$1: record says it stopped" grep -q "recording stopped" "$T/$1.err"
    "$DUMP" "$T/$1.pst" >"$T/$1.dump"
    check "$1: trace complete (END)" test "$(key "$T/$1.dump" complete)" = 1
    "$PS" sql "$T/$1.pst" -o "$T/$1.db" >/dev/null 2>&1
    q() { sqlite3 "$T/$1.db" "$2"; }
    W="size_bytes >= 20000 AND size_bytes < 20000 + $N"
    m=$(q "$1" "SELECT count(*) FROM allocations WHERE $W")
    echo "  $1: $m of $N iterations in the window"
    check "$1: window inside the run (0 < M < $N)" test "$m" -gt 0 -a "$m" -lt $N
    # the i-th malloc of the window is iteration i: none missing, none after
    check "$1: mallocs are iterations 0..M-1 in order" test "$(q "$1" "SELECT count(*) FROM (SELECT size_bytes - 20000 AS i,
        row_number() OVER (ORDER BY id) - 1 AS r FROM allocations WHERE $W) WHERE i != r")" = 0
    f=$(q "$1" "SELECT count(*) FROM allocations WHERE $W AND free_id IS NOT NULL")
    live=$((m - f))
    check "$1: frees match the window ($live live at stop)" test "$live" -eq $LIVE -o "$live" -eq $((LIVE + 1)) \
        -o \( "$m" -lt $LIVE -a "$live" -eq "$m" \)
    check "$1: frees are iterations 0..M-1-live" test "$(q "$1" "SELECT max(size_bytes) - 20000 + 1 FROM allocations
        WHERE $W AND free_id IS NOT NULL")" = "$f"
    "$PS" report --json "$T/$1.pst" >"$T/$1.json" 2>/dev/null
    check "$1: JSON says stopped" grep -q '"stopped": true' "$T/$1.json"
    "$PS" report "$T/$1.pst" >"$T/$1.txt" 2>/dev/null
    check "$1: report says live at stop, not leaked" sh -c "grep -q 'live at stop ' '$T/$1.txt' && ! grep -q 'leaked at exit' '$T/$1.txt'"
    "$PS" html --quiet "$T/$1.pst" -o "$T/$1.html" 2>/dev/null
    check "$1: html says live at stop" grep -q '"live_end":"live at stop"' "$T/$1.html"
}

"$PS" record --duration 1 -o "$T/dur.pst" -- "$P/window" $N $LIVE >"$T/dur.out" 2>"$T/dur.err"; rc=$?
window_checks dur

# --until-signal: SIGUSR2 to record once the program is well under way (its
# trace has a chunk); record forwards nothing, the program never sees it
"$PS" record --until-signal -o "$T/sig.pst" -- "$P/window" $N $LIVE >"$T/sig.out" 2>"$T/sig.err" &
rpid=$!
i=0; while [ ! -s "$T/sig.pst" ] && [ $i -lt 200 ]; do sleep 0.05; i=$((i + 1)); done
sleep 0.3
kill -USR2 $rpid
wait $rpid; rc=$?
window_checks sig

# report on the trace while it is being written: says so, reads what is there
"$PS" record -o "$T/live.pst" -- "$P/window" $N $LIVE >/dev/null 2>&1 &
rpid=$!
i=0; while [ ! -s "$T/live.pst" ] && [ $i -lt 200 ]; do sleep 0.05; i=$((i + 1)); done
sleep 0.3
"$PS" report "$T/live.pst" >"$T/live.txt" 2>"$T/live.err"; lrc=$?
"$PS" html --quiet "$T/live.pst" -o "$T/live.html" 2>"$T/live.herr"; hrc=$?
wait $rpid
check "report of a trace being written: exit 0" test "$lrc" -eq 0
check "report says still being written" grep -q "trace still being written" "$T/live.err"
check "report: live now, not leaked" grep -q "live now " "$T/live.txt"
check "html of a trace being written: exit 0, says so" sh -c "test $hrc -eq 0 && grep -q 'still being written' '$T/live.herr' &&
    grep -q '\"live_end\":\"live now\"' '$T/live.html'"
"$PS" report "$T/live.pst" >"$T/done.txt" 2>"$T/done.err"
check "finished trace: no such warning" sh -c "! grep -q 'still being written' '$T/done.err'"

# images that start after the stop (a fork and an exec of the shell, after
# a sleep longer than the window) are not traced, and run as usual
"$PS" record --duration 0.5 -o "$T/fk.pst" -- /bin/sh -c "sleep 1.5; '$P/window' 10 2 0; '$P/window' 10 2 0 & wait" \
    >"$T/fk.out" 2>"$T/fk.err"; rc=$?
check "after the stop: both children ran" test "$rc" -eq 0 -a "$(grep -c '^window: 10 iterations' "$T/fk.out")" -eq 2
check "after the stop: no image of theirs traced" sh -c "! grep -q '\[window\]' '$T/fk.err'"

check "usage: --duration 0 refused" sh -c "'$PS' record --duration 0 -- true 2>/dev/null; test \$? -eq 2"
exit $status
