#!/bin/sh
# `make bench`: runs every benchmark and writes bench/results.md.
# Each benchmark prints markdown (a `## section` heading and tables) with
# ratios measured side by side in one process or one script run, medians of
# several repetitions, absolute ns beside them. BENCH_QUICK=1 runs short
# versions (used by the smoke test, not for figures).
#
#   sh scripts/bench.sh          every benchmark, bench/results.md rewritten
#   sh scripts/bench.sh NAME     one benchmark alone (build/bench/bench_NAME or
#                                scripts/bench-NAME.sh: engine, report, analysis,
#                                tracer, trace-size, ...), the section it prints
#                                replaced in place in bench/results.md
#   sh scripts/bench.sh summary  only the "## Issue 31 table" at the top,
#                                regenerated from the sections of the file
#
# The results open with "## Issue 31 table": every row of issue 31's table
# (heaptrack's figure, ours, the goal), each cell taken from a measured
# section of the same file by the awk program in summary() below — never
# typed by hand. A figure whose section or row is missing reads "not
# measured" with the section it would come from. The single-section modes
# regenerate it too, so it always describes the file it heads.
set -u
BUILD=${BUILD:-build}
out=bench/results.md
tmp=$(mktemp); trap 'rm -f "$tmp" "$tmp".*' EXIT
quick=""; [ "${BENCH_QUICK:-0}" = 1 ] && quick=--quick

