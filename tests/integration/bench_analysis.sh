# bench_analysis.sh — scripts/bench-analysis.sh at tiny sizes, and the
# Issue 31 table that scripts/bench.sh builds from its section: the largest
# size is measured ROUNDS_BIG times (default 1) and says "1 run" rather than
# passing for a median, the others ROUNDS times with (min-max); the summary's
# RSS row takes the largest and the smallest size's figures from the section
# and its text says which size had one run.
. tests/integration/lib.sh
SEC=$T/sec.md

# two sizes, 2 rounds: the smaller gets both, the larger one run
BUILD=$B SIZES="0.02 0.04" ROUNDS=2 sh "$ROOT/scripts/bench-analysis.sh" >"$SEC" 2>"$T/err"
rc=$?
check bench_analysis_runs sh -c "[ $rc = 0 ] && grep -qx '## analysis' '$SEC'"

rounds() {
    # every poolscope row at 0.02 M has a spread, none says 1 run;
    # every row at 0.04 M says 1 run
    n_small=$(grep -c '^| poolscope [a-z ]* | 0.02 M | [0-9.]* ([0-9.]*-[0-9.]*) |' "$SEC")
    n_big=$(grep -c '^| poolscope [a-z ]* | 0.04 M | [0-9.]* (1 run) |' "$SEC")
    [ "$n_small" = 4 ] && [ "$n_big" = 4 ] &&
        ! grep -q '| 0.02 M | [0-9.]* (1 run)' "$SEC" &&
        grep -q 'Then 2 rounds (1 run at 0.04 M)' "$SEC" ||
        { echo "  rows: $n_small with a spread at 0.02 M, $n_big '1 run' at 0.04 M" >&2; grep '^| poolscope' "$SEC" >&2; return 1; }
}
check bench_analysis_largest_size_one_run rounds

# the summary of a results file holding that section
summary() {
    mkdir -p "$T/s/bench" && { printf '# r\n\n'; cat "$SEC"; } >"$T/s/bench/results.md" &&
        (cd "$T/s" && sh "$ROOT/scripts/bench.sh" summary 2>/dev/null) || return 1
    row=$(grep '^| analysis peak RSS MiB' "$T/s/bench/results.md")
    for t in report replay sql; do
        big=$(awk -F'|' -v t="poolscope $t" '$2 == " " t " " && $3 == " 0.04 M " { gsub(/ /, "", $8); print $8 }' "$SEC")
        small=$(awk -F'|' -v t="poolscope $t" '$2 == " " t " " && $3 == " 0.02 M " { gsub(/ /, "", $8); print $8 }' "$SEC")
        echo "$row" | grep -qF "$t $big ($small)" ||
            { echo "  want '$t $big ($small)' in: $row" >&2; return 1; }
    done
    echo "$row" | grep -qF 'at 0.04 M events (at 0.02 M)' &&
        grep -q 'medians (1 run at 0.04 M: no median)' "$T/s/bench/results.md" ||
        { echo "  summary: $row" >&2; return 1; }
}
check bench_summary_rss_row_largest_and_smallest summary

# ROUNDS_BIG=2: no size says 1 run
BUILD=$B SIZES="0.02 0.04" ROUNDS=2 ROUNDS_BIG=2 sh "$ROOT/scripts/bench-analysis.sh" >"$T/sec2.md" 2>/dev/null
check bench_analysis_rounds_big_2_has_medians sh -c "! grep -q '(1 run' '$T/sec2.md' &&
    grep -q 'Then 2 rounds, each' '$T/sec2.md' &&
    [ \$(grep -c '^| poolscope [a-z ]* | 0.04 M | [0-9.]* ([0-9.]*-[0-9.]*) |' '$T/sec2.md') = 4 ]"
exit $status
