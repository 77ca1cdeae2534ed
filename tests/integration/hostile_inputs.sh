#!/bin/sh
# hostile_inputs.sh — every reading command checks its input before reading
# it (issue 25, item 6; common/input.h, cli/common_args.c): /dev/zero, a
# FIFO nobody writes to, a directory, a huge sparse file, garbage from a
# pipe and a JSON file too large to read whole are each refused at once —
# exit 2, one line naming the file, a modest peak RSS, never a hang
# (`timeout` bounds every run; no timing is asserted). `record --signal`
# refuses numbers of the signals it refuses by name (11, 6). Then every
# input of tests/fuzz/regress/ goes through the command its name says, and
# must end without a signal.
. tests/integration/lib.sh

"$PS" record -o "$T/x.pst" -- "$B/bin/refengine" --synthetic dim=32,layers=1,heads=2,kv_heads=2,hidden=64,vocab=64,seq=64 \
    --workload fixed:8,8 --requests 2 --max-batch 2 --quiet > /dev/null 2>&1
check record_trace [ -s "$T/x.pst" ]
"$PS" report "$T/x.pst" --json --no-symbols > "$T/base.json" 2>/dev/null
"$PS" replay "$T/x.pst" --json > "$T/replay.json" 2>/dev/null
check baseline_json sh -c "[ -s '$T/base.json' ] && [ -s '$T/replay.json' ]"

mkfifo "$T/fifo"
mkdir "$T/dir"
truncate -s 64G "$T/sparse"              # holes: no disk, reads as zeros
# a JSON document far larger than a report, sparse as well: "{" then zeros
printf '{' > "$T/big.json"; truncate -s 1G "$T/big.json"

# refused INPUT CMD...: CMD exits 2 with one line on stderr naming INPUT,
# within 20 s, peak RSS under 200 MB (/usr/bin/time -f %M, KiB)
refused() {
    input=$1; shift
    timeout -k 5 20 /usr/bin/time -f '%M' -o "$T/rss" "$@" > /dev/null 2> "$T/err"; rc=$?
    rss=$(tail -1 "$T/rss" 2>/dev/null | grep -o '^[0-9]*$')
    lines=$(wc -l < "$T/err")
    if [ "$rc" -ne 2 ] || [ "$lines" -ne 1 ] || ! grep -qF "$input" "$T/err" || [ "${rss:-999999999}" -ge 204800 ]; then
        echo "  exit $rc (want 2), $lines stderr line(s), rss ${rss:-?} KiB: $(head -3 "$T/err")" >&2
        return 1
    fi
}

for what in zero fifo dir sparse; do
    case $what in
    zero) f=/dev/zero ;;
    fifo) f=$T/fifo ;;
    dir) f=$T/dir ;;
    sparse) f=$T/sparse ;;
    esac
    check "report_${what}_refused" refused "$f" "$PS" report "$f"
    for pol in malloc arena pool ideal caching kv-contiguous kv-reserve kv-step kv-paged; do
        check "replay_${pol}_${what}_refused" refused "$f" "$PS" replay "$f" --policy "$pol"
    done
    check "replay_default_${what}_refused" refused "$f" "$PS" replay "$f"
    check "sql_${what}_refused" refused "$f" "$PS" sql "$f" -o "$T/out.db"
    for fmt in chrome folded pprof; do
        check "export_${fmt}_${what}_refused" refused "$f" "$PS" export "$f" --format "$fmt" -o "$T/out.$fmt"
    done
    check "html_${what}_refused" refused "$f" "$PS" html "$f" -o "$T/out.html"
    check "plot_${what}_refused" refused "$f" "$PS" plot "$f" -o "$T/plots"
    check "plot_replay_json_${what}_refused" refused "$f" "$PS" plot "$T/x.pst" --replay "$f" -o "$T/plots"
    check "html_replay_json_${what}_refused" refused "$f" "$PS" html "$T/x.pst" --replay "$f" -o "$T/out.html"
    check "diff_a_${what}_refused" refused "$f" "$PS" diff "$f" "$T/x.pst"
    check "diff_b_${what}_refused" refused "$f" "$PS" diff "$T/x.pst" "$f"
    check "gate_${what}_refused" refused "$f" "$PS" gate "$f" --baseline "$T/base.json"
    check "gate_baseline_${what}_refused" refused "$f" "$PS" gate "$T/x.pst" --baseline "$f"
done
check refusals_made_nothing sh -c "! ls '$T' | grep -q '^out\.\|^plots$'"