# summary FILE: the "## Issue 31 table" section from the sections of FILE.
# Tables are read by heading: a cell is found by its section (## heading),
# the first cell of its row (the row's label; the analysis tables' rows by
# "tool @ size") and its column's header, so reordered columns or added rows
# do not move a figure.
summary() {
    awk '
    function trim(s) { gsub(/^[ \t]+|[ \t]+$/, "", s); return s }
    /^## / { sec = substr($0, 4); intable = 0; next }
    /^\|/ {
        n = split($0, c, "|"); m = 0
        for (i = 2; i < n; i++) cell[++m] = trim(c[i])
        if (!intable) { intable = 1; for (i = 1; i <= m; i++) hdr[i] = cell[i]; nh = m; next }
        if (cell[1] ~ /^:?-+/) next
        lab = cell[1]; lab2 = cell[1] " @ " cell[2]
        if (!((sec, lab) in seen)) { seen[sec, lab] = 1; rows[sec, ++nrows[sec]] = lab }
        if (!((sec, lab2) in seen)) { seen[sec, lab2] = 1; rows[sec, ++nrows[sec]] = lab2 }
        # a size of the analysis measured once (bench-analysis.sh ROUNDS_BIG)
        # has no median: its wall cells say "(1 run)"
        if (sec == "analysis") for (i = 1; i <= m; i++) if (cell[i] ~ /\(1 run\)/) onerun[cell[2]] = 1
        # the first table to have a row and column keeps it
        for (i = 1; i <= m && i <= nh; i++) {
            if (!((sec, lab, hdr[i]) in v)) v[sec, lab, hdr[i]] = cell[i]
            if (!((sec, lab2, hdr[i]) in v)) v[sec, lab2, hdr[i]] = cell[i]
        }
        next
    }
    { intable = 0 }
    # the value of column H in the first row of section S whose label is R
    # or starts with R (a version number may follow a name); "" when none
    function get(s, r, h,   k, l) {
        for (k = 1; k <= nrows[s]; k++) {
            l = rows[s, k]
            if (substr(l, 1, length(r)) == r && (s, l, h) in v) return v[s, l, h]
        }
        return ""
    }
    function nm(s) { return "not measured (section \"" s "\")" }
    function num(x) { x = x ""; sub(/[^0-9.].*/, "", x); return x + 0 }
    # the analysis sizes in the order measured ("10 M", ...)
    function sizes(   k, l, p, t) {
        nsz = 0
        for (k = 1; k <= nrows["analysis"]; k++) {
            l = rows["analysis", k]
            if (index(l, "poolscope report @ ") == 1) sz[++nsz] = substr(l, 20)
        }
    }
    # "a / b / c" of column H of tool T over the sizes
    function series(t, h,   i, s, x) {
        s = ""
        for (i = 1; i <= nsz; i++) {
            x = get("analysis", t " @ " sz[i], h)
            s = s (i > 1 ? " / " : "") (x == "" ? "-" : x)
        }
        return s
    }
    # peak RSS of tool T at the largest size measured (at the smallest)
    function rss(t,   a, b) {
        a = get("analysis", t " @ " big, "peak RSS MiB"); b = get("analysis", t " @ " sz[1], "peak RSS MiB")
        return (a == "" ? "-" : a) (nsz > 1 ? " (" (b == "" ? "-" : b) ")" : "")
    }
    # the many-stacks section: its line "Bytes: our trace A MB, ...; the sql database C MB = Dx our trace."
    /^Bytes: our trace / && sec == "many stacks" { bytes_line = $0 }
    function ratio(a, b) { return (a == "" || b == "" || num(b) == 0) ? "-" : sprintf("%.2fx", num(a) / num(b)) }
    # the report wall time over the heaptrack_print wall time, at each size
    function ratios(   i, s, w, a, b) {
        s = ""; w = "wall s, median (min-max) or 1 run"
        for (i = 1; i <= nsz; i++) {
            a = get("analysis", "poolscope report @ " sz[i], w); b = get("analysis", "heaptrack_print @ " sz[i], w)
            s = s (i > 1 ? " / " : "") ratio(a, b)
        }
        return s
    }
    function mb_cell(lab,   p, h, r) {
        p = get("trace size", lab, "poolscope MB"); h = get("trace size", lab, "heaptrack MB")
        if (p == "") return "| " nm("trace size") " |"
        r = get("trace size", lab, "poolscope / heaptrack")
        return "| " (h == "" ? "-" : h " MB") " | " p " MB" (r == "" ? "" : " = " r "x heaptrack") " |"
    }
    # the churn rows of the trace size section: "h / h / h | p / p / p (r / r / r)"
    function churn_row(   k, l, n, h, p, r, lab) {
        n = 0; h = p = r = ""
        for (k = 1; k <= nrows["trace size"]; k++) {
            l = rows["trace size", k]
            if (index(l, "churn ") != 1 || index(l, " @ ")) continue
            n++
            h = h (n > 1 ? " / " : "") get("trace size", l, "heaptrack MB")
            p = p (n > 1 ? " / " : "") get("trace size", l, "poolscope MB")
            r = r (n > 1 ? " / " : "") get("trace size", l, "poolscope / heaptrack")
            lab = lab (n > 1 ? " / " : "") substr(l, 7)
        }
        if (!n) return "| trace bytes, churn, `--stacks none` | | " nm("trace size") " |"
        return "| trace bytes, churn " lab " calls, `--stacks none` (ours; heaptrack its own stacks) | " h " MB | " p " MB (" r "x) |"
    }
    END {
        sizes()
        szl = ""; for (i = 1; i <= nsz; i++) szl = szl (i > 1 ? " / " : "") num(sz[i])
        big = nsz ? sz[nsz] : ""
        once = ""; for (i = 1; i <= nsz; i++) if (sz[i] in onerun) once = once (once == "" ? "" : ", ") sz[i]
        print "## Issue 31 table"
        print ""
        print "Every row of issue 31'"'"'s table, filled from the sections below (`sh scripts/bench.sh summary` regenerates it from this file; each section says when and how it was measured). Analysis rows: the \"analysis\" section'"'"'s wall-clock medians" (once == "" ? "" : " (1 run at " once ": no median)") " on tests/progs/stress (4 threads, cross-thread frees, fp stacks) at " (nsz ? szl " M events" : "(no analysis section in this file)") ". Many-stacks rows: the \"many stacks\" section (PyTorch CPU inference, dwarf with Python frames), medians of its rounds."
        print ""
        print "| figure | heaptrack | poolscope now | goal |"
        print "|---|---|---|---|"
        if (nsz) {
            print "| `report` time / `heaptrack_print` time, each on its own trace (" szl " M events) | 1.00x | " ratios() " | <= 0.5x |"
            print "| analysis peak RSS MiB at " big " events" (nsz > 1 ? " (at " sz[1] ")" : "") " | heaptrack_print " rss("heaptrack_print") " | report " rss("poolscope report") ", replay " rss("poolscope replay") ", sql " rss("poolscope sql") ", export " rss("poolscope export folded") " | <= heaptrack_print'"'"'s, flat |"
        } else {
            print "| `report` time / `heaptrack_print` time | | " nm("analysis") " | <= 0.5x |"
            print "| analysis peak RSS | | " nm("analysis") " | <= heaptrack_print'"'"'s, flat |"
        }
        m = "many stacks"
        hw = get(m, "heaptrack_print", "wall s"); hr = get(m, "heaptrack_print", "peak RSS MiB")
        if (hw == "") {
            print "| many distinct stacks: report, folded, sql | | " nm(m) " | |"
        } else {
            rw = get(m, "poolscope report", "/ heaptrack_print"); rr = get(m, "poolscope report", "peak RSS MiB")
            fw = get(m, "poolscope export --format folded", "/ heaptrack_print"); fr = get(m, "poolscope export --format folded", "peak RSS MiB")
            hf = get(m, "heaptrack_print -F", "wall s")
            print "| many distinct stacks: `report` / `heaptrack_print` time; peak RSS | " hw " s; " hr " MiB | " rw "; " rr " MiB | <= 0.5x; <= heaptrack_print'"'"'s |"
            print "| many distinct stacks: `export --format folded` / `heaptrack_print -F` time; peak RSS | " hf " s; " hr " MiB | " fw "; " fr " MiB | <= 0.5x; <= heaptrack_print'"'"'s |"
            db = bytes_line; sub(/.*= /, "", db); sub(/ our trace.*/, "", db)
            print "| many distinct stacks: `sql` database / our trace | - | " (bytes_line == "" ? "-" : db) " | <= 5x |"
            hm = get(m, "poolscope html", "peak RSS MiB")
            print "| `html` peak RSS (issue: a llama.cpp dwarf trace; here the PyTorch one) | report " rr " MiB | " (hm == "" ? "-" : hm " MiB") " | <= report'"'"'s |"
        }
        if (nsz) {
            print "| `replay`, all default policies, M events/s | - | " series("poolscope replay", "M events/s") " | >= 6 |"
            dbe = get("analysis", big, "DB bytes/event")
            print "| `sql`, M events/s; database bytes per event (at " big ") | - | " series("poolscope sql", "M events/s") "; " (dbe == "" ? "-" : dbe " B") " | >= 6; <= 10 B |"
        } else {
            print "| `replay` | | " nm("analysis") " | >= 6 |"
            print "| `sql` | | " nm("analysis") " | >= 6; <= 10 B |"
        }
        t = "tracer overhead"
        tn = get(t, "poolscope record --stacks none", "slowdown")
        tw = get(t, "poolscope record --stacks none, whole command", "slowdown")
        th = get(t, "heaptrack", "slowdown")
        print "| tracer, churn, `--stacks none`, whole `record` | " (th == "" ? "-" : th " (whole heaptrack)") " | " (tw == "" ? nm(t) : tw (tn == "" ? "" : " (preload alone: " tn ")")) " | <= 1.5x |"
        print "| trace bytes, python3 dict workload, dwarf " mb_cell("dict") " <= heaptrack'"'"'s |"
        print churn_row() " <= heaptrack'"'"'s |"
        print "| trace bytes, PyTorch CPU forward loop, dwarf (not a goal of the issue) " mb_cell("torch") " - |"
    }' "$1"
}

