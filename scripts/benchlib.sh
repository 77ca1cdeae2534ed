# benchlib.sh — sourced by the benchmark scripts that time whole commands
# with bench/timerss.c (bench-analysis.sh, bench-many-stacks.sh).

# stats FILE: "median_wall min_wall max_wall median_cpu max_rss_kib
# worst_status" over the lines timerss appended to FILE (wall, user, sys,
# peak RSS KiB, status); "- - - - 0 -" when it has none
stats() {
    awk '{ w[NR] = $1; c[NR] = $2 + $3; if ($4 > rss) rss = $4; if ($5 != 0) st = $5 }
         function med(a, n,   i, j, t) {
             for (i = 1; i <= n; i++) for (j = i + 1; j <= n; j++) if (a[j] < a[i]) { t = a[i]; a[i] = a[j]; a[j] = t }
             return n % 2 ? a[(n + 1) / 2] : (a[n / 2] + a[n / 2 + 1]) / 2 }
         END { n = NR; if (!n) { print "- - - - 0 -"; exit }
               mw = med(w, n); lo = w[1]; hi = w[n]; mc = med(c, n)
               printf "%.3f %.3f %.3f %.3f %d %d\n", mw, lo, hi, mc, rss, st + 0 }' "$1"
}

# rotated R WORD...: the words, starting from the (R mod count)-th: round R
# of a benchmark runs its tools in this order, so a loaded machine weighs
# on each of them alike over the rounds
rotated() {
    _rot=$1; shift
    echo "$@" | awk -v r="$_rot" '{ for (i = 0; i < NF; i++) printf "%s ", $((i + r) % NF + 1) }'
}

# run_rounds N LABEL TOOL...: N rounds, each calling the script's one_run
# for every TOOL in the order rotated by the round, and its progress with
# LABEL, the round and the seconds since t_start
run_rounds() {
    _n=$1 _label=$2; shift 2
    _round=0
    while [ $_round -lt "$_n" ]; do
        for _tool in $(rotated $_round "$@"); do one_run "$_tool"; done
        _round=$((_round + 1))
        progress "${_label}round $_round/$_n ($(($(date +%s) - t_start)) s so far)"
    done
}