# a JSON document too large to read whole: refused before it is read
check diff_huge_json_refused refused "$T/big.json" "$PS" diff "$T/big.json" "$T/base.json"
check gate_huge_json_refused refused "$T/big.json" "$PS" gate "$T/big.json" --baseline "$T/base.json"
check gate_huge_baseline_refused refused "$T/big.json" "$PS" gate "$T/x.pst" --baseline "$T/big.json"
check plot_huge_replay_refused refused "$T/big.json" "$PS" plot "$T/x.pst" --replay "$T/big.json" -o "$T/plots"

# pipes: garbage without end is refused from its first bytes; a baseline
# from a pipe is bounded
check replay_zero_pipe_refused refused /dev/stdin sh -c "exec '$PS' replay - < /dev/zero"
check replay_zero_cat_pipe_refused refused /dev/stdin sh -c "cat /dev/zero 2>/dev/null | '$PS' replay -"
check gate_zero_pipe_refused refused /dev/stdin sh -c "cat /dev/zero 2>/dev/null | '$PS' gate - --baseline '$T/base.json'"
check diff_zero_pipe_refused refused /dev/stdin sh -c "cat /dev/zero 2>/dev/null | '$PS' diff - '$T/x.pst'"
check gate_endless_json_baseline_refused refused /dev/stdin sh -c \
    "{ printf '{'; cat /dev/zero; } 2>/dev/null | '$PS' gate '$T/x.pst' --baseline /dev/stdin"

# what must still work: a FIFO with a writer (replay), pipes, stdin
cat "$T/x.pst" > "$T/fifo" &
w=$!
timeout -k 5 60 "$PS" replay "$T/fifo" --policy arena > /dev/null 2>&1; rc=$?
kill "$w" 2>/dev/null; wait "$w" 2>/dev/null
check replay_fifo_with_writer_reads [ "$rc" -eq 0 ]
cat "$T/x.pst" | timeout 60 "$PS" report - > /dev/null 2>&1
check report_pipe_reads [ $? -eq 0 ]
cat "$T/base.json" | timeout 60 "$PS" gate "$T/x.pst" --baseline /dev/stdin > /dev/null 2>&1
check gate_baseline_pipe_reads [ $? -eq 0 ]
timeout 60 "$PS" diff "$T/base.json" "$T/x.pst" > /dev/null 2>&1
check diff_json_and_trace_reads [ $? -le 1 ]

# record --signal: numbers are refused by the same rule as names
for s in SEGV ABRT 11 6 7 8 4 5 31 9 19; do
    "$PS" record -o "$T/sig.pst" --signal "$s" -- true > /dev/null 2> "$T/err"; rc=$?
    check "record_signal_${s}_refused" sh -c "[ $rc -eq 2 ] && grep -q 'not a usable signal' '$T/err' && [ ! -e '$T/sig.pst' ]"
done
for s in USR2 12 RTMIN+1; do
    rm -f "$T/sig.pst"
    "$PS" record -o "$T/sig.pst" --signal "$s" -- true > /dev/null 2>&1
    check "record_signal_${s}_accepted" [ $? -eq 0 ]
done

# the inputs that once crashed a fuzz harness, through the command the
# harness stands for (the name's first words: tests/fuzz/run.sh's targets)
for f in tests/fuzz/regress/*; do
    [ -f "$f" ] || continue
    n=$(basename "$f")
    case $n in
    reader-*|report-*) set -- report "$f" ;;
    replay-kv-*) set -- replay "$f" --policy "kv-$(echo "${n#replay-kv-}" | cut -d- -f1)" ;;
    replay-*) set -- replay "$f" --policy "$(echo "${n#replay-}" | cut -d- -f1)" ;;
    sql-*) set -- sql "$f" -o "$T/r.db" ;;
    export-*) set -- export "$f" --format "$(echo "${n#export-}" | cut -d- -f1)" -o "$T/r.out" ;;
    html-*) set -- html "$f" -o "$T/r.html" ;;
    plot-*) set -- plot "$f" -o "$T/rplots" ;;
    diff-*) set -- diff "$f" "$T/base.json" ;;
    gate-*) set -- gate "$f" --baseline "$T/base.json" ;;
    *) set -- report "$f" ;;
    esac
    timeout -k 5 120 "$PS" "$@" > /dev/null 2>&1; rc=$?
    rm -rf "$T/r.db" "$T/r.out" "$T/r.html" "$T/rplots"
    check "fuzz_regress_${n}_no_crash" sh -c "[ $rc -le 2 ] || { echo '  $n: exit $rc' >&2; exit 1; }"
done
exit $status