# put_section NAME NEWFILE: replace the "## NAME" section of $out by NEWFILE
# (from its heading to the next "## " heading), or append NEWFILE
put_section() {
    if [ -f "$out" ] && grep -qx "## $1" "$out"; then
        awk -v name="## $1" -v sec="$2" '
            $0 == name { while ((getline l < sec) > 0) print l; print ""; skip = 1; next }
            skip && /^## / { skip = 0 }
            !skip { print }' "$out" >"$tmp.new" && cp "$tmp.new" "$out"
    else
        mkdir -p bench
        { [ -f "$out" ] && cat "$out"; cat "$2"; echo; } >"$tmp.new" && cp "$tmp.new" "$out"
    fi
}

# put_summary: (re)write the summary at the top of $out, after the preamble
# (the lines before the first "## " heading)
put_summary() {
    [ -f "$out" ] || return 0
    summary "$out" >"$tmp.sum"
    awk -v sec="## Issue 31 table" '$0 == sec { skip = 1; next } skip && /^## / { skip = 0 } !skip { print }' \
        "$out" >"$tmp.rest"
    awk -v sum="$tmp.sum" '
        !done && /^## / { while ((getline l < sum) > 0) print l; print ""; done = 1 }
        { print }
        END { if (!done) { print ""; while ((getline l < sum) > 0) print l } }' "$tmp.rest" >"$tmp.new" &&
        cp "$tmp.new" "$out"
}

case ${1:-} in
summary)
    [ -f "$out" ] || { echo "bench: no $out: run make bench" >&2; exit 2; }
    put_summary
    echo "bench: wrote the summary of $out" >&2
    exit 0 ;;
"") ;;
*)  # one benchmark: build/bench/bench_NAME or scripts/bench-NAME.sh, its section replaced
    if [ -x "$BUILD/bench/bench_$1" ]; then
        echo "bench: bench_$1" >&2
        "$BUILD/bench/bench_$1" $quick >"$tmp" || { echo "bench: bench_$1 failed" >&2; exit 1; }
    elif [ -f "scripts/bench-$1.sh" ]; then
        echo "bench: bench-$1.sh" >&2
        BUILD="$BUILD" BENCH_QUICK="${BENCH_QUICK:-0}" sh "scripts/bench-$1.sh" >"$tmp" ||
            { echo "bench: bench-$1.sh failed" >&2; exit 1; }
    else
        echo "usage: sh scripts/bench.sh [summary|NAME] (NAME: $BUILD/bench/bench_NAME or scripts/bench-NAME.sh)" >&2
        exit 2
    fi
    grep -q '^## ' "$tmp" || { echo "bench: $1 printed no \"## \" heading" >&2; exit 1; }
    # each "## " section it printed replaces its namesake
    awk -v base="$tmp.sec" '/^## / { f = base "." ++n; print substr($0, 4) > (base ".names") } n { print > f }' "$tmp"
    i=0
    while read -r sec; do
        i=$((i + 1)); put_section "$sec" "$tmp.sec.$i"
        # the preamble's date is the whole run's: say which section is newer
        d=$(date -u +%Y-%m-%d)
        awk -v s="$sec" -v d="$d" '!done && /^Generated by/ {
                n = index($0, "; \"" s "\" re-run alone on ")
                if (n) { rest = substr($0, n + 1); m = index(rest, ";"); $0 = substr($0, 1, n - 1) (m ? substr(rest, m) : "") }
                sub(/\.$/, ""); $0 = $0 "; \"" s "\" re-run alone on " d "."; done = 1 }
            { print }' "$out" >"$tmp.new" && cp "$tmp.new" "$out"
        echo "bench: wrote the \"$sec\" section of $out" >&2
    done <"$tmp.sec.names"
    put_summary
    exit 0 ;;
esac

{
    echo "# poolscope benchmark results"
    echo
    echo "Generated by \`make bench\` on $(date -u +%Y-%m-%d) — $(grep -m1 'model name' /proc/cpuinfo | sed 's/.*: //'), $(nproc) cores."
    echo "Machines are shared and noisy: read ratios measured side by side, not absolute times across runs."
    echo
} >"$tmp.head"

rc=0
start=$(date +%s)
: >"$tmp"
for b in "$BUILD"/bench/bench_*; do
    [ -x "$b" ] || continue
    echo "bench: $(basename "$b")" >&2
    if ! "$b" $quick >>"$tmp"; then echo "bench: $(basename "$b") failed" >&2; rc=1; fi
    echo >>"$tmp"
done
for s in scripts/bench-*.sh; do
    [ -f "$s" ] || continue
    name=$(basename "$s" .sh)
    # an A/B of two builds needs the other one: not a figure of this tree
    if [ "$name" = bench-tracer-ab ] && [ -z "${BASE:-}" ]; then
        echo "bench: $name.sh skipped (BASE= the other build directory)" >&2; continue
    fi
    echo "bench: $name.sh ($(($(date +%s) - start)) s so far)" >&2
    if ! BUILD="$BUILD" BENCH_QUICK="${BENCH_QUICK:-0}" sh "$s" >"$tmp.one"; then
        echo "bench: $name.sh failed" >&2; rc=1
    fi
    # a script that prints no "## " heading of its own gets one, so that its
    # tables do not read as part of the section before
    grep -q . "$tmp.one" && ! sed -n '/./{p;q;}' "$tmp.one" | grep -q '^## ' &&
        printf '## %s\n\n`sh scripts/%s.sh`\n\n' "${name#bench-}" "$name" >>"$tmp"
    cat "$tmp.one" >>"$tmp"
    echo >>"$tmp"
done
{ cat "$tmp.head"; summary "$tmp"; echo; cat "$tmp"; } >"$tmp.all"
mkdir -p bench
cp "$tmp.all" "$out"
echo "bench: wrote $out ($(($(date +%s) - start)) s)" >&2
exit $rc
